"""A session's snapshots read without opening the session: its record and step log as plain JSON, its
trees from the object store. `harness diff` and `harness export` need nothing else, so they build no
model and touch no workspace, quota mount or engine; `Session.open` reads its record and step log
through the same two functions, so both say a missing or damaged session the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox import durable
from sandbox.errors import SessionNotFound, SnapshotError, StepOutOfRange
from sandbox.layout import SessionFolder
from sandbox.snapshot import diff as snapdiff
from sandbox.snapshot.diff import SnapshotDiff
from sandbox.snapshot.objects import ObjectStore


def session_record(state_dir: Path, session_id: str) -> dict[str, Any]:
    """session.json of session_id in state_dir; SessionNotFound when there is none or it does not read."""
    if "/" in session_id or session_id.startswith(".") or not session_id:
        raise SessionNotFound(f"no session {session_id!r} in {state_dir}")
    try:
        found = durable.read_json(SessionFolder(Path(state_dir) / session_id).info)
    except FileNotFoundError:
        raise SessionNotFound(f"no session {session_id!r} in {state_dir} (see: harness session list)") from None
    except ValueError as error:
        raise SessionNotFound(f"session {session_id} is unreadable: {error}") from None
    if not isinstance(found, dict):
        raise SessionNotFound(f"session {session_id} is unreadable: its record is not an object")
    return found


def step_lines(folder: SessionFolder, session_id: str) -> list[dict[str, Any]]:
    """The step log's records, oldest first (a torn last line dropped); SnapshotError when damaged."""
    try:
        lines = durable.read_lines(folder.steps)
    except ValueError as error:
        raise SnapshotError(f"session {session_id}: its step log is damaged: {error}".splitlines()[0]) from None
    if not all(isinstance(line, dict) for line in lines):
        raise SnapshotError(f"session {session_id}: its step log is damaged: a record is not an object")
    return lines


def object_dir(folder: SessionFolder, objects: str | None) -> Path:
    """The git object store a session's snapshots are in: the state directory's shared one, or (a
    session made before stores were shared) its own."""
    return Path(objects) / "git" if objects else folder.store / "git"


@dataclass(frozen=True)
class Snapshots:
    """The trees of a session's steps (snapshot step N is trees[N]) and the store that holds them."""

    id: str
    repo: Path
    trees: list[str]
    objects: Path

    @classmethod
    def open(cls, state_dir: Path, session_id: str) -> Snapshots:
        info = session_record(state_dir, session_id)
        folder = SessionFolder(Path(state_dir) / session_id)
        trees = []
        for number, line in enumerate(step_lines(folder, session_id), 1):
            tree = line.get("tree")
            if not isinstance(tree, str):
                raise SnapshotError(f"session {session_id}: its step log is damaged: record {number} names no tree")
            trees.append(tree)
        if not trees:
            raise SessionNotFound(
                f"session {session_id} has no committed step; remove it: harness session rm {session_id}"
            )
        objects, repo = info.get("objects"), info.get("repo")
        if not isinstance(repo, str) or not repo:
            raise SessionNotFound(f"session {session_id} is unreadable: its record names no repository")
        return cls(
            id=session_id,
            repo=Path(repo),
            trees=trees,
            objects=object_dir(folder, objects if isinstance(objects, str) else None),
        )

    @property
    def step(self) -> int:
        """The last snapshot step."""
        return len(self.trees) - 1

    def tree(self, step: int) -> str:
        if not 0 <= step <= self.step:
            raise StepOutOfRange(f"session {self.id} has steps 0..{self.step}; there is no step {step}")
        return self.trees[step]

    def diff(self, from_step: int = 0, to_step: int | None = None) -> SnapshotDiff:
        """Unified diff, binary and mode changes between two snapshot steps (default: import to latest)."""
        return snapdiff.diff(self._store(), self.tree(from_step), self.tree(self.step if to_step is None else to_step))

    def export_patch(self) -> str:
        """A patch from the imported repository to the latest step, for `git apply` on the original."""
        return snapdiff.export_patch(self._store(), self.trees[0], self.trees[-1])

    def check_patch(self, patch: str) -> None:
        """Raise PatchConflict unless `git apply --check` accepts patch on the original repository."""
        snapdiff.check_patch(self._store(), self.repo, patch)

    def _store(self) -> ObjectStore:
        return ObjectStore(self.objects)
