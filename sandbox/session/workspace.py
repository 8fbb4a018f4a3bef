"""Make the session workspace: a private copy of the user's repository that containers may write.

The original repository is read once, here, and never written. Symlinks are copied as links and
never followed; devices, sockets and FIFOs are skipped. On a root host the copy is handed to the
sandbox uid so the (non-root) container user can write it; on a non-root host the container runs as
the host user instead. Either way the container never runs as root.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from sandbox.errors import WorkspaceError
from sandbox.owner import hand_over
from sandbox.spec import MAX_FILE_BYTES
from sandbox.tree import walk


def copy_repository(
    src: Path, dst: Path, *, max_file_bytes: int | None = MAX_FILE_BYTES, left_out: list[str] | None = None
) -> int:
    """Copy the tree at src into dst (which must not exist, or be a directory holding nothing but
    empty directories: a workspace filesystem's mount point, or a borrowed slot with its read-only
    mount points made). Returns the number of entries copied.

    Files above max_file_bytes are not copied; each is appended to left_out as `path (why)`."""
    src = Path(src)
    if not src.exists():
        raise WorkspaceError(f"repository path does not exist: {src}")
    if not src.is_dir() or src.is_symlink():
        raise WorkspaceError(f"repository path is not a directory: {src}")
    dst = Path(dst)
    if dst.is_dir() and not dst.is_symlink() and _only_empty_dirs(dst):
        pass  # an empty mount point, or a slot whose mount points are made
    elif dst.exists() or dst.is_symlink():
        raise WorkspaceError(f"workspace already exists: {dst}")
    else:
        dst.mkdir(parents=True)
    count = 0
    for root, dirs, files in walk(src):  # no recursion: a repository may nest thousands deep
        target_root = dst / os.path.relpath(root, src)
        for name in dirs + files:
            source = Path(root) / name
            if max_file_bytes is not None and name in files and _too_big(source, max_file_bytes, src, left_out):
                continue
            count += _copy_entry(source, target_root / name)
    shutil.copystat(src, dst, follow_symlinks=False)
    hand_over(dst)
    return count


def _too_big(source: Path, limit: int, root: Path, left_out: list[str] | None) -> bool:
    st = source.lstat()
    if not stat.S_ISREG(st.st_mode) or st.st_size <= limit:
        return False
    sparse = " sparse," if st.st_blocks * 512 < st.st_size // 2 else ""
    if left_out is not None:
        left_out.append(f"{source.relative_to(root)} ({_size(st.st_size)},{sparse} over the {_size(limit)} limit)")
    return True


def _size(count: int) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"


def _only_empty_dirs(top: Path) -> bool:
    """True when every entry under top is a directory (not a symlink) and no file is anywhere."""
    return all(entry.is_dir() and not entry.is_symlink() and _only_empty_dirs(entry) for entry in top.iterdir())


def _copy_entry(source: Path, target: Path) -> int:
    st = source.lstat()
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(source), target)
    elif stat.S_ISDIR(st.st_mode):
        if not (target.is_dir() and not target.is_symlink()):  # else a mount point made for it
            target.mkdir()
        os.chmod(target, stat.S_IMODE(st.st_mode) | 0o700)
    elif stat.S_ISREG(st.st_mode):
        shutil.copy2(source, target, follow_symlinks=False)
    else:
        return 0
    return 1
