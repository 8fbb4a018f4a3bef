"""The quick path of `harness exec`: a one-shot command the warm service answers, with nothing heavy
imported (no typer, rich, pydantic or docker SDK: an interpreter start and one round trip).

Only the plain form is taken here: `harness exec PATH [--image NAME] [--json] -- CMD...`. Anything
else (other flags, `--help`, a session), or no warm service for this engine, returns None and the
full command line handles it, on the warm service too when one runs (`sandbox_cmds.execute`). The
output is what the full command prints: the envelope's JSON, or its headline, stdout and stderr.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from harness.cli import environment
from sandbox.exit_code import ExitCode
from sandbox.warm import protocol
from sandbox.warm.messages import ErrorReply, ExecRequest

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
    plain = parse(argv)
    if plain is None:
        return None
    path, image, as_json, command = plain
    request = ExecRequest(path=os.path.abspath(path), argv=command, spec={"image": image})
    try:
        reply = protocol.execute(environment.warm_dir(), request)
    except protocol.Unavailable:
        return None
    except ValueError:
        return _error(MALFORMED, ExitCode.INTERNAL)
    if isinstance(reply, ErrorReply):
        return _error(reply.error, reply.exit_code)
    envelope: dict[str, Any] = reply.envelope
    code = int(envelope["exit_code"])
    try:
        if as_json:
            print(json.dumps(envelope))
        else:
            print(_styled(sys.stdout, reply.headline, BOLD_GREEN if envelope["status"] == "ok" else BOLD_RED))
            for name in ("stdout", "stderr"):
                if envelope.get(name):
                    print(_styled(sys.stdout, f"--- {name} ---", DIM))
                    print(str(envelope[name]).rstrip("\n"))
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
