"""Compare two snapshots: a unified text diff with binary and mode changes listed, and a patch
that `git apply` accepts on the user's original repository.

Comparison walks only subtrees whose ids differ, so its cost follows the change. The patch is
made by `git diff-tree --binary` run against our own bare store only, with a scrubbed environment
and every repository-controlled feature off; nested `.git` directories and large files kept
outside the store are left out of the patch and named in its header instead.
"""

from __future__ import annotations

import difflib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from sandbox.errors import PatchConflict, SnapshotError
from sandbox.snapshot.edit import generated
from sandbox.snapshot.objects import DIR, EMPTY_TREE, LARGE, LINK, ObjectStore, TreeEntry
from sandbox.tree import PostOrder, post_order

ChangeKind = Literal["added", "deleted", "modified", "mode", "type"]


@dataclass(frozen=True)
class Change:
    """One path that differs between two snapshots (directories only for mode changes)."""

    path: str
    kind: ChangeKind
    old_mode: int | None = None
    new_mode: int | None = None
    binary: bool = False


@dataclass(frozen=True)
class SnapshotDiff:
    """What changed from one snapshot to another (plain data: `harness diff` builds no model)."""

    changes: list[Change] = field(default_factory=list)
    text: str = ""
    """Unified diff of text files and symlink targets."""

    @property
    def binary(self) -> list[str]:
        return [c.path for c in self.changes if c.binary]

    @property
    def mode_changes(self) -> list[Change]:
        return [
            c for c in self.changes if c.old_mode is not None and c.new_mode is not None and c.old_mode != c.new_mode
        ]


def _kind(mode: int) -> int:
    return mode & 0o170000


Changed = tuple[str, "TreeEntry | None", "TreeEntry | None"]


def compare(store: ObjectStore, a: str, b: str, rel: str = "") -> list[Changed]:
    """(path, old entry, new entry) for every non-directory entry that differs, plus dir mode changes,
    in path order. Subtrees are compared with an explicit stack (no recursion, however deep)."""
    out: list[Changed] = []
    stack = [_compare_one(store, a, b, rel)]
    while stack:
        item = next(stack[-1], None)
        if item is None:
            stack.pop()
        elif isinstance(item, _Subtree):
            stack.append(_compare_one(store, item.a, item.b, item.rel))
        else:
            out.append(item)
    return out


@dataclass(frozen=True)
class _Subtree:
    a: str
    b: str
    rel: str


def _compare_one(store: ObjectStore, a: str, b: str, rel: str) -> Iterator[Changed | _Subtree]:
    """One directory level: its changes, and the subtrees to compare in their place."""
    if a == b:
        return
    old = {e.name: e for e in store.tree(a)} if a else {}
    new = {e.name: e for e in store.tree(b)} if b else {}
    for name in sorted(old.keys() | new.keys()):
        x, y = old.get(name), new.get(name)
        if x == y:
            continue
        path = f"{rel}/{os.fsdecode(name)}" if rel else os.fsdecode(name)
        x_dir = x is not None and _kind(x.mode) == DIR
        y_dir = y is not None and _kind(y.mode) == DIR
        x_tree = x.oid if x is not None and x_dir else ""
        y_tree = y.oid if y is not None and y_dir else ""
        if x is not None and y is not None and x_dir and y_dir and x.mode != y.mode:
            yield (path + "/", x, y)
        if x_dir != y_dir and (x_tree or y_tree) == EMPTY_TREE:
            yield (path + "/", x if x_dir else None, y if y_dir else None)  # empty dirs show too
        if x_dir or y_dir:
            yield _Subtree(x_tree, y_tree, path)
        if (x is not None and not x_dir) or (y is not None and not y_dir):
            yield (path, None if x_dir else x, None if y_dir else y)


def _content(store: ObjectStore, entry: TreeEntry | None) -> bytes | None:
    if entry is None:
        return b""
    if entry.mode & LARGE:
        return None
    data = store.read(entry.oid, b"blob")
    return None if b"\0" in data[:8000] else data


def diff(store: ObjectStore, a: str, b: str) -> SnapshotDiff:
    """Unified diff from tree a to tree b (exact modes; binary files listed, not shown)."""
    changes: list[Change] = []
    text: list[str] = []
    for path, x, y in compare(store, a, b):
        if generated(path):
            continue  # caches and bytecode the tools or the tests wrote: never part of a change
        kind: ChangeKind = "added" if x is None else "deleted" if y is None else "modified"
        if x is not None and y is not None:
            if _kind(x.mode) != _kind(y.mode):
                kind = "type"
            elif x.oid == y.oid or path.endswith("/"):
                kind = "mode"
        is_dir = path.endswith("/")
        old_text, new_text = (b"", b"") if is_dir else (_content(store, x), _content(store, y))
        binary = kind != "mode" and (old_text is None or new_text is None)
        old_text, new_text = old_text or b"", new_text or b""
        changes.append(Change(path=path, kind=kind, old_mode=x and x.mode, new_mode=y and y.mode, binary=binary))
        if binary or kind == "mode" or is_dir:
            continue
        prefix = lambda e: "symlink -> " if e is not None and _kind(e.mode) == LINK else ""  # noqa: E731
        old_lines = [prefix(x) + line for line in old_text.decode("utf-8", "replace").splitlines(keepends=True)]
        new_lines = [prefix(y) + line for line in new_text.decode("utf-8", "replace").splitlines(keepends=True)]
        fromfile = "/dev/null" if x is None else f"a/{path}"
        tofile = "/dev/null" if y is None else f"b/{path}"
        for line in difflib.unified_diff(old_lines, new_lines, fromfile, tofile):
            text.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return SnapshotDiff(changes=changes, text="".join(text))


