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


def copy_repository(src: Path, dst: Path) -> int:
    """Copy the tree at src into dst (which must not exist). Returns the number of entries copied."""
    src = Path(src)
    if not src.exists():
        raise WorkspaceError(f"repository path does not exist: {src}")
    if not src.is_dir() or src.is_symlink():
        raise WorkspaceError(f"repository path is not a directory: {src}")
    dst = Path(dst)
    if dst.exists():
        raise WorkspaceError(f"workspace already exists: {dst}")
    dst.mkdir(parents=True)
    count = 0
    for root, dirs, files in os.walk(src, followlinks=False):
        rel = Path(root).relative_to(src)
        target_root = dst / rel
        for name in dirs + files:
            count += _copy_entry(Path(root) / name, target_root / name)
        # os.walk lists symlinked dirs in `dirs` but does not descend with followlinks=False.
    shutil.copystat(src, dst, follow_symlinks=False)
    hand_over(dst)
    return count


def _copy_entry(source: Path, target: Path) -> int:
    st = source.lstat()
    if stat.S_ISLNK(st.st_mode):
        os.symlink(os.readlink(source), target)
    elif stat.S_ISDIR(st.st_mode):
        target.mkdir()
        os.chmod(target, stat.S_IMODE(st.st_mode) | 0o700)
    elif stat.S_ISREG(st.st_mode):
        shutil.copy2(source, target, follow_symlinks=False)
    else:
        return 0
    return 1
