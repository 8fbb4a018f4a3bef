"""The typer application, shared console, exit codes and error translation for every command."""

from __future__ import annotations

import contextlib
import os
import sys
from enum import IntEnum
from pathlib import Path
from typing import Iterator, NoReturn

import platformdirs
import typer
from rich.console import Console

from harness.errors import ConfigError, HarnessError, ModelAuthError, ModelError, ModelSpendLimitError, SessionError
from sandbox.errors import (
    EngineUnavailable,
    ImageNotFound,
    PatchConflict,
    RuntimeUnavailable,
    SandboxError,
    SessionNotFound,
    SpecError,
    StepOutOfRange,
    WorkspaceError,
)

app = typer.Typer(
    name="harness",
    help="Run an LLM coding agent on an untrusted repository; every tool call in a disposable container.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
bench_app = typer.Typer(help="Benchmarks that print ratios measured side by side in one run.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)


class ExitCode(IntEnum):
    """Exit codes of harness itself (`harness exec` otherwise exits with the command's own code)."""

    OK = 0
    """`harness run`/`resume`: outcome verified."""
    UNVERIFIED = 10
    """Run outcome `unverified`: the model finished but no verify command was configured."""
    FAILED_VERIFICATION = 11
    """Run outcome `failed_verification`: the verify command still failed after the allowed rounds."""
    STUCK = 12
    """Run outcome `stuck`: the circuit breaker tripped (same tool failing, same tests failing)."""
    LIMIT = 13
    """Run outcome `limit:<which>`: a step, token, cost, wall-clock or context budget was spent."""
    MODEL_ERROR = 14
    """Run outcome `model_error`: the model call failed past the retry policy (run is resumable)."""
    USAGE = 64
    """Bad flag, argument or limit."""
    PATCH_CONFLICT = 65
    """The exported patch no longer applies to the original repository (it changed since import)."""
    NOT_FOUND = 66
    """Repository path, session, step or file does not exist."""
    MODEL_UNAVAILABLE = 69
    """The model endpoint failed: unreachable, timed out, rate limited past the retry budget, bad answer."""
    MODEL_AUTH = 77
    """The model endpoint rejected the API key (or the account's spend limit is reached)."""
    CONFIG = 78
    """Invalid config file or script."""
    IMAGE_MISSING = 71
    """The sandbox image is not present locally (images are never pulled): build or load it."""
    RUNTIME_MISSING = 72
    """The requested container runtime (e.g. runsc) is not registered with the engine."""
    SANDBOX = 125
    """The sandbox could not run the command: no Docker engine answers, or the engine failed."""
    ENGINE_UNAVAILABLE = 125
    """No Docker engine answers (alias of SANDBOX: the engine is what runs every sandbox)."""
    INTERRUPTED = 130


def fail(message: str, code: ExitCode) -> NoReturn:
    """Print a one-line error and exit with `code`."""
    err_console.print(f"[bold red]error:[/] {message}", soft_wrap=True)
    raise typer.Exit(int(code))


def exit_code_for(error: BaseException) -> ExitCode:
    """Map an exception from our trees to the documented exit code."""
    if isinstance(error, PatchConflict):
        return ExitCode.PATCH_CONFLICT
    if isinstance(error, StepOutOfRange):
        return ExitCode.USAGE  # a step number the session lacks is a bad argument value, not a missing session
    if isinstance(error, ImageNotFound):
        return ExitCode.IMAGE_MISSING
    if isinstance(error, RuntimeUnavailable):
        return ExitCode.RUNTIME_MISSING
    if isinstance(error, EngineUnavailable):
        return ExitCode.ENGINE_UNAVAILABLE
    if isinstance(error, (SessionNotFound, WorkspaceError, FileNotFoundError)):
        return ExitCode.NOT_FOUND
    if isinstance(error, (SpecError, ValueError)) and not isinstance(error, ConfigError):
        return ExitCode.USAGE
    if isinstance(error, ConfigError):
        return ExitCode.CONFIG
    if isinstance(error, (ModelAuthError, ModelSpendLimitError)):
        return ExitCode.MODEL_AUTH
    if isinstance(error, ModelError):
        return ExitCode.MODEL_UNAVAILABLE
    if isinstance(error, SandboxError):
        return ExitCode.SANDBOX
    if isinstance(error, SessionError):
        return ExitCode.NOT_FOUND
    return ExitCode.SANDBOX


@contextlib.contextmanager
def reported() -> Iterator[None]:
    """Turn our exceptions into a one-line error and a distinct exit code."""
    try:
        yield
    except (HarnessError, SandboxError) as error:
        fail(str(error), exit_code_for(error))


def state_dir(option: Path | None) -> Path:
    """Where sessions live: --state-dir, else $HARNESS_STATE_DIR, else the per-user data dir."""
    if option is not None:
        return option.expanduser().resolve()
    env = os.environ.get("HARNESS_STATE_DIR")
    if env:
        return Path(env).expanduser().resolve()
    return Path(platformdirs.user_data_dir("harness")) / "sessions"


def docker_host() -> str | None:
    """The engine address the user chose ($DOCKER_HOST), or None for the default socket."""
    return os.environ.get("DOCKER_HOST") or None


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
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        err_console.print(f"[bold red]error:[/] {error.format_message()}{hint}", soft_wrap=True)
        sys.exit(int(ExitCode.USAGE))
    sys.exit(result if isinstance(result, int) else 0)
