"""Content-addressed, incremental snapshots of a workspace, and byte-identical restores.

A snapshot is a git tree id in a private object store outside the workspace (`objects.py`). The
walk is ours, never git's: untracked and ignored files are included (no `.gitignore` is read), the
repository's own `.git` directories are plain content, symlinks are stored as links and never
followed, exact permission bits and empty directories are kept. Cost follows what changed: an
inotify watcher (`watch.py`) names the directories touched since the last snapshot, and a stat
index keeps unchanged files from being re-hashed when a full walk is needed (first snapshot in a
process, queue overflow). Files over `max_file_size` are stored by hash outside the object store;
paths matched by `ignore` are skipped and listed by `skipped()`.

About 300 lines: snapshot and restore are inverse walks over the same tree format and stat index,
kept side by side so a change to one is made to the other.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import pathspec

from sandbox.errors import STORAGE_ERRNOS, SnapshotError, StoreAltered, at_path
from sandbox.owner import hand_over
from sandbox.snapshot.config import SnapshotConfig
from sandbox.snapshot.objects import DIR, LARGE, LINK, REG, ObjectStore, TreeEntry
from sandbox.snapshot.shared import SharedObjects
from sandbox.snapshot.watch import Watcher, start
from sandbox.tree import PostOrder, post_order, remove_tree

_GENERATION = "\0generation"
"""The index's key for the shared store's collection count it was written in (no path is this)."""
_RACY_NS = 50_000_000
"""File timestamps are coarse (jiffies): a file whose ctime is this close to the walk may still
change without its stat changing, so it is re-hashed next time instead of trusted."""


class _Dir:
    __slots__ = ("entries", "skipped", "tree")

    def __init__(self, entries: dict[bytes, tuple[int, str, tuple | None]], tree: str, skipped: list[str]):
        self.entries = entries
        self.tree = tree
        self.skipped = skipped


@dataclass(frozen=True)
class _Sub:
    """A directory entry whose tree id its own walk must compute first."""

    mode: int
    walk: _Walk
    key: tuple | None


_Walk = PostOrder[str]
"""One directory's walk: yields its subdirectories' walks, is sent their tree ids, returns its own."""


def _join(rel: str, name: str) -> str:
    return f"{rel}/{name}" if rel else name


class SnapshotStore:
    """Snapshots of one workspace into one store directory (a bare git dir we alone configure)."""

    def __init__(
        self,
        workspace: Path,
        store_dir: Path,
        config: SnapshotConfig | None = None,
        shared: SharedObjects | None = None,
    ) -> None:
        """store_dir holds the stat index; the objects are in shared (the state directory's store,
        see `shared.py`) or, without it, in store_dir's own `git/` and `large/`."""
        self.workspace = Path(workspace)
        self.dir = Path(store_dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config = config or SnapshotConfig()
        self.shared = shared
        self.objects = ObjectStore(shared.git if shared else self.dir / "git")
        self.objects.init()
        self.large = shared.large if shared else self.dir / "large"
        self.large.mkdir(exist_ok=True)
        self._ignore = pathspec.GitIgnoreSpec.from_lines(self.config.ignore) if self.config.ignore else None
        self._generation = shared.generation() if shared else 0
        self._dirs: dict[str, _Dir] = self._load_index()
        self._linked: set[str] = set()
        self._watcher: Watcher | None = None
        self._root_tree: str | None = None
        self._closure: set[str] = set()
        self._dirty: set[str] = set()
        self._walk_ns = 0

    # --- snapshot -------------------------------------------------------------------------------

    def snapshot(self) -> str:
        """Record the workspace as it is now; return the tree id."""
        self._walk_ns = time.time_ns()
        if self.shared is not None and self.shared.generation() != self._generation:
            self._forget()  # a collection ran: what the index names may be gone
        dirty = self._watcher.drain() if self._watcher and self._root_tree else None
        try:
            try:
                tree = self._full() if dirty is None else self._incremental(dirty | self._linked)
            except FileNotFoundError:
                tree = self._full()  # a directory vanished under an event we had not read yet
        except OSError as error:
            if error.errno in STORAGE_ERRNOS:
                raise at_path(error, self.dir) from None
            raise SnapshotError(f"cannot snapshot {self.workspace}: {error}") from error
        self.objects.sync(self.config.durable)
        self._root_tree = tree
        return tree

    def _forget(self) -> None:
        """Drop the stat index and the pack list: the next walk hashes every file again."""
        assert self.shared is not None
        self._generation = self.shared.generation()
        self._dirs, self._root_tree, self._linked = {}, None, set()
        self.objects.forget()

    def _full(self) -> str:
        if self._watcher is None and self.config.watch:
            self._watcher = start(str(self.workspace))
        self._closure = set()
        tree = post_order(self._scan("", full=True))
        self.save_index()
        return tree

    def _incremental(self, dirty: set[str]) -> str:
        if not dirty:
            return self._root_tree or self._full()
        closure = set(dirty)
        for rel in dirty:
            while rel:
                rel = rel.rpartition("/")[0]
                closure.add(rel)
        self._closure, self._dirty = closure, dirty
        return post_order(self._build(""))

    def _build(self, rel: str) -> _Walk:
        state = self._dirs.get(rel)
        if rel in self._dirty or state is None:
            return (yield self._scan(rel, full=state is None))
        changed = False
        for name, (mode, oid, key) in list(state.entries.items()):
            child = _join(rel, os.fsdecode(name))
            if mode & 0o170000 == DIR and child in self._closure:
                new = yield self._build(child)
                if new != oid:
                    state.entries[name] = (mode, new, key)
                    changed = True
        if changed:
            state.tree = self._write_tree(state.entries)
        return state.tree

    def _scan(self, rel: str, full: bool) -> _Walk:
        """List one directory again, re-hashing only entries whose stat changed."""
        if self._watcher is not None:
            self._watcher.add(rel)
        old = self._dirs.get(rel)
        prev_entries = old.entries if old else {}
        entries: dict[bytes, tuple[int, str, tuple | None]] = {}
        skipped: list[str] = []
        with os.scandir(os.path.join(self.workspace, rel)) as listing:
            for item in listing:
                name, child = os.fsencode(item.name), _join(rel, item.name)
                st = item.stat(follow_symlinks=False)
                if self._ignore and self._ignore.match_file(child + "/" if stat.S_ISDIR(st.st_mode) else child):
                    skipped.append(child)
                    continue
                entry = self._entry(rel, child, st, prev_entries.get(name), full)
                if isinstance(entry, _Sub):  # a directory whose tree id must be worked out first
                    entry = (entry.mode, (yield entry.walk), entry.key)
                if entry is None:
                    skipped.append(child)
                else:
                    entries[name] = entry
        for name, (mode, _oid, _key) in prev_entries.items():
            if mode & 0o170000 == DIR and entries.get(name, (0,))[0] & 0o170000 != DIR:
                self._purge(_join(rel, os.fsdecode(name)))
        tree = self._write_tree(entries)
        self._dirs[rel] = _Dir(entries, tree, skipped)
        return tree

    def _entry(self, rel: str, child: str, st: os.stat_result, prev, full: bool):
        kind = stat.S_IFMT(st.st_mode)
        perm = stat.S_IMODE(st.st_mode) & 0o777
        if kind == stat.S_IFDIR:
            same = prev is not None and prev[2] == (st.st_ino,) and child in self._dirs
            oid = self._dirs[child].tree if same and not full and child not in self._closure else None
            if oid is None:
                walk = self._build(child) if same and not full else self._scan(child, full=True)
                return _Sub(DIR | perm, walk, (st.st_ino,))
            return (DIR | perm, oid, (st.st_ino,))
        if kind == stat.S_IFLNK:
            target = os.readlink(os.path.join(os.fsencode(self.workspace), os.fsencode(child)))
            return (LINK, self.objects.write(b"blob", os.fsencode(target)), None)
        if kind != stat.S_IFREG:
            return None  # devices, sockets, FIFOs: never content, listed in skipped()
        if st.st_nlink > 1:
            self._linked.add(rel)  # a write through another name would not mark this directory
        key = (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
        if prev is not None and prev[2] == key:
            return prev
        if st.st_size > self.config.max_file_size:
            mode, oid = REG | LARGE | perm, self._store_large(child)
        else:
            mode, oid = REG | perm, self.objects.write(b"blob", self._read(child))
        racy = max(st.st_mtime_ns, st.st_ctime_ns) >= self._walk_ns - _RACY_NS
        return (mode, oid, None if racy else key)

    def _read(self, child: str) -> bytes:
        fd = os.open(os.path.join(self.workspace, child), os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as handle:
            return handle.read()

    def _store_large(self, child: str) -> str:
        tmp = self.large / f".tmp.{os.getpid()}.{threading.get_ident()}"
        fd = os.open(os.path.join(self.workspace, child), os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as src, open(tmp, "wb") as dst:
            digest, size = copy_sparse(src, dst)
        os.replace(tmp, self.large / digest)
        self.objects.written.append(str(self.large / digest))  # fsynced with the objects
        return self.objects.write(b"blob", b"harness-large-file\nsha256 %s\nsize %d\n" % (digest.encode(), size))

    def _write_tree(self, entries: dict[bytes, tuple[int, str, tuple | None]]) -> str:
        return self.objects.write_tree([TreeEntry(mode, name, oid) for name, (mode, oid, _k) in entries.items()])

    def _purge(self, rel: str) -> None:
        prefix = rel + "/"
        for key in [k for k in self._dirs if k == rel or k.startswith(prefix)]:
            del self._dirs[key]
        self._linked = {d for d in self._linked if d != rel and not d.startswith(prefix)}

    def skipped(self) -> list[str]:
        """Paths left out of the last snapshot: ignore-list matches and special files."""
        return sorted(path for state in self._dirs.values() for path in state.skipped)

    # --- index persistence (a cache: a stale index only costs re-hashing) ------------------------

    def _load_index(self) -> dict[str, _Dir]:
        try:
            raw = pickle.loads((self.dir / "index.pickle").read_bytes())
            if raw.pop(_GENERATION, None) != self._generation:
                return {}  # written before a collection: it may name removed objects
            return {rel: _Dir(*fields) for rel, fields in raw.items()}
        except (OSError, pickle.UnpicklingError, EOFError, TypeError, ValueError, AttributeError):
            return {}

    def save_index(self) -> None:
        """Persist the stat index atomically (done after full walks and on close)."""
        raw: dict = {rel: (d.entries, d.tree, d.skipped) for rel, d in self._dirs.items()}
        raw[_GENERATION] = self._generation
        tmp = self.dir / f"index.pickle.{os.getpid()}"
        tmp.write_bytes(pickle.dumps(raw, protocol=pickle.HIGHEST_PROTOCOL))
        os.replace(tmp, self.dir / "index.pickle")

    def close(self) -> None:
        """Persist the index and stop watching."""
        if self._dirs:
            self.save_index()
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None

    # --- restore --------------------------------------------------------------------------------

    def restore(self, tree: str) -> None:
        """Make the workspace byte-identical to `tree`, touching only what differs."""
        current = self.snapshot()
        if current == tree:
            return
        self._readable(current, tree)  # every object it will write is read and checked before anything changes
        try:
            self._apply(current, tree)
        except OSError as error:
            if error.errno in STORAGE_ERRNOS:
                raise at_path(error, self.workspace) from None
            raise SnapshotError(f"cannot restore {self.workspace}: {error}") from error
        after = self.snapshot()
        if after != tree:
            raise SnapshotError(f"restore of {tree[:12]} produced {after[:12]}: the workspace changed meanwhile")

    def _readable(self, current: str, target: str) -> None:
        """Read every tree and file `_apply` will need to go from current to target, each checked
        against its hash (a large file against its SHA-256): StoreAltered or SnapshotError before the
        workspace is touched, so a restore never stops halfway on an object altered on disk."""
        work = [(current, target)]
        while work:
            have_oid, want_oid = work.pop()
            have = {e.name: e for e in self.objects.tree(have_oid)}
            for name, entry in {e.name: e for e in self.objects.tree(want_oid)}.items():
                old = have.get(name)
                if old == entry:
                    continue
                if old is not None and old.mode & 0o170000 == DIR and entry.mode & 0o170000 == DIR:
                    work.append((old.oid, entry.oid))
                    continue
                pending = [entry]
                while pending:
                    one = pending.pop()
                    if one.mode & 0o170000 == DIR:
                        pending.extend(self.objects.tree(one.oid))
                    elif one.mode & LARGE:
                        self._large_checked(self.objects.read(one.oid, b"blob"))
                    else:
                        self.objects.read(one.oid, b"blob")

    def _large_checked(self, pointer: bytes) -> str:
        """The digest a large file's pointer names, its stored file's SHA-256 checked (StoreAltered)."""
        try:
            digest = pointer.split(b"\n")[1].split(b" ")[1].decode()
        except (IndexError, UnicodeDecodeError):
            raise StoreAltered("a large file's pointer in the snapshot store is not one harness writes") from None
        sha = hashlib.sha256()
        try:
            with open(self.large / digest, "rb") as handle:
                while chunk := handle.read(_CHUNK):
                    sha.update(chunk)
        except OSError as error:
            raise SnapshotError(f"large file {digest[:12]} of the snapshot store is missing: {error}") from None
        if sha.hexdigest() != digest:
            raise StoreAltered(f"large file {digest[:12]} of the snapshot store was altered on disk")
        return digest

    def _apply(self, current: str, target: str) -> None:
        """Change the workspace from tree `current` to tree `target`, directory by directory (an
        explicit work list); modes of directories are set last, deepest first, so a directory made
        read-only still gets its contents."""
        work = [("", current, target)]
        modes: list[tuple[bytes, int]] = []
        while work:
            rel, have_oid, want_oid = work.pop()
            have = {e.name: e for e in self.objects.tree(have_oid)}
            want = {e.name: e for e in self.objects.tree(want_oid)}
            base = os.path.join(os.fsencode(self.workspace), os.fsencode(rel)) if rel else os.fsencode(self.workspace)
            for name in have.keys() - want.keys():
                _remove(os.path.join(base, name))
            for name, entry in want.items():
                old = have.get(name)
                if old == entry:
                    continue
                path = os.path.join(base, name)
                if old is not None and old.mode & 0o170000 == DIR and entry.mode & 0o170000 == DIR:
                    if old.oid != entry.oid:
                        work.append((_join(rel, os.fsdecode(name)), old.oid, entry.oid))
                    modes.append((path, entry.mode & 0o777))
                    continue
                _remove(path)
                self._materialize(path, entry)
                hand_over(Path(os.fsdecode(path)))
        for path, mode in reversed(modes):
            os.chmod(path, mode, follow_symlinks=False)

    def _materialize(self, top: bytes, top_entry: TreeEntry) -> None:
        """Write an entry (a whole directory tree, iteratively) where nothing is."""
        work = [(top, top_entry)]
        modes: list[tuple[bytes, int]] = []
        while work:
            path, entry = work.pop()
            kind = entry.mode & 0o170000
            if kind == DIR:
                os.mkdir(path, 0o700)
                work.extend((os.path.join(path, child.name), child) for child in self.objects.tree(entry.oid))
                modes.append((path, entry.mode & 0o777))
            elif kind == LINK:
                os.symlink(self.objects.read(entry.oid, b"blob"), path)
            elif entry.mode & LARGE:
                digest = self.objects.read(entry.oid, b"blob").split(b"\n")[1].split(b" ")[1].decode()
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                with open(self.large / digest, "rb") as src, os.fdopen(fd, "wb") as dst:
                    copied, _ = copy_sparse(src, dst)
                    os.fchmod(dst.fileno(), entry.mode & 0o777)
                if copied != digest:  # altered since it was checked: the restore ends, undone by its caller
                    raise StoreAltered(f"large file {digest[:12]} of the snapshot store was altered on disk")
            else:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "wb") as handle:
                    handle.write(self.objects.read(entry.oid, b"blob"))
                    os.fchmod(handle.fileno(), entry.mode & 0o777)
        for path, mode in reversed(modes):
            os.chmod(path, mode)


_CHUNK = 1 << 20
_ZEROS = bytes(_CHUNK)


def copy_sparse(src: BinaryIO, dst: BinaryIO) -> tuple[str, int]:
    """Copy src to dst keeping runs of zeros as holes (a 4 GB sparse file costs what it holds, not
    4 GB, in the store and in a restored workspace); returns (sha256 of the content, size)."""
    sha, size = hashlib.sha256(), 0
    while chunk := src.read(_CHUNK):
        sha.update(chunk)
        if chunk == _ZEROS[: len(chunk)]:
            dst.seek(len(chunk), os.SEEK_CUR)
        else:
            dst.write(chunk)
        size += len(chunk)
    dst.truncate(size)
    return sha.hexdigest(), size


def _remove(path: bytes) -> None:
    """Remove whatever is at path without following links; absent is fine."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        remove_tree(os.fsdecode(path))
    else:
        os.unlink(path)
