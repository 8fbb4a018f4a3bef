"""The quick path of the read commands a person runs dozens of times over a night's sessions:
`harness show SESSION` and `harness session list`, in their plain forms (and with `--state-dir DIR`).

They print what the full command prints, through the same functions (`run_view.show`,
`listing.render_sessions`), without building the command line: no typer, no pydantic models (the
views read the records as plain JSON). Any other form (`--json`, `--help`, a flag it does not know)
returns None and the full command line handles it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from sandbox.exit_code import ExitCode

STATE = "--state-dir"


def parse(argv: list[str]) -> tuple[str, Path | None, str] | None:
    """(command, --state-dir, session) of a plain form, or None for anything else."""
    words, state = list(argv), None
    given = [word for word in words if word == STATE or word.startswith(STATE + "=")]
    if len(given) > 1:
        return None
    if given == [STATE]:
        at = words.index(STATE)
        if at + 1 >= len(words) or not words[at + 1] or words[at + 1].startswith("-"):
            return None
        state = Path(words[at + 1])
        del words[at : at + 2]
    elif given:
        value = given[0].split("=", 1)[1]
        if not value:
            return None
        state = Path(value)
        words.remove(given[0])
    if any(word.startswith("-") for word in words):
        return None
    if len(words) == 2 and words[0] == "show":
        return "show", state, words[1]
    if words == ["session", "list"]:
        return "session list", state, ""
    return None


def run(argv: list[str]) -> int | None:
    """The exit code of the quick path, or None when it does not apply."""
    plain = parse(argv)
    if plain is None:
        return None
    command, state, session = plain
    from harness.cli import environment
    from harness.cli.failure import KNOWN, say
    from harness.cli.terminal import visible_console

    console = visible_console(stderr=False)
    try:
        sessions = environment.state_dir(state)
        if command == "show":
            from harness.cli.run_view import show

            show(console, sessions, session)
        else:
            from harness.cli.listing import render_sessions

            render_sessions(console, sessions)
    except KeyboardInterrupt:
        visible_console(stderr=True).print("interrupted")
        return int(ExitCode.INTERRUPTED)
    except KNOWN as error:
        return say(visible_console(stderr=True), error)
    except Exception as error:
        if environment.show_tracebacks():
            raise
        return say(visible_console(stderr=True), error)
    sys.stdout.flush()
    return 0
