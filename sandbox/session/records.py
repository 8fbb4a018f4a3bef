"""What a session records: its config, its setup result, each snapshot step, and session.json; plus
the hooks and step-image operations a session is given (injected, so a session never imports an engine)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from sandbox import durable
from sandbox.layout import SessionFolder
from sandbox.settings import SessionSettings, StartedFrom
from sandbox.snapshot.config import SnapshotConfig
from sandbox.spec import MAX_FILE_BYTES, SandboxSpec


class SessionConfig(SessionSettings):
    """How a session snapshots and prepares its environment: the settings a user gives
    (`sandbox.settings.SessionSettings`), and what harness decides with them."""

    model_config = ConfigDict(extra="forbid")

    snapshot: SnapshotConfig = Field(default_factory=SnapshotConfig)
    """Workspace snapshot options (large-file threshold, ignore list)."""
    writable_root: bool = False
    """Tool calls get a writable root; a call that changed the container filesystem becomes the image."""
    keep_tmp: bool = False
    """With writable_root: /tmp is part of the root (committed with it) instead of a fresh tmpfs per
    call, so files a call leaves in /tmp (and HOME, which is /tmp) are there for the next."""
    max_file_bytes: int | None = MAX_FILE_BYTES
    """Repository files larger than this are left out of the workspace (and named in `left_out`);
    None copies every file whatever its size."""

    @classmethod
    def of(cls, settings: SessionSettings, **decided: object) -> SessionConfig:
        """The config of a session made with settings (read field by field: a dump would redact the
        proxy's password) and what harness decided (writable_root, keep_tmp...)."""
        return cls.model_validate({**dict(settings), **decided})


class SetupRecord(BaseModel):
    """What environment preparation produced (step 0's image)."""

    image: str
    """Image id committed by setup (or found in the cache)."""
    key: str
    """Cache key: base image id, commands, network flag, dependency-file hashes."""
    cached: bool
    network_mode: str
    """The setup container's NetworkMode as the engine reported it."""
    duration_ms: int = 0
    ca_sha256: str | None = None
    """The setup CA bundle's digest, when one was given."""
    proxy: str | None = None
    """The setup proxy (password removed), when one was given."""
    mounts: list[str] = Field(default_factory=list)
    """The setup mounts, as given."""


class StepRecord(BaseModel):
    """Step N: the workspace tree and the image the next call starts from."""

    step: int
    tree: str
    image: str
    time: float
    note: str = ""
    kind: Literal["import", "step", "rollback"] = "step"
    rolled_back_to: int | None = None
    skipped: list[str] = Field(default_factory=list)
    """Paths the snapshot left out (ignore list, special files)."""


class ForkPoint(BaseModel):
    """Where a fork parted from its parent."""

    session: str
    step: int
    """The parent's run step (as `harness show` numbers them) the fork continues after."""
    snapshot: int
    """The parent's snapshot step holding the workspace then (the fork's steps 0..snapshot are its)."""
    folder: str
    """The parent's session folder (absolute)."""
    agent: str | None = None
    """Set when the session is a sub-agent's branch: its name in the parent's run (`d1`)."""


class SessionInfo(BaseModel):
    """session.json: what does not change after create."""

    id: str
    repo: str
    created: float
    spec: SandboxSpec
    config: SessionConfig
    setup: SetupRecord | None = None
    left_out: list[str] = Field(default_factory=list)
    """Repository files not copied into the workspace, each `path (why)`; the model is told."""
    origin: str | None = None
    """The commit the repository's HEAD named when the session was made (None: not a git repository),
    the parent `harness apply` gives the session's change; `started_from.commit` when given."""
    started_from: StartedFrom | None = None
    """Where a start state that is no git repository came from (a mined task); None: `repo` itself."""
    objects: str | None = None
    """The shared object store its snapshots are in (`<state_dir>/.objects`); None: the session's
    own `store/` (sessions made before stores were shared)."""
    parent: ForkPoint | None = None
    """The session and step this one was forked from (None: made from a repository)."""


def list_sessions(state_dir: Path) -> list[SessionInfo]:
    """Every complete session in state_dir, oldest first (a folder whose record does not read is
    not one)."""
    found = []
    for folder in sorted(Path(state_dir).glob(f"*/{SessionFolder(Path()).info.name}")):
        with contextlib.suppress(OSError, ValueError):
            found.append(SessionInfo(**durable.read_json(folder)))
    return sorted(found, key=lambda info: info.created)


Prepare = Callable[[Path, Path | None], SetupRecord]
"""Runs setup on a workspace; the second argument is the egress proxy's folder when setup may reach the
session's allowed hosts."""
"""Environment preparation: given the fresh workspace, return the committed base image."""
Ready = Callable[[Path, SandboxSpec], None]
"""Told the workspace and the spec calls will run with as soon as both exist, before step 0's
snapshot (the caller starts warm containers then, so their start overlaps the rest of set-up)."""


class StepImages(Protocol):
    """What a session needs of the engine for step images (`sandbox.docker.step_images`)."""

    def keep(self, session_id: str, step: int, image: str) -> None:
        """Keep a committed step image from being pruned."""

    def check(self, image: str) -> None:
        """Raise SnapshotError unless the image still exists."""

    def remove(self, session_id: str, state_dir: Path) -> int:
        """Remove every image of the session."""
