"""Our pack files are git's: git verifies them and reads every object back; so do we."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from sandbox.errors import SnapshotError
from sandbox.snapshot import objects as objects_module
from sandbox.snapshot import packs
from sandbox.snapshot.diff import git
from sandbox.snapshot.objects import ObjectStore, TreeEntry

pytestmark = pytest.mark.timeout(60)


def test_git_verifies_our_pack_and_reads_every_object(tmp_path: Path) -> None:
    store = ObjectStore(tmp_path / "git")
    store.init()
    blobs = {
        store.write(b"blob", data): data
        for data in [b"", b"x" * 15, b"y" * 16, os.urandom(5000), os.urandom(200_000), b"hello\n"]
        + [f"file {i}\n".encode() for i in range(100)]
    }
    tree = store.write_tree([TreeEntry(0o100644, f"f{i}".encode(), oid) for i, oid in enumerate(blobs)])
    store.sync(durable=True)
    [pack] = (tmp_path / "git" / "objects" / "pack").glob("*.pack")
    assert not list((tmp_path / "git" / "objects").glob("??/*")), "all of them went into the pack"
    verified = subprocess.run(["git", "verify-pack", "-v", str(pack.with_suffix(".idx"))], capture_output=True)
    assert verified.returncode == 0, verified.stderr
    for oid, data in blobs.items():
        shown = git(store, "cat-file", "blob", oid)
        assert shown.returncode == 0 and shown.stdout == data
    listing = git(store, "ls-tree", tree).stdout.decode()
    assert listing.count("\n") == len(blobs)
    fresh = ObjectStore(tmp_path / "git")  # a new process: from the index on disk
    assert all(fresh.read(oid, b"blob") == data for oid, data in blobs.items())
    with pytest.raises(SnapshotError, match="is a blob, expected tree"):
        fresh.read(next(iter(blobs)), b"tree")


def test_offsets_beyond_2_gib_use_the_large_offset_table(tmp_path: Path) -> None:
    entries = [(f"{1:040x}", 12, 7), (f"{2:040x}", 2**31 + 5, 8), (f"{3:040x}", 2**33, 9)]
    (tmp_path / "p.idx").write_bytes(packs._index(entries, b"\0" * 20))
    assert packs.read_index(tmp_path / "p.idx") == {oid: offset for oid, offset, _ in entries}


def test_few_objects_stay_loose_and_a_truncated_pack_is_an_error(tmp_path: Path, monkeypatch) -> None:
    store = ObjectStore(tmp_path / "git")
    store.init()
    store.write(b"blob", b"one")
    store.sync(durable=False)
    assert list((tmp_path / "git" / "objects").glob("??/*")) and not (tmp_path / "git" / "objects" / "pack").exists()
    monkeypatch.setattr(objects_module, "LOOSE_MAX", 0)
    oid = store.write(b"blob", os.urandom(10_000))
    store.sync(durable=False)
    [pack] = (tmp_path / "git" / "objects" / "pack").glob("*.pack")
    pack.write_bytes(pack.read_bytes()[:200])
    with pytest.raises(SnapshotError, match=r"unreadable|truncated"):
        ObjectStore(tmp_path / "git").read(oid)
