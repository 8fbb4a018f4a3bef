"""What a sandboxed call may use: image, runtime, limits, network, mounts, labels.

`SandboxSpec` is the single description of a container's posture. Defaults are the secure ones;
anything looser (network, writable root) must be asked for explicitly.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, field_validator

from sandbox.envelope import Envelope, Posture

MAX_FILE_BYTES = 512 * 1024**2
"""Files larger than this (by apparent size: a sparse file counts as what it would become) are left
out of a workspace, by default: one 4 GB sparse file must not cost 4 GB of disk in every session."""

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def parse_size(value: int | str) -> int:
    """Parse a byte size such as 512m, 1g, 64MiB or a plain integer into bytes."""
    if isinstance(value, int):
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"not a size: {value!r} (use e.g. 512m, 1g, 65536)")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


class Mount(BaseModel):
    """A host path bind-mounted into the container (read-only unless stated)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    source: Path
    """Absolute host path. Must exist."""
    target: str
    """Absolute path inside the container."""
    read_only: bool = True
    """Mount read-only (the default); only the workspace itself is ever writable."""


class SandboxSpec(BaseModel):
    """Posture and limits of every container made for a call. Frozen: derive with model_copy."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    image: str = "py311"
    """Image name (`py311` resolves to the harness-built image) or a local image reference/id."""
    runtime: Literal["runc", "runsc"] = "runc"
    """OCI runtime; `runsc` (gVisor) only when registered with the engine."""
    cpus: float = Field(1.0, gt=0, le=256)
    """CPU quota in cores."""
    memory: int = Field(1024**3, ge=16 * 1024**2)
    """Memory limit in bytes (swap is disabled: memswap = memory). Accepts 512m, 1g."""
    pids: int = Field(256, ge=8, le=65536)
    """Maximum number of processes/threads in the container."""
    timeout_s: float = Field(120.0, gt=0, le=24 * 3600)
    """Wall-clock limit of one call; enforced from the host by killing the container."""
    stdout_cap: int = Field(32 * 1024, ge=256)
    """Bytes of stdout kept (head and tail); the rest is counted and dropped."""
    stderr_cap: int = Field(16 * 1024, ge=256)
    """Bytes of stderr kept (head and tail)."""
    output_ceiling: int = Field(256 * 1024**2, ge=1024)
    """Total output bytes after which the container is killed (status `output_limit`)."""
    tmpfs: int = Field(256 * 1024**2, ge=1024**2)
    """Size of the tmpfs mounted at /tmp (also HOME)."""
    network: str = "none"
    """Docker network mode. `none` is the default; anything else must be asked for explicitly."""
    egress: str | None = None
    """The host folder of the session's egress proxy socket (sandbox.network), for a call that may
    reach the session's allowed hosts: the container still has network `none`, and a relay inside it
    serves the proxy on 127.0.0.1 (HTTP(S)_PROXY). Set at run time, never saved with a session."""
    user: str | None = None
    """uid:gid to run as; None means the owner of the workspace (never root)."""
    read_only_root: bool = True
    """Read-only root filesystem; only /workspace and /tmp are writable."""
    tmp_in_root: bool = False
    """With a writable root only: /tmp is part of the root filesystem instead of a fresh tmpfs, so
    what a call leaves there is committed with the rest of the root and the next call sees it."""
    workdir: str = "/workspace"
    """Where the workspace is mounted and commands start."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Extra labels for every container, e.g. harness.session."""

    @field_validator("memory", "tmpfs", "stdout_cap", "stderr_cap", "output_ceiling", mode="before")
    @classmethod
    def _sizes(cls, value: int | str) -> int:
        return parse_size(value)

    @field_validator("user")
    @classmethod
    def _not_root(cls, value: str | None) -> str | None:
        if value is not None and value.split(":")[0] in {"0", "root"}:
            raise ValueError("the sandbox never runs as root; choose a non-zero uid")
        return value


class Sandbox(Protocol):
    """Runs one command in a fresh, disposable container that sees `workspace` at spec.workdir."""

    def run(
        self,
        argv: Sequence[str],
        *,
        workspace: Path,
        spec: SandboxSpec,
        mounts: Sequence[Mount] = (),
        stdin: bytes | None = None,
        commit_changes: bool = False,
        refill: bool = True,
    ) -> Envelope:
        """Run argv; return its envelope. Raise SandboxError only if it could not run at all.

        With commit_changes (writable root only), a container whose filesystem changed outside the
        workspace and /tmp is committed and the new image id is put in `Envelope.committed_image`.
        `refill=False` says this call is likely the last (a final verification): a sandbox that keeps
        warm containers starts no replacement for it.
        """
        ...

    def prewarm(self, *, workspace: Path, spec: SandboxSpec, mounts: Sequence[Mount] = ()) -> None:
        """Start single-use containers for these arguments ahead of time (no-op if unsupported)."""
        ...

    def quiesce(self) -> None:
        """Start nothing more ahead of time and wait for what is starting: a workspace the warm
        containers mount is about to go (no-op if unsupported)."""
        ...

    def close(self) -> None:
        """Kill and remove every container this sandbox still owns."""
        ...


@runtime_checkable
class PooledSandbox(Sandbox, Protocol):
    """A sandbox whose ready containers may have been started by another process (a warm service's
    run slot, lent over its socket): it takes them as its own, to use once each and remove."""

    def adopt(
        self,
        containers: Sequence[tuple[str, int]],
        *,
        workspace: Path,
        spec: SandboxSpec,
        mounts: Sequence[Mount] = (),
        keep_open: Any = None,
    ) -> bool:
        """Take (container id, attached-stream descriptor) pairs as ready containers for these
        arguments; keep_open (the loan's connection) is closed at `close`, after them. False, taking
        nothing, when they are not on this sandbox's engine."""
        ...


def posture(spec: SandboxSpec, user: str, unenforced: Sequence[str] = ()) -> Posture:
    """The posture recorded in every envelope: what the spec asked for, and what was not enforced."""
    return Posture(
        runtime=spec.runtime,
        network="egress" if spec.egress else spec.network,
        read_only_root=spec.read_only_root,
        user=user,
        cpus=spec.cpus,
        memory=spec.memory,
        pids=spec.pids,
        timeout_s=spec.timeout_s,
        tmpfs=spec.tmpfs,
        unenforced=list(unenforced),
    )
