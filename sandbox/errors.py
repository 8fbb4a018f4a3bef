"""One exception tree for the sandbox package.

An exception here means the sandbox could not run the command at all; anything the command itself
did (non-zero exit, timeout, OOM kill, output flood) is data in the `Envelope`, never an exception.
Docker SDK errors are translated to this tree in exactly one place (`sandbox/docker/engine.py`).
Every message says what to do next. Each class carries the exit code the CLI ends with (a member of
`sandbox.exit_code.ExitCode`, the one table), so callers decide by class, never by table.
"""

from __future__ import annotations

import errno
from typing import ClassVar

from sandbox.exit_code import ExitCode

STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EROFS})
"""A write failed because the disk did (full, over quota, failing, read-only): never wrapped as a
sandbox error, so the caller sees the OSError itself (harness ends the run `state_error`)."""


def at_path(error: OSError, path: object) -> OSError:
    """The same OSError naming the file it was writing (buffered writes raise without a filename)."""
    if error.filename is not None:
        return error
    return type(error)(error.errno, error.strerror, str(path))


class SandboxError(Exception):
    """The sandbox could not do what was asked."""

    exit_code: ClassVar[int] = ExitCode.SANDBOX
    infra_cause: ClassVar[str] = "sandbox_failed"
    """What a run this ends failed on (`harness.causes.Cause`): the machine's failure, not the agent's."""


class EngineUnavailable(SandboxError, ConnectionError):
    """No Docker engine answers on the configured socket."""

    exit_code: ClassVar[int] = ExitCode.SANDBOX
    infra_cause: ClassVar[str] = "engine_unavailable"


class ImageNotFound(SandboxError, LookupError):
    """The image is not present locally (and is never pulled implicitly)."""

    exit_code: ClassVar[int] = ExitCode.IMAGE_MISSING
    infra_cause: ClassVar[str] = "image_missing"


class RuntimeUnavailable(SandboxError, LookupError):
    """The requested container runtime (e.g. runsc) is not registered with the engine."""

    exit_code: ClassVar[int] = ExitCode.RUNTIME_MISSING
    infra_cause: ClassVar[str] = "runtime_missing"


class SpecError(SandboxError, ValueError):
    """A sandbox limit or option is out of range or contradictory."""

    exit_code: ClassVar[int] = ExitCode.USAGE


class WorkspaceError(SandboxError, OSError):
    """The workspace or repository path is missing, unreadable or unsafe."""

    exit_code: ClassVar[int] = ExitCode.NOT_FOUND
    infra_cause: ClassVar[str] = "workspace_failed"


class ImageBuildError(SandboxError, RuntimeError):
    """Building or bootstrapping a sandbox image failed."""

    exit_code: ClassVar[int] = ExitCode.SANDBOX


class BuildRefused(ImageBuildError, ValueError):
    """A repository's Dockerfile asks the engine for what no build of harness's may do (a URL fetched
    in this machine's network, an image from a registry nobody allowed): its file must change."""

    exit_code: ClassVar[int] = ExitCode.CONFIG


class SnapshotError(SandboxError, RuntimeError):
    """A snapshot could not be taken, restored or compared."""

    exit_code: ClassVar[int] = ExitCode.SANDBOX
    infra_cause: ClassVar[str] = "snapshot_failed"


class StoreAltered(SnapshotError):
    """A stored snapshot object (or large file) no longer holds what its name says: its content was
    altered on disk. Nothing is built from it; what was asked is refused whole."""

    exit_code: ClassVar[int] = ExitCode.PATCH_CONFLICT


class SessionNotFound(SnapshotError, LookupError):
    """No session with that id exists in the state directory."""

    exit_code: ClassVar[int] = ExitCode.NOT_FOUND


class StepOutOfRange(SnapshotError, IndexError):
    """The requested step does not exist in the session."""

    exit_code: ClassVar[int] = ExitCode.USAGE


class PatchConflict(SnapshotError):
    """The exported patch no longer applies to the original repository (it changed since import)."""

    exit_code: ClassVar[int] = ExitCode.PATCH_CONFLICT


class SetupError(SandboxError, RuntimeError):
    """An environment setup command (`--setup`) failed; the message carries its exit code and output tail."""

    exit_code: ClassVar[int] = ExitCode.SETUP_FAILED
    headline: str = ""
    """What failed and how (`setup command 'pip install .' exited 1`), without the quoted cause."""
