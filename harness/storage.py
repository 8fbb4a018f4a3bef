"""A write that failed because the disk did: what it means, where, and how much room is left.

Running out of space (ENOSPC, EDQUOT) or a failing device (EIO) under the state directory is not a
bug and not the agent's doing: the run ends `state_error` (exit 74) with the path and the free
space in one line, the last committed step stays resumable, and no good file was replaced by a
partial one (documents are written temp + fsync + rename; logs drop a torn tail on read).
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

from sandbox.errors import STORAGE_ERRNOS


def is_storage_failure(error: BaseException) -> bool:
    """True for an OSError that says the disk is full, over quota, read-only or failing."""
    return isinstance(error, OSError) and error.errno in STORAGE_ERRNOS


def describe(error: OSError, where: object = None) -> str:
    """One line: what failed, which path (else `where`), and how much space is left on that filesystem."""
    path = error.filename or error.filename2 or where
    where = f" writing {path}" if path else ""
    reason = {
        errno.ENOSPC: "the disk is full",
        errno.EDQUOT: "the disk quota is used up",
        errno.EIO: "the disk reported an I/O error",
        errno.EROFS: "the filesystem is read-only",
    }.get(error.errno or 0, error.strerror or "write failed")
    room = _free_space(Path(str(path))) if path else ""
    return f"{reason}{where}{room}; free space, then `harness resume` continues from the last committed step"


def _free_space(path: Path) -> str:
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        usage = shutil.disk_usage(probe)
    except OSError:
        return ""
    return f" ({_size(usage.free)} free of {_size(usage.total)} on the filesystem of {probe})"


def _size(count: int) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"
