"""How a command that fails says so: the exit code of an error and its one line, shared by the full
command line (`app`) and the quick path (`quick`), which must not import typer or rich."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from typing import Any

from harness.errors import ExitCode, HarnessError
from harness.storage import describe, is_storage_failure
from sandbox.errors import SandboxError

KNOWN = (HarnessError, SandboxError, OSError)
"""What a command may end on with one line and its class's exit code; anything else is an internal error."""


def exit_code_for(error: BaseException) -> int:
    """The documented exit code of an error: its class says (see harness.errors.ExitCode)."""
    code = getattr(error, "exit_code", None)
    if isinstance(code, int):
        return code
    if is_storage_failure(error) or isinstance(error, PermissionError):
        return ExitCode.STORAGE
    if isinstance(error, FileNotFoundError):
        return ExitCode.NOT_FOUND
    if isinstance(error, ValueError):
        return ExitCode.USAGE
    return ExitCode.INTERNAL


def error_line(error: BaseException) -> str:
    """What follows `error:`: a failing disk in the words of `harness.storage`, else the error's own."""
    if isinstance(error, PermissionError):  # a path of this machine harness may not write (or read)
        where = error.filename or error.filename2 or "a path"
        return f"no permission for {where} ({error.strerror or 'permission denied'}): choose another path or fix its permissions"
    return describe(error) if isinstance(error, OSError) and is_storage_failure(error) else str(error)


def internal_line(error: BaseException) -> str:
    """What follows `internal error:` for an error harness did not expect."""
    return f"{type(error).__name__}: {error} (set HARNESS_TRACEBACK=1 to see where; please report it)"


def say(console: Any, error: BaseException) -> int:
    """Print how a command ended on an error, on a rich console (`error:` and its line, or `internal
    error:` for one harness did not expect), and return the exit code."""
    from rich.markup import escape

    if isinstance(error, KNOWN):
        console.print(f"[bold red]error:[/] {escape(error_line(error))}", soft_wrap=True)
        return exit_code_for(error)
    console.print(f"[bold red]internal error:[/] {escape(internal_line(error))}", soft_wrap=True)
    return int(ExitCode.INTERNAL)


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """While the block runs, SIGTERM raises KeyboardInterrupt as Ctrl-C does: a process manager's
    kill (`timeout`, a batch runner) ends a command as cleanly as a person's interrupt (the call's
    container killed and removed, the session's record written). Only in the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt
