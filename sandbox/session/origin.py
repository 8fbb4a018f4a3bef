"""The commit a session's repository stood at when the session was made (what `harness apply` gives
its branch as parent): HEAD read from the repository's files (working copy, bare, linked worktree),
loose or packed refs; never the `git` binary, nothing the repository configures."""

from __future__ import annotations

from pathlib import Path

HEX = frozenset("0123456789abcdef")


def head_commit(repo: Path) -> str | None:
    """The commit HEAD names, or None (no repository, an unborn branch, anything unreadable)."""
    try:
        gitdir = _gitdir(Path(repo))
        if gitdir is None:
            return None
        common = gitdir / "commondir"
        commondir = (gitdir / common.read_text().strip()).resolve() if common.is_file() else gitdir
        value = (gitdir / "HEAD").read_text(encoding="ascii").strip()
        for _ in range(5):  # symbolic refs, followed a few times at most
            if not value.startswith("ref:"):
                return value if len(value) == 40 and set(value) <= HEX else None
            name = value.removeprefix("ref:").strip()
            found = _ref(gitdir, name) or _ref(commondir, name) or _packed(commondir, name)
            if found is None:
                return None
            value = found
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return None


def _gitdir(path: Path) -> Path | None:
    dot = path / ".git"
    if dot.is_dir():
        return dot
    if dot.is_file():
        text = dot.read_text(encoding="utf-8").strip()
        return (path / text.removeprefix("gitdir:").strip()).resolve() if text.startswith("gitdir:") else None
    return path if (path / "HEAD").is_file() and (path / "objects").is_dir() else None


def _ref(base: Path, name: str) -> str | None:
    if ".." in name:
        return None
    path = base / name
    return path.read_text(encoding="ascii").strip() if path.is_file() else None


def _packed(base: Path, name: str) -> str | None:
    path = base / "packed-refs"
    if not path.is_file():
        return None
    for line in path.read_text(encoding="ascii", errors="replace").splitlines():
        sha, _, ref = line.partition(" ")
        if ref.strip() == name and len(sha) == 40:
            return sha
    return None
