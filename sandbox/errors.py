"""One exception tree for the sandbox package.

An exception here means the sandbox could not run the command at all; anything the command itself
did (non-zero exit, timeout, OOM kill, output flood) is data in the `Envelope`, never an exception.
Docker SDK errors are translated to this tree in exactly one place (`sandbox/docker.py`).
Every message says what to do next.
"""

from __future__ import annotations


class SandboxError(Exception):
    """The sandbox could not do what was asked."""


class EngineUnavailable(SandboxError, ConnectionError):
    """No Docker engine answers on the configured socket."""


class ImageNotFound(SandboxError, LookupError):
    """The image is not present locally (and is never pulled implicitly)."""


class RuntimeUnavailable(SandboxError, LookupError):
    """The requested container runtime (e.g. runsc) is not registered with the engine."""


class SpecError(SandboxError, ValueError):
    """A sandbox limit or option is out of range or contradictory."""


class WorkspaceError(SandboxError, OSError):
    """The workspace or repository path is missing, unreadable or unsafe."""


class ImageBuildError(SandboxError, RuntimeError):
    """Building or bootstrapping a sandbox image failed."""


class SnapshotError(SandboxError, RuntimeError):
    """A snapshot could not be taken, restored or compared."""


class SessionNotFound(SnapshotError, LookupError):
    """No session with that id exists in the state directory."""


class StepOutOfRange(SnapshotError, IndexError):
    """The requested step does not exist in the session."""


class PatchConflict(SnapshotError):
    """The exported patch no longer applies to the original repository (it changed since import)."""


class SetupError(SandboxError, RuntimeError):
    """An environment setup command (`--setup`) failed; the message carries its exit code and output tail."""
