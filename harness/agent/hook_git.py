"""The git a user's hook sees on this machine: the workspace's history under a git directory of
harness's own, never the repository's config or hooks.

The workspace is a copy of the repository, its `.git` included, and a hook runs in it on this
machine. A `git status` there would read the repository's `.git/config`: `core.fsmonitor`, a filter
driver, `diff.external`, `core.hooksPath` are programs git runs, on the host, wherever git trusts
the folder. So a hook's git is pointed (`GIT_DIR`, `GIT_WORK_TREE`) at a folder made for that one
hook: its own config (no program of the repository's, submodules not entered), the repository's
HEAD, refs, packed refs and index copied in (regular files only, never through a link, bounded),
and the repository's objects borrowed read-only through an alternates entry. A workspace without a
`.git` folder gets a view git refuses as no repository, never a discovered one.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

CONFIG = """[core]
\trepositoryformatversion = 0
\tbare = false
\tfsmonitor = false
\thooksPath = /dev/null
\tattributesFile = /dev/null
[diff]
\tignoreSubmodules = all
[status]
\tsubmoduleSummary = false
[submodule]
\trecurse = false
"""
"""The config a hook's git reads (beside the user's own global and system config)."""
COPIED = ("HEAD", "packed-refs", "index", "shallow", "ORIG_HEAD", "FETCH_HEAD", "MERGE_HEAD")
FILE_LIMIT = 256 * 1024**2
REFS_LIMIT = 100_000


def git_environment(workspace: Path, view: Path) -> dict[str, str]:
    """The variables that give a hook's git the view made in `view` (an empty folder of harness's)."""
    source = workspace / ".git"
    view.mkdir(parents=True, exist_ok=True)
    if _is_folder(source):
        _fill(source, view)
    return {"GIT_DIR": str(view), "GIT_WORK_TREE": str(workspace)}


def _fill(source: Path, view: Path) -> None:
    (view / "config").write_text(CONFIG)
    for name in COPIED:
        _copy(source / name, view / name)
    for ref in _refs(source)[:REFS_LIMIT]:
        _copy(ref, view / ref.relative_to(source))
    objects = source / "objects"
    (view / "objects" / "info").mkdir(parents=True, exist_ok=True)
    chained = os.path.lexists(objects / "info" / "alternates")  # would lend objects of another folder here
    if _is_folder(objects) and not chained and "\n" not in str(objects):
        (view / "objects" / "info" / "alternates").write_text(f"{objects}\n")


def _refs(source: Path) -> list[Path]:
    """The files under refs/ (links to folders never entered)."""
    if not _is_folder(source / "refs"):
        return []
    return [Path(root) / name for root, _, files in os.walk(source / "refs") for name in files]


def _is_folder(path: Path) -> bool:
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except OSError:
        return False


def _copy(source: Path, target: Path) -> None:
    """A regular file of at most FILE_LIMIT bytes, opened without following a link."""
    try:
        handle = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return
    with os.fdopen(handle, "rb") as reading:
        info = os.fstat(reading.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > FILE_LIMIT:
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "wb") as writing:
            shutil.copyfileobj(reading, writing, 1 << 20)
