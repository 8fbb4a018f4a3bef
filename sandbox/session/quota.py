"""A size-bounded workspace: the session's workspace as its own filesystem of a fixed size.

Bind mounts are outside the engine's storage limits, so a call that writes without end into the
workspace would fill the host's disk. With a quota, the workspace is an ext4 filesystem in a sparse
file of the session folder (`workspace.img`, costing only what is written), loop-mounted at
`workspace/` while the session is open: a write past the quota fails inside the container with
"No space left on device", and the host's disk never sees more than the quota. Mounting needs root
(a loop device); without it a quota is refused with a clear error, never silently dropped.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from sandbox.errors import WorkspaceError

MIN_QUOTA = 16 * 1024**2
"""The smallest workspace filesystem made (ext4 needs room for its own metadata)."""
FULL_BELOW = 1024**2
"""Free bytes under which the workspace counts as full."""


def image_file(workspace: Path) -> Path:
    """The filesystem image beside the workspace folder."""
    return Path(workspace).parent / "workspace.img"


def check_possible(quota: int) -> None:
    """Raise WorkspaceError when a quota of this size cannot be made on this machine."""
    if quota < MIN_QUOTA:
        raise WorkspaceError(f"a workspace quota must be at least {MIN_QUOTA // 1024**2} MiB, not {quota} bytes")
    if os.geteuid() != 0:
        raise WorkspaceError(
            "a workspace quota needs root: the workspace becomes a loop-mounted filesystem of that size "
            "(run as root, or leave --workspace-quota off)"
        )
    for tool in ("mkfs.ext4", "mount", "umount"):
        if shutil.which(tool) is None:
            raise WorkspaceError(f"a workspace quota needs {tool} (Debian: e2fsprogs, mount)")


def create(workspace: Path, quota: int) -> None:
    """Make the filesystem image (sparse) and mount it at workspace (created, empty); the caller has
    checked the quota can hold here (`check_possible`, before it made anything)."""
    image = image_file(workspace)
    with open(image, "wb") as handle:
        handle.truncate(quota)
    _run(["mkfs.ext4", "-q", "-F", "-m", "0", "-O", "^has_journal", str(image)], "making the workspace filesystem")
    Path(workspace).mkdir(parents=True, exist_ok=False)
    mount(workspace)
    lost = Path(workspace) / "lost+found"
    if lost.is_dir():
        lost.rmdir()  # mkfs's own folder: not part of the repository


def mount(workspace: Path) -> bool:
    """Mount the image at workspace unless it is mounted already; True when this call mounted it."""
    if os.path.ismount(workspace):
        return False
    image = image_file(workspace)
    if not image.is_file():
        raise WorkspaceError(f"the workspace filesystem {image} is missing")
    _run(["mount", "-o", "loop,nosuid,nodev", str(image), str(workspace)], "mounting the workspace filesystem")
    return True


def unmount(workspace: Path) -> None:
    """Unmount (lazily: a container still holding a bind of it keeps it until it goes)."""
    if os.path.ismount(workspace):
        _run(["umount", "-l", str(workspace)], "unmounting the workspace filesystem")


def free_bytes(workspace: Path) -> int:
    stats = os.statvfs(workspace)
    return stats.f_bavail * stats.f_frsize


def is_full(workspace: Path) -> bool:
    return free_bytes(workspace) < FULL_BELOW


def _run(argv: list[str], what: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise WorkspaceError(f"{what} failed: {(done.stderr or done.stdout).strip()[-300:]}")
