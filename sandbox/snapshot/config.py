"""How workspace snapshots are taken, importable without the store (a session's record names it)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SnapshotConfig(BaseModel):
    """How workspace snapshots are taken."""

    model_config = ConfigDict(extra="forbid")

    max_file_size: int = Field(5 * 1024**2, ge=1)
    """Files larger than this many bytes are stored by hash outside the object store (not compressed,
    never re-read while unchanged) and left out of exported patches."""
    ignore: list[str] = Field(default_factory=list)
    """gitignore-syntax patterns of paths never snapshotted (left untouched by restores)."""
    watch: bool = True
    """Use inotify to find changed directories; False walks and stats every file each time."""
    durable: bool = True
    """fsync new objects before a snapshot returns (a crash of the machine cannot lose them)."""
