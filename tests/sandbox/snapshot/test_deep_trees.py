"""A repository nested deeper than Python's recursion limit: importing, snapshotting, diffing, rolling
back, exporting and deleting it never recurse on the Python stack. The limit is lowered for these tests
(a code path that recursed once per folder fails the same way at 400 folders under a limit of 300 as at
1,500 under the default 1,000, and the walks of a tree that deep cost a ninth)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.session.session import Session
from sandbox.session.setup import dependency_digest
from sandbox.spec import SandboxSpec
from sandbox.tree import copy_tree, remove_tree, walk

DEPTH = 400
LIMIT = 300


def _deep_repo(root: Path) -> str:
    root.mkdir()
    (root / "top.txt").write_text("top\n")
    folder = root
    for _ in range(DEPTH):
        folder = folder / "d"
        folder.mkdir()
    (folder / "leaf.txt").write_text("leaf\n")
    (folder / "requirements.txt").write_text("six\n")
    os.symlink("../..", folder / "up")  # a link in the depths: copied as a link, never followed
    return "/".join(["d"] * DEPTH)


@pytest.fixture
def tmp_path(tmp_path: Path) -> Iterator[Path]:
    """tmp_path under the lowered recursion limit, emptied without recursion afterwards (pytest's own
    clean-up would recurse)."""
    default = sys.getrecursionlimit()
    sys.setrecursionlimit(LIMIT)
    try:
        yield tmp_path
    finally:
        sys.setrecursionlimit(default)
    for child in tmp_path.iterdir():
        remove_tree(child, ignore_errors=True)


def test_a_tree_deeper_than_the_recursion_limit_round_trips(tmp_path: Path) -> None:
    assert sys.getrecursionlimit() < DEPTH
    rel = _deep_repo(tmp_path / "repo")
    session = Session.create(tmp_path / "repo", tmp_path / "state", spec=SandboxSpec())
    leaf = session.workspace / rel / "leaf.txt"
    assert leaf.read_text() == "leaf\n" and os.readlink(session.workspace / rel / "up") == "../.."
    leaf.write_text("changed\n")
    assert session.commit_step("deep change").step == 1
    diff = session.diff(0, 1)
    assert f"+++ b/{rel}/leaf.txt" in diff.text and "+changed" in diff.text
    patch = session.export_patch()
    assert "+changed" in patch
    session.check_patch(patch)  # git apply --check accepts it on the original
    session.rollback(0)
    assert leaf.read_text() == "leaf\n"
    assert len(dependency_digest(session.workspace)) == 64
    session.delete()
    assert not (tmp_path / "state" / session.id).exists()


def test_the_walk_prunes_and_never_follows_links(tmp_path: Path) -> None:
    rel = _deep_repo(tmp_path / "repo")
    seen = [folder for folder, _, _ in walk(tmp_path / "repo")]
    assert len(seen) == DEPTH + 1 and seen[0] == str(tmp_path / "repo")
    copy_tree(tmp_path / "repo", tmp_path / "copy")
    assert (tmp_path / "copy" / rel / "leaf.txt").read_text() == "leaf\n"
    remove_tree(tmp_path / "copy")
    assert not (tmp_path / "copy").exists() and (tmp_path / "repo" / rel / "leaf.txt").exists()
