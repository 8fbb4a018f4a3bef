"""Who owns the workspace a container sees: the sandbox uid on a root host, the host user otherwise.

On a root host every workspace tree is handed to the sandbox uid so the (non-root) container user
can write it; on a non-root host the container runs as the host user instead. Either way the
container never runs as root.
"""

from __future__ import annotations

import os
from pathlib import Path

from sandbox.tree import walk

SANDBOX_UID = 10001
"""uid/gid of the `sandbox` user baked into Dockerfile.sandbox."""


def container_user() -> str:
    """uid:gid the container runs as for workspaces made by this process."""
    if os.geteuid() == 0:
        return f"{SANDBOX_UID}:{SANDBOX_UID}"
    return f"{os.getuid()}:{os.getgid()}"


def hand_over(path: Path) -> None:
    """Give a workspace tree (or one changed path) to the container user, never following links."""
    if os.geteuid() != 0:
        return
    path = Path(path)
    os.lchown(path, SANDBOX_UID, SANDBOX_UID)
    if path.is_symlink() or not path.is_dir():
        return
    for root, dirs, files in walk(path):
        for name in dirs + files:
            os.lchown(os.path.join(root, name), SANDBOX_UID, SANDBOX_UID)
