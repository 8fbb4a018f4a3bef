"""Which workspace directories changed since the last look (Linux inotify, read without blocking).

An incremental snapshot must cost what changed, not what exists: stat-ing 100,000 files takes
most of a second here. The watcher marks a directory dirty when anything inside it is created,
written, chmod-ed, deleted or moved, including writes made by containers through the bind mount
(inotify sees every write to the inode, whatever mount namespace made it). When the kernel queue
overflows, or inotify is unavailable, `drain()` answers None and the caller walks everything.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct

_IN_MODIFY, _IN_ATTRIB, _IN_CLOSE_WRITE = 0x002, 0x004, 0x008
_IN_MOVED_FROM, _IN_MOVED_TO, _IN_CREATE, _IN_DELETE = 0x040, 0x080, 0x100, 0x200
_IN_DELETE_SELF, _IN_MOVE_SELF = 0x400, 0x800
_IN_Q_OVERFLOW, _IN_IGNORED, _IN_ISDIR = 0x4000, 0x8000, 0x40000000
_IN_ONLYDIR, _IN_DONT_FOLLOW, _IN_EXCL_UNLINK = 0x01000000, 0x02000000, 0x04000000
_MASK = (
    _IN_MODIFY
    | _IN_ATTRIB
    | _IN_CLOSE_WRITE
    | _IN_MOVED_FROM
    | _IN_MOVED_TO
    | _IN_CREATE
    | _IN_DELETE
    | _IN_DELETE_SELF
    | _IN_MOVE_SELF
    | _IN_ONLYDIR
    | _IN_DONT_FOLLOW
    | _IN_EXCL_UNLINK
)
_HEADER = struct.Struct("iIII")


class Watcher:
    """inotify watches on every directory of one tree, keyed by path relative to the root."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._paths: dict[int, str] = {}
        self._dirty: set[str] = set()
        self._overflow = False
        self._libc = ctypes.CDLL(None, use_errno=True)  # the process's own libc (find_library runs ldconfig)
        self.fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")

    def add(self, rel: str) -> None:
        """Watch one directory (never following a symlink); an error means a full walk later."""
        path = os.path.join(self.root, rel) if rel else self.root
        wd = self._libc.inotify_add_watch(self.fd, os.fsencode(path), _MASK)
        if wd < 0:
            if ctypes.get_errno() not in (errno.ENOENT, errno.ENOTDIR):
                self._overflow = True
            return
        self._paths[wd] = rel

    def drain(self) -> set[str] | None:
        """Directories (relative paths) touched since the last drain; None when unknown."""
        self._read()
        dirty, self._dirty = self._dirty, set()
        overflow, self._overflow = self._overflow, False
        return None if overflow else dirty

    def _read(self) -> None:
        while True:
            try:
                buf = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                return
            pos = 0
            while pos < len(buf):
                wd, mask, _cookie, length = _HEADER.unpack_from(buf, pos)
                pos += _HEADER.size + length
                if mask & _IN_Q_OVERFLOW:
                    self._overflow = True
                    continue
                rel = self._paths.get(wd)
                if rel is None:
                    continue
                if mask & _IN_IGNORED:
                    self._paths.pop(wd, None)
                self._dirty.add(rel)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def start(root: str) -> Watcher | None:
    """A watcher for root, or None where inotify is unavailable."""
    try:
        return Watcher(root)
    except (OSError, AttributeError):
        return None
