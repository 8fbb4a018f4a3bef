"""Fault injection for the tests: a real filesystem that fills up, writes whose fsync fails with an I/O
error, files torn at a chosen byte. Reusable by any test (they inject into the real code paths:
nothing of harness is replaced)."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_filesystem(where: Path, size: str = "8m") -> Iterator[Path]:
    """A real tmpfs of `size` mounted at where (root only; skips otherwise). Writes past it fail with
    ENOSPC exactly as a full disk does."""
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({done.stderr.decode().strip()}): needs root")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill(filesystem: Path, leave: int = 0) -> Path:
    """Fill filesystem until `leave` bytes remain free; returns the filler file (delete it to make room)."""
    filler = filesystem / f".filler-{uuid.uuid4().hex[:6]}"
    with open(filler, "wb") as handle:
        chunk = b"\0" * (1 << 20)
        while True:
            free = os.statvfs(filesystem).f_bavail * os.statvfs(filesystem).f_frsize
            if free <= leave:
                break
            try:
                handle.write(chunk[: max(1, min(len(chunk), free - leave))])
                handle.flush()
            except OSError as error:
                if error.errno != errno.ENOSPC:
                    raise
                break
    return filler


@contextlib.contextmanager
def failing_fsync(under: Path, error: int = errno.EIO, after: int = 0) -> Iterator[list[str]]:
    """Every fsync of a file under `under` fails with `error` once `after` of them succeeded (a dying
    disk reports at fsync). Yields the paths whose fsync failed."""
    real, failed, seen = os.fsync, [], [0]
    root = str(Path(under).resolve())

    def fsync(fd: int) -> None:
        path = ""
        with contextlib.suppress(OSError):
            path = os.readlink(f"/proc/self/fd/{fd}")
        if path.startswith(root) and not os.path.isdir(path):
            seen[0] += 1
            if seen[0] > after:
                failed.append(path)
                raise OSError(error, os.strerror(error), path)
        real(fd)

    os.fsync = fsync
    try:
        yield failed
    finally:
        os.fsync = real


def tear(path: Path, at: int) -> bytes:
    """Cut path at byte `at` (what a crash mid-write leaves); returns the bytes cut off."""
    data = path.read_bytes()
    path.write_bytes(data[:at])
    return data[at:]
