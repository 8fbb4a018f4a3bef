"""The quick path of `harness exec`: a one-shot command the warm service answers, with nothing heavy
imported (no typer, rich, pydantic or docker SDK, nor `typing` or `pathlib`: an interpreter start, the
standard library's socket and json, and one round trip through `sandbox.warm.wire`).

Only the plain form is taken here: `harness exec PATH [--image NAME] [--json] -- CMD...`. Anything
else (other flags, `--help`, a session, a path that does not exist) returns None and the full command
line handles it, on the warm service too when one runs (`sandbox_cmds.execute`). With no warm service
for this engine the plain form still skips the command line: its container is started for it by the
function the full command calls (`engine.execute_once`; the docker SDK and pydantic load then, typer
and rich never). The output is what the full command prints: the envelope's JSON, or its headline,
stdout and stderr, control characters made visible.
"""

from __future__ import annotations

import json
import os
import sys

from harness.cli import environment
from harness.cli.terminal import visible
from sandbox.exit_code import ExitCode
from sandbox.warm import wire

TYPE_CHECKING = False  # typing's, without importing it
if TYPE_CHECKING:
    from typing import Any

BOLD_GREEN, BOLD_RED, DIM, RESET = "\x1b[1;32m", "\x1b[1;31m", "\x1b[2m", "\x1b[0m"
MALFORMED = "the warm service sent a malformed reply; restart it (harness warm stop)"


def parse(argv: list[str]) -> tuple[str, str, bool, list[str]] | None:
    """(path, image, as_json, command) of the plain form, or None for anything else."""
    if len(argv) < 4 or argv[0] != "exec" or "--" not in argv:
        return None
    split = argv.index("--")
    path, options, command = argv[1], argv[2:split], argv[split + 1 :]
    if path.startswith("-") or not command:
        return None
    image, as_json = "py311", False
    while options:
        option = options.pop(0)
        if option == "--json":
            as_json = True
        elif option == "--image" and options and not options[0].startswith("-"):
            image = options.pop(0)
        elif option.startswith("--image=") and len(option) > len("--image="):
            image = option.split("=", 1)[1]
        else:
            return None
    return path, image, as_json, command


def run(argv: list[str]) -> int | None:
    """The exit code of the quick path, or None when it does not apply here."""
    if argv == ["--version"]:  # what typer's eager option prints, without loading the command line
        from harness.version import harness_version

        print(f"harness {harness_version()}")
        return 0
    plain = parse(argv)
    if plain is None:
        return None
    path, image, as_json, command = plain
    request = wire.exec_request(os.path.abspath(path), command, {"image": image})
    try:
        reply = wire.exec_reply(wire.ask(environment.warm_folder(), request))
    except wire.Unavailable:
        return _cold(path, image, as_json, command)
    except ValueError:
        return _error(MALFORMED, ExitCode.INTERNAL)
    if "error" in reply:
        return _error(visible(reply["error"]), reply["exit_code"])
    return _printed(reply["envelope"], reply["headline"], as_json)


def _cold(path: str, image: str, as_json: bool, command: list[str]) -> int | None:
    """No warm service: the call in a container started for it (what the full command does on its cold
    path, through the same function), still without the command line's typer and rich. A path that
    does not exist goes to the full command, which says so."""
    if not os.path.exists(path):
        return None
    from pathlib import Path

    from harness.assembly import engine
    from harness.cli.failure import error_line, exit_code_for, internal_line, sigterm_interrupts
    from harness.errors import HarnessError
    from sandbox.errors import SandboxError
    from sandbox.spec import SandboxSpec

    try:
        with sigterm_interrupts():
            envelope = engine.execute_once(
                environment.docker_host(),
                environment.run_id("cli"),
                Path(path),
                command,
                SandboxSpec(image=image),
                None,
            )
    except (HarnessError, SandboxError, OSError) as error:  # as the full command says them
        return _error(visible(error_line(error)), exit_code_for(error))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    except Exception as error:
        if environment.show_tracebacks():
            raise
        print(f"{_styled(sys.stderr, 'internal error:', BOLD_RED)} {visible(internal_line(error))}", file=sys.stderr)
        return int(ExitCode.INTERNAL)
    return _printed(envelope.model_dump(mode="json"), envelope.headline(), as_json)


def _printed(envelope: dict[str, Any], headline: str, as_json: bool) -> int:
    """Print an envelope as the full command does (control characters made visible); its exit code."""
    code = int(envelope["exit_code"])
    try:
        if as_json:
            print(json.dumps(envelope))
        else:
            print(_styled(sys.stdout, visible(headline), BOLD_GREEN if envelope["status"] == "ok" else BOLD_RED))
            for name in ("stdout", "stderr"):
                if envelope.get(name):
                    print(_styled(sys.stdout, f"--- {name} ---", DIM))
                    print(visible(str(envelope[name]).rstrip("\n")))
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (`| head`): the command's code all the same
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return code


def _error(message: str, code: int) -> int:
    print(f"{_styled(sys.stderr, 'error:', BOLD_RED)} {message}", file=sys.stderr)
    return code


def _styled(stream: Any, text: str, style: str) -> str:
    """text in style at a colour terminal, as rich would print it; plain otherwise."""
    if not stream.isatty() or os.environ.get("NO_COLOR") or os.environ.get("TERM") == "dumb":
        return text
    return f"{style}{text}{RESET}"
