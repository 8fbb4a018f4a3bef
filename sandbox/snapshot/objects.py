"""A git-compatible loose object store written and read by Python alone.

Snapshots never run git against the workspace: objects (blobs, trees) are hashed, compressed and
written here with the exact byte format git uses, so `git diff-tree` on our own bare store can
produce binary patches, while nothing a repository configures (hooks, fsmonitor, filters,
attributes) is ever consulted. Objects are written temp + rename so a killed process never leaves
a torn object under its final name. New objects are held until `sync`: a few are written loose,
many go into one pack file (`packs.py`), which git reads as well.

Tree entries carry exact permission bits (e.g. `100600`, `40750`); git canonicalises them when it
reads, so diffs still work. Bit 0o1000 on a regular file marks a pointer to a large file kept
outside the object store (see `snapshot.py`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

from sandbox.errors import SnapshotError, StoreAltered
from sandbox.snapshot import packs

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
DIR = 0o040000
REG = 0o100000
LINK = 0o120000
LARGE = 0o001000
"""Marks a regular-file entry whose blob is a pointer to a large file stored by hash."""
_KINDS = frozenset({DIR, REG, LINK})


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
    """Parse a tree object's payload; StoreAltered for one no snapshot writes (a name with a `/`, `.`,
    `..` or nothing, a mode that is no file, link or folder, a torn entry)."""
    entries: list[TreeEntry] = []
    pos = 0
    try:
        while pos < len(data):
            space = data.index(b" ", pos)
            nul = data.index(b"\0", space)
            mode, name, oid = int(data[pos:space], 8), data[space + 1 : nul], data[nul + 1 : nul + 21]
            if name in (b"", b".", b"..") or b"/" in name or len(oid) != 20 or mode & 0o170000 not in _KINDS:
                raise ValueError(f"entry {name[:60]!r} (mode {mode:o})")
            entries.append(TreeEntry(mode, name, oid.hex()))
            pos = nul + 21
    except ValueError as error:
        raise StoreAltered(f"a snapshot tree holds what no snapshot writes: {error}") from None
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
        self._held: dict[str, tuple[bytes, bytes]] = {}
        """Objects written since the last flush (oid → kind, payload): stored by `flush`."""
        self._held_bytes = 0
        self._packed: dict[str, tuple[str, int]] | None = None
        """Object id → (pack path, offset) for every pack in the store (loaded on first need)."""

    def init(self) -> None:
        """Create a minimal bare repository (no templates, hence no hooks) if absent."""
        if not self._tmp.is_dir():  # a new store: its own folders must be durable with its first objects
            self._new_dirs |= {str(self.objects), str(self.git_dir), str(self.git_dir.parent)}
        self._tmp.mkdir(parents=True, exist_ok=True)
        (self.git_dir / "refs" / "heads").mkdir(parents=True, exist_ok=True)
        (self.git_dir / "info").mkdir(exist_ok=True)
        for name, text in (
            ("info/exclude", ""),
            ("HEAD", "ref: refs/heads/main\n"),
            ("config", "[core]\n\trepositoryformatversion = 0\n\tbare = true\n\tfilemode = true\n"),
        ):
            path = self.git_dir / name
            if not path.is_file():  # written once, whole: other sessions (and git) read a shared store's
                staging = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}")
                staging.write_text(text)
                os.replace(staging, path)
        old = time.time() - STALE_TMP_S
        for stale in self._tmp.iterdir():  # a killed writer's; never a live one's (the store is shared)
            with contextlib.suppress(OSError):
                if stale.stat().st_mtime < old:
                    stale.unlink()

    def _path(self, oid: str) -> str:
        return os.path.join(self._root, oid[:2], oid[2:])

    def has(self, oid: str) -> bool:
        return oid in self._held or os.path.exists(self._path(oid)) or oid in self._packs()

    def write(self, kind: bytes, data: bytes) -> str:
        """Store one object (if new) and return its id; it reaches the disk at the next `flush`/`sync`."""
        oid = hashlib.sha1(b"%s %d\0" % (kind, len(data)) + data).hexdigest()
        if self.has(oid):
            return oid
        self._held[oid] = (kind, data)
        self._held_bytes += len(data)
        if self._held_bytes >= PACK_FLUSH_BYTES:  # bound the memory a huge first snapshot holds
            self.flush()
        return oid

    def flush(self) -> None:
        """Write the held objects: loose when they are few, else as one pack (not yet fsynced)."""
        held, self._held, self._held_bytes = self._held, {}, 0
        if len(held) > LOOSE_MAX:
            folder = self.objects / "pack"
            if not folder.is_dir():
                folder.mkdir()
                self._new_dirs.add(self._root)  # its name in objects/ must be durable with the pack
            paths, offsets = packs.write_pack(folder, self._tmp, [(oid, k, d) for oid, (k, d) in held.items()])
            self.written.extend(paths)
            self._packs().update({oid: (paths[0], offset) for oid, offset in offsets.items()})
            return
        for oid, (kind, data) in held.items():
            self._write_loose(oid, b"%s %d\0" % (kind, len(data)) + data)

    def _write_loose(self, oid: str, raw: bytes) -> None:
        path = self._path(oid)
        if oid[:2] not in self._fanout:
            folder = os.path.join(self._root, oid[:2])
            if not os.path.isdir(folder):
                os.makedirs(folder, exist_ok=True)
                self._new_dirs.add(self._root)
            self._fanout.add(oid[:2])
        tmp = os.path.join(self._root, "tmp", f"{oid}.{os.getpid()}.{threading.get_ident()}")  # threads share a store
        with open(tmp, "wb") as handle:
            handle.write(zlib.compress(raw, 1))
        os.replace(tmp, path)
        self.written.append(path)

    def forget(self) -> None:
        """Forget the pack list and fan-out folders (a collection may have changed both)."""
        self._packed = None
        self._fanout = set()

    def _packs(self) -> dict[str, tuple[str, int]]:
        if self._packed is None:
            self._packed = {}
            for idx in sorted((self.objects / "pack").glob("pack-*.idx")):
                pack = str(idx.with_suffix(".pack"))
                self._packed.update({oid: (pack, offset) for oid, offset in packs.read_index(idx).items()})
        return self._packed

    def read(self, oid: str, kind: bytes | None = None) -> bytes:
        """Return an object's payload; SnapshotError if missing or of another kind, StoreAltered if
        its content no longer has its name's hash (altered on disk: nothing is built from it)."""
        if oid in self._held:
            actual, payload = self._held[oid]
        else:
            actual, payload = self._read_stored(oid)
            if hashlib.sha1(b"%s %d\0" % (actual, len(payload)) + payload).hexdigest() != oid:
                raise StoreAltered(
                    f"snapshot object {oid} in {self.git_dir} was altered on disk (its content no longer has "
                    "its hash): nothing is restored from it"
                )
        if kind is not None and actual != kind:
            raise SnapshotError(f"snapshot object {oid} is a {actual.decode()}, expected {kind.decode()}")
        return payload

    def _read_stored(self, oid: str) -> tuple[bytes, bytes]:
        try:
            with open(self._path(oid), "rb") as handle:
                raw = zlib.decompress(handle.read())
        except FileNotFoundError:
            raw = None
        except zlib.error as error:
            raise StoreAltered(f"snapshot object {oid} in {self.git_dir} was altered on disk: {error}") from None
        except OSError as error:
            raise SnapshotError(f"snapshot object {oid} is missing or corrupt: {error}") from error
        if raw is None:
            return self._from_pack(oid)
        nul = raw.find(b"\0")
        if nul < 0:
            raise StoreAltered(f"snapshot object {oid} in {self.git_dir} was altered on disk (no header)")
        return raw[:nul].split(b" ")[0], raw[nul + 1 :]

    def _from_pack(self, oid: str) -> tuple[bytes, bytes]:
        """An object from the packs; the pack list is read again once when it lacks the object or
        names a pack that is gone (another process added a pack, or a collection replaced one)."""
        for again in (False, True):
            if again:
                self._packed = None
            where = self._packs().get(oid)
            if where is None:
                continue
            try:
                return packs.read_object(*where)
            except FileNotFoundError:
                continue
            except (zlib.error, IndexError) as error:
                raise StoreAltered(f"snapshot object {oid} in {where[0]} was altered on disk: {error}") from None
            except OSError as error:
                raise SnapshotError(f"snapshot object {oid} is unreadable in {where[0]}: {error}") from error
        raise SnapshotError(f"snapshot object {oid} is missing")

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
        self.flush()
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


STALE_TMP_S = 3600.0
"""A temporary file this old in `objects/tmp` is a killed writer's, removed when a store is opened."""
LOOSE_MAX = 64
"""A flush of more objects than this writes one pack instead of loose files."""
PACK_FLUSH_BYTES = 64 * 1024**2
"""Held object bytes that trigger a flush before `sync` (bounds a big snapshot's memory)."""
SYNC_SERIAL_MAX = 64
"""Up to this many files are fsynced one after another; more go to SYNC_THREADS threads."""
SYNC_THREADS = 8


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
