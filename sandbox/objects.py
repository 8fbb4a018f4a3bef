"""A git-compatible loose object store written and read by Python alone.

Snapshots never run git against the workspace: objects (blobs, trees) are hashed, compressed and
written here with the exact byte format git uses, so `git diff-tree` on our own bare store can
produce binary patches, while nothing a repository configures (hooks, fsmonitor, filters,
attributes) is ever consulted. Objects are written temp + rename so a killed process never leaves
a torn object under its final name.

Tree entries carry exact permission bits (e.g. `100600`, `40750`); git canonicalises them when it
reads, so diffs still work. Bit 0o1000 on a regular file marks a pointer to a large file kept
outside the object store (see `snapshot.py`).
"""

from __future__ import annotations

import hashlib
import os
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

from sandbox.errors import SnapshotError

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
DIR = 0o040000
REG = 0o100000
LINK = 0o120000
LARGE = 0o001000
"""Marks a regular-file entry whose blob is a pointer to a large file stored by hash."""


class TreeEntry(NamedTuple):
    """One entry of a tree: numeric mode (type + permission bits), name bytes, hex object id."""

    mode: int
    name: bytes
    oid: str


def _sort_key(entry: TreeEntry) -> bytes:
    return entry.name + b"/" if entry.mode & 0o170000 == DIR else entry.name


def encode_tree(entries: list[TreeEntry]) -> bytes:
    """Serialise entries in git's order (directories sort as if their name ended with '/')."""
    out = bytearray()
    for entry in sorted(entries, key=_sort_key):
        out += b"%o %s\0" % (entry.mode, entry.name)
        out += bytes.fromhex(entry.oid)
    return bytes(out)


def decode_tree(data: bytes) -> list[TreeEntry]:
    """Parse a tree object's payload."""
    entries: list[TreeEntry] = []
    pos = 0
    while pos < len(data):
        space = data.index(b" ", pos)
        nul = data.index(b"\0", space)
        entries.append(TreeEntry(int(data[pos:space], 8), data[space + 1 : nul], data[nul + 1 : nul + 21].hex()))
        pos = nul + 21
    return entries


class ObjectStore:
    """Loose objects under `git_dir/objects`, laid out exactly as git lays them out."""

    def __init__(self, git_dir: Path) -> None:
        self.git_dir = Path(git_dir)
        self.objects = self.git_dir / "objects"
        self._tmp = self.objects / "tmp"
        self._root = str(self.objects)
        self._fanout: set[str] = set()
        self.written: list[str] = []
        """Paths of files written since the last `sync()` (objects, and large files the snapshot adds)."""
        self._new_dirs: set[str] = set()
        """Directories that got a new subdirectory since the last `sync()` (fsynced with the files)."""

    def init(self) -> None:
        """Create a minimal bare repository (no templates, hence no hooks) if absent."""
        if not self._tmp.is_dir():  # a new store: its own folders must be durable with its first objects
            self._new_dirs |= {str(self.objects), str(self.git_dir), str(self.git_dir.parent)}
        self._tmp.mkdir(parents=True, exist_ok=True)
        (self.git_dir / "refs" / "heads").mkdir(parents=True, exist_ok=True)
        (self.git_dir / "info").mkdir(exist_ok=True)
        (self.git_dir / "info" / "exclude").write_text("")
        head = self.git_dir / "HEAD"
        if not head.exists():
            head.write_text("ref: refs/heads/main\n")
        (self.git_dir / "config").write_text(
            "[core]\n\trepositoryformatversion = 0\n\tbare = true\n\tfilemode = true\n"
        )
        for stale in self._tmp.iterdir():
            stale.unlink(missing_ok=True)

    def _path(self, oid: str) -> str:
        return os.path.join(self._root, oid[:2], oid[2:])

    def has(self, oid: str) -> bool:
        return os.path.exists(self._path(oid))

    def write(self, kind: bytes, data: bytes) -> str:
        """Store one object (if new) and return its id."""
        raw = b"%s %d\0" % (kind, len(data)) + data
        oid = hashlib.sha1(raw).hexdigest()
        path = self._path(oid)
        if os.path.exists(path):
            return oid
        if oid[:2] not in self._fanout:
            folder = os.path.join(self._root, oid[:2])
            if not os.path.isdir(folder):
                os.makedirs(folder, exist_ok=True)
                self._new_dirs.add(self._root)
            self._fanout.add(oid[:2])
        tmp = os.path.join(self._root, "tmp", f"{oid}.{os.getpid()}")
        with open(tmp, "wb") as handle:
            handle.write(zlib.compress(raw, 1))
        os.replace(tmp, path)
        self.written.append(path)
        return oid

    def read(self, oid: str, kind: bytes | None = None) -> bytes:
        """Return an object's payload; raise SnapshotError if missing or of another kind."""
        try:
            with open(self._path(oid), "rb") as handle:
                raw = zlib.decompress(handle.read())
        except (OSError, zlib.error) as error:
            raise SnapshotError(f"snapshot object {oid} is missing or corrupt: {error}") from error
        nul = raw.index(b"\0")
        actual = raw[:nul].split(b" ")[0]
        if kind is not None and actual != kind:
            raise SnapshotError(f"snapshot object {oid} is a {actual.decode()}, expected {kind.decode()}")
        return raw[nul + 1 :]

    def tree(self, oid: str) -> list[TreeEntry]:
        return [] if oid == EMPTY_TREE else decode_tree(self.read(oid, b"tree"))

    def write_tree(self, entries: list[TreeEntry]) -> str:
        return self.write(b"tree", encode_tree(entries))

    def sync(self, durable: bool) -> None:
        """Make files written since the last call durable: fsync each file, then each directory that
        got a new name (and those that got a new subdirectory, such as a fan-out directory).

        Only our own files are flushed, never the whole machine (`os.sync()` would make concurrent
        sessions of a batch wait for each other's writes). Many files are fsynced from a few
        threads: fsync releases the GIL and the filesystem journal batches concurrent commits.
        """
        written, self.written = self.written, []
        new_dirs, self._new_dirs = self._new_dirs, set()
        if not durable or not written:
            return
        folders = sorted({os.path.dirname(path) for path in written} | new_dirs)
        if len(written) > SYNC_SERIAL_MAX:
            with ThreadPoolExecutor(max_workers=SYNC_THREADS) as pool:
                list(pool.map(_fsync, written))
        else:
            for path in written:
                _fsync(path)
        for folder in folders:  # after the files: a name must never be durable before its content
            _fsync(folder)


SYNC_SERIAL_MAX = 64
"""Up to this many files are fsynced one after another; more go to SYNC_THREADS threads."""
SYNC_THREADS = 8


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
