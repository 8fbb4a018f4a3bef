"""The typer application, the shared consoles, and the one translation of errors to a line and an exit code."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, cast

import typer
from typer.core import TyperGroup

if TYPE_CHECKING:
    from rich.console import Console
    from typer._click import Context, HelpFormatter  # typer's own click, the one its groups take

from harness.cli import environment
from harness.cli.environment import docker_host, state_dir
from harness.cli.failure import KNOWN, exit_code_for, say
from harness.errors import ExitCode, HarnessError
from sandbox.errors import SandboxError

__all__ = [
    "ALLOW_NET",
    "ALLOW_NET_CA",
    "ALLOW_NET_TOOLS",
    "CA_BUNDLE",
    "OTEL_CONTENT",
    "OTEL_ENDPOINT",
    "OTEL_FILE",
    "SECRET",
    "ExitCode",
    "absolute",
    "app",
    "bench_app",
    "console",
    "docker_host",
    "err_console",
    "fail",
    "reported",
    "state_dir",
]

SECTIONS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("Run an agent", (
        ("run", "Run an agent on a repository until its tests pass"),
        ("resume", "Continue a run from its last complete step"),
        ("batch", "Run a tasks file's task-runs overnight, resumable"),
        ("fork", "New sessions going on from a session's step K"),
        ("exec", "One command in a disposable container on a repo's copy"),
        ("tool", "One tool call in a session, gated, as a step"),
        ("acp", "harness's agent for an editor or terminal client (ACP)"),
        ("mcp", "harness's sandbox for an MCP client's tool calls"),
        ("env", "Episodes of a task for a trainer (OpenEnv's protocol)"),
    )),
    ("Read what happened", (
        ("show", "A session's steps, calls, outputs and outcome"),
        ("view", "A session, batch or ATIF trajectory as a web page"),
        ("report", "A batch's completion, cost and accuracy per model"),
        ("diff", "The workspace's changes between two steps"),
        ("session", "List, show and remove sessions"),
        ("replay", "Re-issue a session's calls and say where results differ"),
    )),
    ("Undo and land", (
        ("rollback", "Put a session back as it was after step N"),
        ("export", "A session's change as a patch, or its trajectory as ATIF"),
        ("apply", "Each change as a commit on a new branch of the repository"),
    )),
    ("Tasks and answers", (
        ("tasks", "Mine tasks from a repository's history and check them"),
        ("approvals", "Answer what unattended runs wait on"),
    )),
    ("This machine", (
        ("doctor", "Check the engine, runtimes, images and disk"),
        ("images", "Build and list the sandbox images"),
        ("sandbox", "Maintain sandbox containers"),
        ("warm", "Keep containers started for quick `harness exec`"),
        ("worker", "Serve a batch cluster as a Dask worker"),
        ("models", "Check model endpoints"),
        ("tools", "The tool menu the model sees"),
        ("bench", "Benchmarks: ratios measured side by side"),
    )),
)  # fmt: skip
"""`harness --help`'s commands, in the order a person meets them, each with one line (`harness COMMAND
--help` says the rest); a test keeps every command in a section."""


class _Sectioned(TyperGroup):
    """The top-level help: commands in sections, each with its one line; a command no section names
    comes last, under Other, with its help's first sentence (wrapping, never cut with "...")."""

    def list_commands(self, ctx: Context) -> list[str]:
        known = [name for _, rows in SECTIONS for name, _ in rows]
        given = super().list_commands(ctx)
        return [name for name in known if name in given] + sorted(set(given) - set(known))

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        listed = self.list_commands(ctx)
        lines = {name: line for _, rows in SECTIONS for name, line in rows}
        other = tuple((name, "") for name in listed if name not in lines)
        width = max(len(name) for name in listed)
        for title, named in (*SECTIONS, ("Other", other)):
            rows = []
            for name, line in named:
                command = self.get_command(ctx, name)
                if command is not None and name in listed and not command.hidden:
                    rows.append((name.ljust(width), line or _first_sentence(command.help or command.short_help or "")))
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)
        formatter.write_paragraph()
        formatter.write_text("`harness COMMAND --help` says more of each.")


class _Whole(TyperGroup):
    """A command group's help: its commands in the order they were made, each with its help's first
    sentence whole (wrapping, never cut with "...")."""

    def list_commands(self, ctx: Context) -> list[str]:
        return list(self.commands)

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        rows = [
            (name, _first_sentence(command.help or command.short_help or ""))
            for name, command in self.commands.items()
            if not command.hidden
        ]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def group(help: str) -> typer.Typer:
    """A command group (`harness session ...`): plain help (rich help would import markdown-it at every
    start), its commands listed whole."""
    return typer.Typer(help=help, no_args_is_help=True, rich_markup_mode=None, cls=_Whole)


def _first_sentence(text: str) -> str:
    """A command's help up to the end of its first sentence, whole."""
    flat = " ".join(text.split())
    end = flat.find(". ")
    return flat if end < 0 else flat[: end + 1]


app = typer.Typer(
    name="harness",
    cls=_Sectioned,
    help="Run an LLM coding agent on an untrusted repository; every tool call in a disposable container.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain help: rich help would import rich.markdown and markdown-it at every start (fast start).
    rich_markup_mode=None,
)
bench_app = group("Benchmarks that print ratios measured side by side in one run.")
app.add_typer(bench_app, name="bench")


def _print_version(value: bool) -> None:
    if value:
        from harness.version import harness_version

        print(f"harness {harness_version()}")
        raise typer.Exit(0)


@app.callback()
def _top(
    version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_print_version, help="Print harness's version and exit."
    ),
) -> None:
    """Run an LLM coding agent on an untrusted repository; every tool call in a disposable container."""


class _LazyConsole:
    """A rich Console made on first use: importing rich.console is a fifth of the start-up time, and
    `harness --help` never prints through it."""

    def __init__(self, stderr: bool) -> None:
        self._stderr = stderr
        self._console: Console | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real(), name)

    def real(self) -> Console:
        """The Console itself (for what needs the object, not its methods: rich's Live)."""
        if self._console is None:
            from harness.cli.terminal import visible_console

            self._console = visible_console(stderr=self._stderr)
        return self._console


# The network flags of the commands that make or continue sessions (run, resume; exec has its own).
ALLOW_NET = typer.Option(
    None,
    "--allow-net",
    help="HOST[:PORT|:*], *.SUFFIX, ADDRESS[/BITS] or a preset (pypi, npm, crates, go, github, debian) the setup "
    "may reach through the session's egress proxy (repeatable); everything else is refused and recorded.",
)
ALLOW_NET_TOOLS = typer.Option(
    None, "--allow-net-tools", help="Tool calls reach the --allow-net hosts too (not only setup)."
)

SECRET = typer.Option(
    None,
    "--secret",
    help="NAME=ENV_VAR@HOST: the container's NAME is a placeholder; only requests to HOST get $ENV_VAR's value "
    "in its place, at the egress proxy (repeatable; HOST is allowed by it).",
)
ALLOW_NET_CA = typer.Option(
    None, "--allow-net-ca", help="PEM bundle the egress proxy also trusts for a --secret's host (an internal CA)."
)
CA_BUNDLE = typer.Option(
    None,
    "--ca-bundle",
    help="PEM bundle the whole session trusts: setup, the calls that reach --allow-net hosts, and the proxy for "
    "a --secret's host (an intercepting TLS proxy's CA, e.g. /etc/ssl/certs/ca-certificates.crt).",
)

# The OpenTelemetry flags of the commands that run agents (run, resume, batch).
OTEL_ENDPOINT = typer.Option(
    None,
    "--otel-endpoint",
    help="Send OpenTelemetry spans over OTLP/HTTP to this URL (default: $OTEL_EXPORTER_OTLP_[TRACES_]ENDPOINT).",
)
OTEL_FILE = typer.Option(None, "--otel-file", help="Append the spans as OTLP JSON lines to this file.")
OTEL_CONTENT = typer.Option(
    False, "--otel-content", help="Put prompts, replies, tool arguments and output in the spans (off: counts only)."
)


def absolute(path: Path | None) -> str | None:
    """A file flag's path made absolute here (the proxy and the setup read it from elsewhere)."""
    return str(path.expanduser().absolute()) if path is not None else None


def real_console(console: Console) -> Console:
    """The Console behind one of this module's lazy consoles (or the console itself)."""
    return console.real() if isinstance(console, _LazyConsole) else console


console = cast("Console", _LazyConsole(stderr=False))
err_console = cast("Console", _LazyConsole(stderr=True))


def fail(message: str, code: int) -> NoReturn:
    """Print a one-line error and exit with `code`. The message is data, never markup: it quotes
    servers, paths and keys' redaction marks (`[redacted]`, `[/docs/models]`)."""
    from rich.markup import escape

    err_console.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    raise typer.Exit(int(code))


@contextlib.contextmanager
def reported() -> Iterator[None]:
    """Turn our exceptions into a one-line error and a distinct exit code."""
    try:
        yield
    except (HarnessError, SandboxError) as error:
        fail(str(error), exit_code_for(error))


def main() -> None:
    """Console-script entry: usage errors exit 64 with one line, never a traceback."""
    try:
        result = app(standalone_mode=False)
    except typer.Exit as done:
        sys.exit(done.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        err_console.print("interrupted")
        sys.exit(int(ExitCode.INTERRUPTED))
    except typer.TyperException as error:
        ctx = getattr(error, "ctx", None)
        # `harness`, `harness tasks`: the help, as --help prints it (the class by name, as typer itself
        # tells it apart: typer vendors click in some releases and not in others)
        if type(error).__name__ == "NoArgsIsHelpError" and ctx is not None:
            print(ctx.get_help())
            sys.exit(0)
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        from rich.markup import escape

        err_console.print(f"[bold red]error:[/] {escape(error.format_message() + hint)}", soft_wrap=True)
        sys.exit(int(ExitCode.USAGE))
    except KNOWN as error:  # raised outside a command's `reported()` block: still one line and its code
        sys.exit(say(err_console, error))
    except Exception as error:
        if environment.show_tracebacks():
            raise
        sys.exit(say(err_console, error))
    sys.exit(result if isinstance(result, int) else 0)
