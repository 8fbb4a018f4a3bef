"""One object store for every session of a machine's state directory, and its collector.

Sessions of one repository (and forks of a session) share almost every object: a store per session
held each object once per session, a shared one holds it once. Layout of `<state_dir>/.objects/`:
`git/` (the object store), `large/` (files over the size limit, by hash), `sessions/` (one reference
file per session: the folder whose steps keep objects alive), `gc.lock`, `generation`.

Safety against a concurrent writer is a lock, not a grace period: a writer holds `gc.lock` shared
from its first object until the tree is recorded (a step in `steps.jsonl`, or a pin), the collector
holds it exclusively. The collector bumps `generation` before it removes anything, and a snapshot
store that sees a new generation forgets its stat index and pack list (they may name objects the
collector removed), so the next snapshot hashes again and writes what is missing. A crash in the
middle of a collection loses nothing: a kept object is written to its new pack before the old pack
goes, and what is removed was unreachable.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sandbox import durable
from sandbox.errors import SnapshotError
from sandbox.snapshot import packs
from sandbox.snapshot.objects import DIR, LARGE, LINK, ObjectStore

PINS = "pins"
"""A session's store file of trees kept alive though no step records them (verification's)."""
PINS_KEPT = 32


class SharedObjects:
    """The shared store of one state directory (or one worker store)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.git = self.root / "git"
        self.large = self.root / "large"
        self.refs = self.root / "sessions"

    def init(self) -> SharedObjects:
        self.large.mkdir(parents=True, exist_ok=True)
        self.refs.mkdir(exist_ok=True)
        return self

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """Held while objects are written and until their tree is recorded: no collection meanwhile."""
        with _flock(self.root / "gc.lock", fcntl.LOCK_SH):
            yield

    def generation(self) -> int:
        try:
            return int((self.root / "generation").read_text() or 0)
        except (FileNotFoundError, ValueError):
            return 0

    def _ref(self, folder: Path) -> Path:
        return self.refs / hashlib.sha1(str(Path(folder).resolve()).encode()).hexdigest()[:20]

    def add_ref(self, folder: Path) -> None:
        """Name a session folder whose steps and pins keep objects alive (before its first object)."""
        durable.write_text_atomic(self._ref(folder), str(Path(folder).resolve()))

    def remove_ref(self, folder: Path) -> None:
        self._ref(folder).unlink(missing_ok=True)

    def referrers(self) -> list[Path]:
        """The session folders this store serves (a reference whose folder is gone is dropped)."""
        found = []
        for ref in sorted(self.refs.glob("*")) if self.refs.is_dir() else []:
            if ref.name.startswith("."):
                continue  # a reference being written
            with contextlib.suppress(OSError):
                folder = Path(ref.read_text().strip())
                if folder.is_dir():
                    found.append(folder)
                else:
                    ref.unlink(missing_ok=True)
        return found


def git_dir_of(folder: Path) -> Path:
    """The object store (git dir) a session folder's snapshots are in: its shared store's, or its
    own `store/git` (a session made before stores were shared)."""
    try:
        objects = json.loads((Path(folder) / "session.json").read_text(encoding="utf-8")).get("objects")
    except (OSError, ValueError, AttributeError):
        objects = None
    return Path(objects) / "git" if objects else Path(folder) / "store" / "git"


def pin(store_dir: Path, tree: str) -> None:
    """Keep tree alive for a session though no step records it (the last PINS_KEPT are kept)."""
    path = Path(store_dir) / PINS
    try:
        kept = path.read_text().split()
    except FileNotFoundError:
        kept = []
    if tree not in kept:
        durable.write_text_atomic(path, "\n".join([*kept, tree][-PINS_KEPT:]) + "\n")


def roots_of(folder: Path) -> set[str]:
    """The trees a session folder keeps alive: every step's, and its pins."""
    trees: set[str] = set()
    for record in durable.read_lines(folder / "steps.jsonl"):
        if isinstance(record, dict) and isinstance(record.get("tree"), str):
            trees.add(record["tree"])
    with contextlib.suppress(FileNotFoundError):
        trees.update((folder / "store" / PINS).read_text().split())
    return trees


@dataclass
class Collected:
    """What one collection did."""

    sessions: int = 0
    live_objects: int = 0
    removed_objects: int = 0
    removed_large: int = 0
    repacked: int = 0
    freed_bytes: int = 0
    seconds: float = 0.0
    missing: list[str] = field(default_factory=list)
    """Objects a recorded tree names that the store lacks (damage found, never caused, by collecting)."""
    refused: str = ""
    """Why nothing was removed (a session whose step log cannot be read: its trees are unknown)."""


