"""The typer application, the shared consoles, and the one translation of errors to a line and an exit code."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, cast

import typer

if TYPE_CHECKING:
    from rich.console import Console

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

app = typer.Typer(
    name="harness",
    help="Run an LLM coding agent on an untrusted repository; every tool call in a disposable container.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain help: rich help would import rich.markdown and markdown-it at every start (fast start).
    rich_markup_mode=None,
)
bench_app = typer.Typer(
    help="Benchmarks that print ratios measured side by side in one run.", no_args_is_help=True, rich_markup_mode=None
)
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
