"""The quick path of the read commands a person runs dozens of times over a night's sessions:
`harness show SESSION`, `harness session list`, `harness diff SESSION`, `harness export SESSION`
(a patch) and `harness report DIR...` (Markdown or JSON), in their plain forms and with their common
options.

They print what the full command prints, through the same functions (`run_view.show`,
`listing.render_sessions`, `changes`, `render.text_report`), without building the command line: no
typer, no pydantic models (the views and the report read the records as plain JSON, diff and export
the snapshots' trees). Any other form (`--json`, `--help`, an option given twice, one it does not
know) returns None and the full command line handles it, usage errors included.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NamedTuple

from sandbox.exit_code import ExitCode


class Form(NamedTuple):
    """A command the quick path takes: its words, how many arguments (MANY: one or more), its options
    with a value, its options without one, and the `--format`s it takes here (the first: its default)."""

    words: tuple[str, ...]
    arguments: int
    values: frozenset[str]
    flags: frozenset[str] = frozenset()
    formats: tuple[str, ...] = ()


MANY = -1
STATE = "--state-dir"
OUTPUT = frozenset({"-o", "--output"})
LIMIT = frozenset({"--limit", "-n"})
ALIASES = (OUTPUT, LIMIT)
FORMS = (
    Form(("show",), 1, frozenset({STATE, "--step"}), frozenset({"-v", "--verbose"})),
    Form(("session", "list"), 0, frozenset({STATE, "--outcome", "--limit", "-n"}), frozenset({"-l", "--long"})),
    Form(("diff",), 1, frozenset({STATE, "--from", "--to"})),
    Form(("export",), 1, frozenset({STATE, "--format", *OUTPUT}), frozenset({"--check", "--no-check"}), ("patch",)),
    Form(("report",), MANY, frozenset({"--format", *OUTPUT}), formats=("md", "json")),
)
INTEGERS = frozenset({"--from", "--to", "--step", "--limit", "-n"})
SESSION_COMMANDS = frozenset(" ".join(form.words) for form in FORMS if STATE in form.values)


class Plain(NamedTuple):
    """A plain form as given: the command, its arguments, its options' values, its flags."""

    command: str
    arguments: list[str]
    values: dict[str, str]
    flags: set[str]


def parse(argv: list[str]) -> Plain | None:
    """The plain form argv is, or None for anything else."""
    form = next((f for f in FORMS if tuple(argv[: len(f.words)]) == f.words), None)
    if form is None or "--" in argv:
        return None
    rest, arguments = list(argv[len(form.words) :]), []
    values: dict[str, str] = {}
    flags: set[str] = set()
    while rest:
        word = rest.pop(0)
        name, equals, value = word.partition("=")
        if not word.startswith("-"):
            arguments.append(word)
            continue
        if name in form.values and not equals:
            if not rest or rest[0].startswith("-"):
                return None
            value = rest.pop(0)
        elif word in form.flags:
            if flags:
                return None
            flags.add(word)
            continue
        elif name not in form.values:
            return None
        same = next((group for group in ALIASES if name in group), {name})
        if not value or same & values.keys() or (name in INTEGERS and not _integer(value)):
            return None
        if name in LIMIT and int(value) < 0:
            return None  # typer's own words for a value below its minimum
        values[name] = value
    many = form.arguments == MANY and len(arguments) >= 1
    if not (many or len(arguments) == form.arguments):
        return None
    if "--format" in values and values["--format"] not in form.formats:
        return None
    return Plain(" ".join(form.words), arguments, values, flags)


def run(argv: list[str]) -> int | None:
    """The exit code of the quick path, or None when it does not apply."""
    plain = parse(argv)
    if plain is None:
        return None
    from harness.cli import environment
    from harness.cli.failure import KNOWN, say
    from harness.cli.terminal import visible_console

    try:
        _run(plain)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    except KNOWN as error:
        return say(visible_console(stderr=True), error)
    except Exception as error:
        if environment.show_tracebacks():
            raise
        return say(visible_console(stderr=True), error)
    sys.stdout.flush()
    return 0


def _run(plain: Plain) -> None:
    from harness.cli.environment import session_at, state_dir
    from harness.cli.terminal import visible_console

    # resolved only for the commands that read sessions (`report` reads batch directories); a session
    # may be named by its folder (a batch's), whose parent is then where it lives
    sessions = state_dir(_path(plain.values.get(STATE))) if plain.command in SESSION_COMMANDS else Path()
    if plain.command in ("show", "diff", "export"):
        sessions, named = session_at(_path(plain.values.get(STATE)), plain.arguments[0])
        plain.arguments[0] = named
    if plain.command == "show":
        from harness.cli.run_view import show
        from harness.errors import UsageError

        step = _int(plain.values.get("--step"))
        if step is not None and step < 1:
            raise UsageError(f"--step is a step number (1 or more), not {step}")
        verbose = bool(plain.flags & {"-v", "--verbose"})
        show(visible_console(stderr=False), sessions, plain.arguments[0], verbose=verbose, step=step)
    elif plain.command == "session list":
        from harness.cli.listing import render_sessions

        limit = _int(plain.values.get("--limit") or plain.values.get("-n")) or None
        long = bool(plain.flags & {"-l", "--long"})
        render_sessions(
            visible_console(stderr=False), sessions, long=long, outcome=plain.values.get("--outcome"), limit=limit
        )
    elif plain.command == "diff":
        from harness.cli import changes

        to = plain.values.get("--to")
        found = changes.diff(sessions, plain.arguments[0], int(plain.values.get("--from", 0)), _int(to))
        changes.print_diff(visible_console(stderr=False), found)
    elif plain.command == "report":
        from harness.cli.terminal import write_visible
        from harness.report.render import text_report

        output = _output(plain)
        text = text_report([Path(folder) for folder in plain.arguments], plain.values.get("--format", "md"))
        if output is None:
            write_visible(text)
        else:
            output.write_text(text, encoding="utf-8")
            visible_console(stderr=False).print(f"wrote {output}", soft_wrap=True, markup=False)
    else:  # export: no console unless it fails (the patch goes out byte for byte)
        from harness.cli import changes

        output = _output(plain)
        patch = changes.export(sessions, plain.arguments[0], output, check="--no-check" not in plain.flags)
        if output is None:
            changes.print_patch(patch)
        else:
            changes.say_written(output)


def _integer(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def _int(text: str | None) -> int | None:
    return None if text is None else int(text)


def _output(plain: Plain) -> Path | None:
    return _path(plain.values.get("-o") or plain.values.get("--output"))


def _path(text: str | None) -> Path | None:
    return None if text is None else Path(text)
