"""What a session records: its config, its setup result, each snapshot step, and session.json; plus
the hooks and step-image operations a session is given (injected, so a session never imports an engine)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator, model_validator

from sandbox.snapshot.store import SnapshotConfig
from sandbox.spec import SandboxSpec, parse_size


class SessionConfig(BaseModel):
    """How a session snapshots and prepares its environment."""

    model_config = ConfigDict(extra="forbid")

    snapshot: SnapshotConfig = Field(default_factory=SnapshotConfig)
    """Workspace snapshot options (large-file threshold, ignore list)."""
    setup: list[str] = Field(default_factory=list)
    """Commands run once, before step 0, in a container with a writable root (`--setup`)."""
    setup_network: bool = False
    """Allow network during setup only (`--setup-network`); tool calls never get it from here."""
    setup_ca: Path | None = None
    """A PEM CA bundle the setup container (and only it) trusts, for HTTPS through a proxy with its own
    certificate authority (`--setup-ca`); added to the image's own bundle for the setup commands."""
    setup_proxy: str | None = None
    """HTTP(S)_PROXY for the setup commands only (`--setup-proxy`); recorded without its password."""
    setup_mounts: list[str] = Field(default_factory=list)
    """`HOST_DIR:CONTAINER_DIR` bound read-only into the setup container only (`--setup-mount`): a
    wheelhouse or a package cache for an offline install."""
    writable_root: bool = False
    """Tool calls get a writable root; a call that changed the container filesystem becomes the image."""
    keep_tmp: bool = False
    """With writable_root: /tmp is part of the root (committed with it) instead of a fresh tmpfs per
    call, so files a call leaves in /tmp (and HOME, which is /tmp) are there for the next."""
    workspace_quota: int | None = None
    """Bytes the whole workspace may hold (`--workspace-quota 2g`): it becomes a filesystem of that
    size (sandbox.session.quota; root only), so a call writing past it gets "No space left on device"
    and the host's disk never fills. None: no limit beyond the host's disk."""
    max_file_bytes: int | None = 512 * 1024**2
    """Repository files larger than this are left out of the workspace (and named in `left_out`);
    None copies every file whatever its size."""

    @model_validator(mode="after")
    def _setup_options(self) -> SessionConfig:
        problem = setup_option_problem(
            self.setup, self.setup_network, self.setup_ca is not None, bool(self.setup_proxy), bool(self.setup_mounts)
        )
        if problem:
            raise ValueError(problem)
        return self

    @field_validator("workspace_quota", mode="before")
    @classmethod
    def _quota(cls, value: int | str | None) -> int | None:
        return None if value is None else parse_size(value)

    @field_validator("setup_mounts")
    @classmethod
    def _mounts(cls, value: list[str]) -> list[str]:
        for item in value:
            parse_setup_mount(item)
        return value

    @field_serializer("setup_proxy")
    def _redacted(self, value: str | None) -> str | None:
        return redact_url(value) if value else value


def setup_option_problem(setup: list[str], network: bool, ca: bool, proxy: bool, mounts: bool) -> str | None:
    """What is wrong with a combination of setup options (flags and config keys alike), or None."""
    if (network or ca or proxy or mounts) and not setup:
        return "--setup-network, --setup-ca, --setup-proxy and --setup-mount need at least one --setup command"
    if (ca or proxy) and not network:
        return "--setup-ca and --setup-proxy are for a setup with network: add --setup-network"
    return None


def parse_setup_mount(item: str) -> tuple[Path, str]:
    """(host path, container path) of `HOST_DIR:CONTAINER_DIR`; ValueError says what is wrong."""
    host, sep, target = item.rpartition(":")
    if not sep or not host or not target:
        raise ValueError(f"a setup mount is HOST_DIR:CONTAINER_DIR, not {item!r}")
    if not target.startswith("/") or target.rstrip("/") in ("", "/workspace") or target.startswith("/workspace/"):
        raise ValueError(f"setup mount target {target!r} must be an absolute path outside /workspace")
    return Path(host).expanduser(), target.rstrip("/") or "/"


def redact_url(url: str) -> str:
    """The URL with any password replaced by ***."""
    return re.sub(r"^([a-zA-Z][a-zA-Z0-9+.-]*://[^:/@]+):[^@/]*@", r"\1:***@", url)


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


Prepare = Callable[[Path], SetupRecord]
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
