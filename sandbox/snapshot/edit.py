"""New trees made from stored ones, without touching any workspace: some paths taken from another
tree (`graft`), generated caches left out (`prune`), one path's entry looked up (`entry_at`).

Verification uses them to run the task's tests against the state the agent left with the protected
files as they were at the start, and without the bytecode and caches anything wrote on the way.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from sandbox.snapshot.objects import DIR, EMPTY_TREE, ObjectStore, TreeEntry
from sandbox.tree import PostOrder, post_order

GENERATED = frozenset({b"__pycache__", b".pytest_cache", b".mypy_cache", b".ruff_cache", b".hypothesis"})
"""Directories that tools and test runners write on their own: never part of a change, a diff, a
patch or a verification's starting state (`.pyc` files outside them count too, see `generated`)."""


def generated(path: str) -> bool:
    """True for a path inside a generated cache directory, or a bytecode file."""
    parts = path.rstrip("/").split("/")
    return any(os.fsencode(part) in GENERATED for part in parts) or path.endswith((".pyc", ".pyo"))


def _is_dir(entry: TreeEntry | None) -> bool:
    return entry is not None and entry.mode & 0o170000 == DIR


def entry_at(objects: ObjectStore, tree: str, path: str) -> TreeEntry | None:
    """The entry at a `/`-separated path of tree, or None."""
    entry: TreeEntry | None = None
    current = tree
    for part in path.strip("/").split("/"):
        if not current:
            return None
        found = {e.name: e for e in objects.tree(current)}.get(os.fsencode(part))
        if found is None:
            return None
        entry, current = found, found.oid if _is_dir(found) else ""
    return entry


def kind_at(objects: ObjectStore, tree: str, path: str) -> str | None:
    """What a `/`-separated path of tree is: "file", "folder", "link" (the path itself, or a folder
    on the way to it, is a link), "large" (a large file's pointer), "other"; None when absent."""
    from sandbox.snapshot.objects import LARGE

    current = tree
    parts = path.strip("/").split("/")
    for n, part in enumerate(parts):
        found = {e.name: e for e in objects.tree(current)}.get(os.fsencode(part))
        if found is None:
            return None
        kind = found.mode & 0o170000
        if kind == 0o120000:
            return "link"
        if n < len(parts) - 1:
            if kind != DIR:
                return None
            current = found.oid
            continue
        if kind == DIR:
            return "folder"
        if kind == 0o100000:
            return "large" if found.mode & LARGE else "file"
        return "other"
    return None


def graft(objects: ObjectStore, tree: str, source: str, paths: Iterable[str]) -> str:
    """tree with each of paths exactly as it is in source: its entry (a file, or a whole directory)
    taken over, or removed where source has none. Directories the paths need are made."""
    plan: dict[bytes, dict | None] = {}
    for path in paths:
        parts = [os.fsencode(part) for part in path.strip("/").split("/") if part]
        level = plan
        for part in parts[:-1]:
            below = level.setdefault(part, {})
            if below is None:  # an ancestor is taken whole already
                break
            level = below
        else:
            if parts:
                level[parts[-1]] = None
    return _graft(objects, tree, source, plan)


def _graft(objects: ObjectStore, tree: str, source: str, plan: dict[bytes, dict | None]) -> str:
    entries = {e.name: e for e in objects.tree(tree)} if tree else {}
    theirs = {e.name: e for e in objects.tree(source)} if source else {}
    for name, below in plan.items():
        mine, other = entries.get(name), theirs.get(name)
        if below is None:
            if other is None:
                entries.pop(name, None)
            else:
                entries[name] = other
            continue
        mine_dir = mine if mine is not None and _is_dir(mine) else None
        other_dir = other if other is not None and _is_dir(other) else None
        inner = _graft(objects, mine_dir.oid if mine_dir else "", other_dir.oid if other_dir else "", below)
        if inner == EMPTY_TREE and mine_dir is None and other_dir is None:
            continue  # nothing to put there, and no directory was there on either side
        kept = mine_dir or other_dir
        mode = kept.mode if kept is not None else DIR | 0o755
        entries[name] = TreeEntry(mode, name, inner)
    return objects.write_tree(list(entries.values()))


def prune(objects: ObjectStore, tree: str) -> str:
    """tree without generated cache directories and bytecode files, at any depth (no recursion:
    a repository may nest thousands deep)."""
    return post_order(_prune(objects, tree, {}))


def _prune(objects: ObjectStore, tree: str, memo: dict[str, str]) -> PostOrder[str]:
    if tree in memo:
        return memo[tree]
    kept = []
    for entry in objects.tree(tree):
        if entry.name in GENERATED and _is_dir(entry):
            continue
        if not _is_dir(entry) and entry.name.endswith((b".pyc", b".pyo")):
            continue
        if _is_dir(entry):
            entry = entry._replace(oid=(yield _prune(objects, entry.oid, memo)))
        kept.append(entry)
    memo[tree] = objects.write_tree(kept)
    return memo[tree]