def _excluded(entry: TreeEntry) -> bool:
    return entry.name.lower() == b".git" or bool(_kind(entry.mode) != DIR and entry.mode & LARGE)


def _filtered(store: ObjectStore, tree: str, rel: str, drop: set[str], memo: dict[tuple[str, str], str]) -> str:
    """The same tree without nested `.git` directories, large-file pointers and paths in drop."""
    return post_order(_filtered_walk(store, tree, rel, drop, memo))


def _filtered_walk(
    store: ObjectStore, tree: str, rel: str, drop: set[str], memo: dict[tuple[str, str], str]
) -> PostOrder[str]:
    if (tree, rel) in memo:
        return memo[(tree, rel)]
    kept = []
    for entry in store.tree(tree):
        path = f"{rel}/{os.fsdecode(entry.name)}" if rel else os.fsdecode(entry.name)
        if _excluded(entry) or path in drop:
            continue
        if _kind(entry.mode) == DIR:
            entry = entry._replace(oid=(yield _filtered_walk(store, entry.oid, path, drop, memo)))
        kept.append(entry)
    memo[(tree, rel)] = store.write_tree(kept)
    return memo[(tree, rel)]


def git_env(git_dir: str, home: str) -> dict[str, str]:
    """An environment in which git reads only our own config: nothing from the host or repository."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": home,
        "XDG_CONFIG_HOME": home,
        "LC_ALL": "C",
        "GIT_DIR": git_dir,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_ATTR_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_OPTIONAL_LOCKS": "0",
    }


GIT_FLAGS = [
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.untrackedCache=false",
    "-c",
    "core.symlinks=true",
    "-c",
    "core.autocrlf=false",
    "-c",
    "core.attributesFile=/dev/null",
    "-c",
    "core.excludesFile=/dev/null",
    "-c",
    "core.protectNTFS=false",
    "-c",
    "diff.external=",
]


def git(
    store: ObjectStore, *args: str, cwd: str | None = None, work_tree: str | None = None, stdin: bytes | None = None
) -> subprocess.CompletedProcess[bytes]:
    """Run git against our bare store only (optionally reading a work tree, never its config)."""
    store.flush()  # objects written since the last snapshot must be on disk for git to read them
    with tempfile.TemporaryDirectory(prefix="harness-git-home-") as home:
        env = git_env(str(store.git_dir), home)
        if work_tree is not None:
            env["GIT_WORK_TREE"] = work_tree
        return subprocess.run(
            ["git", *GIT_FLAGS, *args], cwd=cwd or home, env=env, input=stdin, capture_output=True, check=False
        )


def patch(store: ObjectStore, a: str, b: str) -> tuple[str, list[str]]:
    """A `git apply`-able binary patch from a to b, and the changed paths it leaves out."""
    changed = compare(store, a, b)
    left_out = sorted(
        {
            p
            for p, x, y in changed
            if any(_excluded(e) for e in (x, y) if e is not None) or ".git" in p.lower().split("/")
        }
    )
    for _, *sides in changed:  # git reads objects unchecked: each one the patch shows is checked here first
        for entry in sides:
            if entry is not None and entry.mode & 0o170000 != DIR and not entry.mode & LARGE:
                store.read(entry.oid)
    memo: dict[tuple[str, str], str] = {}
    # a path that is large on one side only is left out on both; generated caches silently
    drop = set(left_out) | {p for p, _x, _y in changed if generated(p)}
    fa, fb = _filtered(store, a, "", drop, memo), _filtered(store, b, "", drop, memo)
    done = git(
        store,
        "diff-tree",
        "-r",
        "-p",
        "--binary",
        "--full-index",
        "--no-renames",
        "--no-textconv",
        "--no-ext-diff",
        "--no-color",
        fa,
        fb,
    )
    if done.returncode != 0:
        raise SnapshotError(f"git diff-tree failed: {done.stderr.decode(errors='replace').strip()}")
    return done.stdout.decode("utf-8", "surrogateescape"), left_out


def export_patch(store: ObjectStore, a: str, b: str) -> str:
    """A patch from tree a to tree b for `git apply` on the original repository, a comment line first
    for each changed path it leaves out (a nested .git, a large file)."""
    text, left_out = patch(store, a, b)
    note = "".join(f"# harness: not in this patch (nested .git or large file): {p}\n" for p in left_out)
    return note + text


def check_patch(store: ObjectStore, repo: Path, text: str) -> None:
    """Raise PatchConflict unless `git apply --check` accepts the patch on repo.

    git runs with our own store as GIT_DIR and a scrubbed environment: it reads only the files the
    patch names and never the repository's own .git, config, hooks or filter drivers.
    """
    if not repo.is_dir():
        raise PatchConflict(f"the original repository {repo} is gone; write the patch with -o and apply it elsewhere")
    done = git(
        store,
        "apply",
        "--check",
        "--whitespace=nowarn",
        "-",
        cwd=str(repo),
        work_tree=str(repo),
        stdin=text.encode("utf-8", "surrogateescape"),
    )
    if done.returncode != 0:
        first = (done.stderr.decode(errors="replace").strip().splitlines() or ["git apply --check failed"])[0]
        raise PatchConflict(f"the patch no longer applies to {repo} (it changed since import): {first}")
