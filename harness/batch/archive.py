"""Trees as archives whose bytes depend only on the tree, and unpacking that trusts nothing in them.

`pack` keeps symlinks as links (never followed), leaves out devices, sockets, FIFOs and files over
the workspace's size limit, and zeroes owners and archive times, so the SHA-256 of the bytes names
the content. `unpack` makes only directories, regular files and symlinks, refuses absolute names,
`..`, entries under a symlink or under anything the archive did not make a directory, and drops
set-id and sticky bits.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import shutil
import stat
import tarfile
import uuid
from pathlib import Path

from sandbox.spec import MAX_FILE_BYTES
from sandbox.tree import remove_tree, walk


def pack(root: Path, *, leave: frozenset[str] = frozenset()) -> bytes:
    """The tree at root as a gzip'd tar whose bytes depend only on the tree (names, contents, modes,
    modification times): entries in walk order, owners and archive times zeroed. Symlinks are kept
    as links and never followed; devices, sockets and FIFOs are left out, and so are files over the
    workspace's size limit and the top-level names in `leave`."""
    raw = io.BytesIO()
    with (
        gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=1, mtime=0) as zipped,
        tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as archive,
    ):
        for folder, dirs, others in walk(root):
            relative = os.path.relpath(folder, root)
            if relative == ".":
                dirs[:] = [name for name in dirs if name not in leave]
                others = [name for name in others if name not in leave]
            for name in [*dirs, *others]:
                path = os.path.join(folder, name)
                info = _info(path, os.path.normpath(os.path.join(relative, name)))
                if info is None:
                    continue
                if info.isreg():
                    with open(path, "rb") as handle:
                        archive.addfile(info, handle)
                else:
                    archive.addfile(info)
    return raw.getvalue()


def _info(path: str, name: str) -> tarfile.TarInfo | None:
    st = os.lstat(path)
    info = tarfile.TarInfo(name)
    info.mode, info.mtime = stat.S_IMODE(st.st_mode), int(st.st_mtime)
    if stat.S_ISDIR(st.st_mode):
        info.type = tarfile.DIRTYPE
    elif stat.S_ISLNK(st.st_mode):
        info.type, info.linkname = tarfile.SYMTYPE, os.readlink(path)
    elif stat.S_ISREG(st.st_mode) and st.st_size <= MAX_FILE_BYTES:
        info.size = st.st_size
    else:
        return None
    return info


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def unpack_into(data: bytes, target: Path) -> None:
    """Unpack an archive made by `pack` at target, replacing what is there, atomically: a crash or a
    refused entry leaves only a temporary folder (removed when it can be), never a half-filled target."""
    staging = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}")
    staging.mkdir(parents=True)
    try:
        unpack(data, staging)
        if target.exists():
            remove_tree(target)
        os.replace(staging, target)
    except BaseException:
        remove_tree(staging, ignore_errors=True)
        raise


def unpack(data: bytes, root: Path) -> int:
    """Unpack into the existing, empty directory root; returns the entries made. Refuses anything
    but directories, regular files and symlinks, absolute names and `..`, and entries under a
    symlink or under anything the archive did not make a directory; drops set-id and sticky bits."""
    made: set[str] = {"."}
    folders: list[tuple[str, int, int]] = []
    count = 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        for info in archive:
            name = os.path.normpath(info.name)
            if os.path.isabs(name) or name == "." or name.split(os.sep)[0] == ".." or "\x00" in name:
                raise ValueError(f"refused archive entry {info.name!r}")
            if (os.path.dirname(name) or ".") not in made:
                raise ValueError(f"refused archive entry {info.name!r}: its folder is not one the archive made")
            path = os.path.join(root, name)
            mode = info.mode & 0o777
            if info.isdir():
                os.mkdir(path, 0o700)
                made.add(name)
                folders.append((path, mode, int(info.mtime)))
            elif info.issym():
                os.symlink(info.linkname, path)
            elif info.isreg():
                source = archive.extractfile(info)
                if source is None:
                    raise ValueError(f"refused archive entry {info.name!r}: unreadable")
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                with source, os.fdopen(descriptor, "wb") as handle:
                    shutil.copyfileobj(source, handle, 1 << 20)
                os.chmod(path, mode, follow_symlinks=False)
                os.utime(path, (info.mtime, info.mtime), follow_symlinks=False)
            else:
                raise ValueError(f"refused archive entry {info.name!r}: not a file, folder or link")
            count += 1
    for path, mode, mtime in reversed(folders):  # deepest first, so a read-only folder is closed last
        os.chmod(path, mode)
        os.utime(path, (mtime, mtime))
    return count