def collect(root: Path, *, wait_s: float = 30.0) -> Collected | None:
    """Remove every object and large file no session of the store references. None when writers
    held the store for all of wait_s seconds (try again later: writers hold it for a snapshot at a time)."""
    shared = SharedObjects(root)
    if not shared.git.is_dir():
        return Collected()
    started = time.monotonic()
    while True:  # polled, not blocking: a steady stream of shared holders would starve a blocked writer
        try:
            lock = _flock(shared.root / "gc.lock", fcntl.LOCK_EX | fcntl.LOCK_NB)
            lock.__enter__()
            break
        except BlockingIOError:
            if time.monotonic() - started > wait_s:
                return None
            time.sleep(0.02)
    try:
        durable.write_text_atomic(shared.root / "generation", str(shared.generation() + 1))
        objects = ObjectStore(shared.git)
        done = Collected()
        roots: set[str] = set()
        for folder in shared.referrers():
            try:
                roots |= roots_of(folder)
            except (OSError, ValueError) as error:  # its trees are unknown: removing anything could lose them
                done.refused = f"the step log of {folder} cannot be read ({error}): nothing collected".splitlines()[0]
                return done
            done.sessions += 1
        live, large = _mark(objects, roots, done)
        done.live_objects = len(live)
        _sweep_loose(objects, live, done)
        _sweep_packs(objects, live, done)
        for path in shared.large.iterdir() if shared.large.is_dir() else []:
            if path.name not in large and not path.name.startswith(".tmp"):
                done.freed_bytes += path.stat().st_blocks * 512
                path.unlink(missing_ok=True)
                done.removed_large += 1
        done.seconds = time.monotonic() - started
        return done
    finally:
        lock.__exit__(None, None, None)


def _mark(objects: ObjectStore, roots: set[str], done: Collected) -> tuple[set[str], set[str]]:
    live: set[str] = set()
    large: set[str] = set()
    work = [tree for tree in roots]
    while work:
        tree = work.pop()
        if tree in live:
            continue
        live.add(tree)
        try:
            entries = objects.tree(tree)
        except SnapshotError:
            done.missing.append(tree)
            continue
        for entry in entries:
            kind = entry.mode & 0o170000
            if kind == DIR:
                work.append(entry.oid)
            elif entry.oid not in live:
                live.add(entry.oid)
                if kind != LINK and entry.mode & LARGE:
                    with contextlib.suppress(SnapshotError, IndexError):
                        large.add(objects.read(entry.oid, b"blob").split(b"\n")[1].split(b" ")[1].decode())
    return live, large


def _sweep_loose(objects: ObjectStore, live: set[str], done: Collected) -> None:
    for fan in os.scandir(objects.objects):
        if len(fan.name) != 2 or not fan.is_dir():
            continue
        for item in os.scandir(fan.path):
            if fan.name + item.name not in live:
                with contextlib.suppress(FileNotFoundError):
                    done.freed_bytes += item.stat().st_blocks * 512
                    os.unlink(item.path)
                    done.removed_objects += 1


def _sweep_packs(objects: ObjectStore, live: set[str], done: Collected) -> None:
    folder = objects.objects / "pack"
    for idx in sorted(folder.glob("pack-*.idx")) if folder.is_dir() else []:
        pack = idx.with_suffix(".pack")
        offsets = packs.read_index(idx)
        kept = [oid for oid in offsets if oid in live]
        if len(kept) == len(offsets):
            continue
        dead = len(offsets) - len(kept)
        if kept and dead * 4 < len(offsets):
            continue  # mostly alive: rewriting it would cost more than the dead quarter frees
        if kept:  # the live objects reach their new pack (durably) before the old one goes
            moved = [(oid, *packs.read_object(str(pack), offsets[oid])) for oid in kept]
            paths, _ = packs.write_pack(folder, objects.objects / "tmp", moved)
            for path in paths:
                fd = os.open(path, os.O_RDONLY)
                os.fsync(fd)
                os.close(fd)
            fd = os.open(folder, os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
            done.repacked += 1
        done.freed_bytes += pack.stat().st_blocks * 512 + idx.stat().st_blocks * 512
        idx.unlink()  # the index first: a reader never finds an index without its pack
        pack.unlink()
        done.removed_objects += dead


@contextlib.contextmanager
def _flock(path: Path, how: int) -> Iterator[None]:
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, how)
        yield
    finally:
        os.close(fd)
