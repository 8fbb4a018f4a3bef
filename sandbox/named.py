"""A file that a flag, a config or a repository names, read as hostile input.

Such a path may be anything: a device that never ends (`/dev/zero`), a named pipe nobody writes, a
folder, a file of gigabytes, a link. Before a byte is read, the file is opened without blocking
(a pipe's open does not wait for a writer) and checked from the open descriptor (what was checked is
what is read): a regular file, at most `limit` bytes. It is then read to at most `limit` bytes; one
that grew meanwhile is refused too. The error names what the file is for (`what`: the flag or key)
and what is wrong, in one line.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import ClassVar

from sandbox.errors import SandboxError
from sandbox.exit_code import ExitCode

KINDS = {
    stat.S_IFIFO: "a named pipe",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a folder",
    stat.S_IFLNK: "a link",
}


class NamedFileError(SandboxError, ValueError):
    """A file named by a flag, a config or a repository that is not one harness reads."""

    exit_code: ClassVar[int] = ExitCode.USAGE


def read_named(path: Path | str, *, what: str, limit: int, follow: bool = True) -> bytes:
    """The bytes of a regular file of at most `limit` bytes; NamedFileError naming `what` otherwise
    (follow=False: a link is refused too)."""
    shown = str(path)
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        handle = os.open(Path(path).expanduser(), flags)
    except OSError as error:
        if not follow and error.errno == errno.ELOOP:  # O_NOFOLLOW met a link
            raise NamedFileError(f"{what} {shown}: is a link; give the file itself") from None
        raise NamedFileError(f"{what} {shown}: cannot open it ({error.strerror or error})") from None
    try:
        info = os.fstat(handle)
        kind = stat.S_IFMT(info.st_mode)
        if kind != stat.S_IFREG:
            raise NamedFileError(f"{what} {shown}: is {KINDS.get(kind, 'not a regular file')}, not a regular file")
        if info.st_size > limit:
            raise NamedFileError(f"{what} {shown}: is {_size(info.st_size)}; at most {_size(limit)} is read")
        os.set_blocking(handle, True)
    except BaseException:
        os.close(handle)
        raise
    with os.fdopen(handle, "rb", buffering=0) as reading:
        data = bytearray()
        while len(data) <= limit:
            piece = reading.read(min(1 << 20, limit + 1 - len(data)))
            if not piece:
                break
            data += piece
    if len(data) > limit:
        raise NamedFileError(f"{what} {shown}: grew past {_size(limit)} while it was read")
    return bytes(data)


def check_named(path: Path | str, *, what: str, limit: int) -> None:
    """NamedFileError unless path is a regular file of at most `limit` bytes (nothing is read)."""
    shown = str(path)
    try:
        info = os.stat(Path(path).expanduser())
    except OSError as error:
        raise NamedFileError(f"{what} {shown}: cannot open it ({error.strerror or error})") from None
    kind = stat.S_IFMT(info.st_mode)
    if kind != stat.S_IFREG:
        raise NamedFileError(f"{what} {shown}: is {KINDS.get(kind, 'not a regular file')}, not a regular file")
    if info.st_size > limit:
        raise NamedFileError(f"{what} {shown}: is {_size(info.st_size)}; at most {_size(limit)} is read")


def _size(count: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} bytes"
