"""Snapshot store: byte-identical round trips, what is stored, and what is never run."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from sandbox.errors import SnapshotError
from sandbox.snapshot import diff as snapdiff
from sandbox.snapshot import objects as objects_module
from sandbox.snapshot.store import SnapshotConfig, SnapshotStore
from tests.sandbox.snapshot.snapshot_trees import fingerprint, make_repo

pytestmark = pytest.mark.timeout(60)


def _edits(ws: Path) -> list:
    """Each step's edit: edits, creations, deletions, renames, mode changes, links, binaries, empty dirs."""
    return [
        lambda: (ws / "src" / "app.py").write_text("def f():\n    return 2\n"),
        lambda: (ws / "new dir" / "deep").mkdir(parents=True),
        lambda: os.rename(ws / "src" / "util.py", ws / "src" / "helpers_renamed.py"),
        lambda: os.chmod(ws / "run.sh", 0o640),
        lambda: (ws / "data.bin").write_bytes(os.urandom(3000)),
        lambda: (os.unlink(ws / "link-to-app"), os.symlink("/etc/hostname", ws / "link-to-app")),
        lambda: shutil.rmtree(ws / "build"),
        lambda: (ws / "empty" / "now-a-file").write_bytes(b"\0binary\0"),
        lambda: (ws / "vendor" / "inner" / ".git" / "HEAD").write_text("ref: refs/heads/other\n"),
        lambda: (shutil.rmtree(ws / "src"), (ws / "src").write_text("src is a file now\n")),
    ]


@pytest.fixture(params=["loose", "packed"])
def storage(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every new object written loose, or every snapshot's new objects written as one pack."""
    monkeypatch.setattr(objects_module, "LOOSE_MAX", 10**9 if request.param == "loose" else 0)
    return request.param


@pytest.mark.parametrize("watch", [True, False], ids=["watcher", "stat-walk"])
def test_rollback_to_every_step_is_byte_identical(tmp_path: Path, watch: bool, storage: str) -> None:
    ws = make_repo(tmp_path / "ws")
    store = SnapshotStore(ws, tmp_path / "store", SnapshotConfig(watch=watch))
    trees, prints = [store.snapshot()], [fingerprint(ws)]
    for edit in _edits(ws):
        edit()
        trees.append(store.snapshot())
        prints.append(fingerprint(ws))
    assert len(set(trees)) == len(trees), "every edit must change the tree"
    for index in [3, 0, 7, len(trees) - 1, 1, 10, 5]:
        store.restore(trees[index])
        assert fingerprint(ws) == prints[index], f"step {index}"
    store.close()
    reopened = SnapshotStore(ws, tmp_path / "store", SnapshotConfig(watch=watch))
    assert reopened.snapshot() == trees[5]
    reopened.restore(trees[0])  # a new process reads what the first one stored (its packs' indexes)
    assert fingerprint(ws) == prints[0]
    reopened.close()
    packs = list((tmp_path / "store" / "git" / "objects" / "pack").glob("*.pack"))
    assert (len(packs) == len(trees)) if storage == "packed" else not packs


def test_stores_ignored_files_nested_git_and_links_as_links(tmp_path: Path) -> None:
    ws = make_repo(tmp_path / "ws")
    store = SnapshotStore(ws, tmp_path / "store")
    tree = store.snapshot()
    before = fingerprint(ws)
    shutil.rmtree(ws)
    ws.mkdir()
    store.restore(tree)
    after = fingerprint(ws)
    assert after == before
    for path in [
        "debug.log",
        "build/out.o",
        ".git/HEAD",
        "vendor/buried.git/HEAD",
        "vendor/buried.git/config",
        "vendor/inner/.git/config",
        "vendor/inner/file.txt",
        "empty",
    ]:
        assert path in after, path
    assert after["link-to-etc"] == ("link", "/etc/passwd")
    assert after["dangling"] == ("link", "does/not/exist")


def test_change_with_same_size_and_mtime_is_seen(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    target = ws / "f.txt"
    target.write_text("aaaa\n")
    st = target.stat()
    for watch in (True, False):
        store = SnapshotStore(ws, tmp_path / f"store-{watch}", SnapshotConfig(watch=watch))
        first = store.snapshot()
        target.write_text("bbbb\n" if target.read_text() == "aaaa\n" else "aaaa\n")
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert store.snapshot() != first
        store.close()


def test_write_through_a_hard_link_is_seen(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "a").mkdir(parents=True)
    (ws / "b").mkdir()
    (ws / "a" / "one").write_text("1\n")
    os.link(ws / "a" / "one", ws / "b" / "two")
    store = SnapshotStore(ws, tmp_path / "store")
    first = store.snapshot()
    store.snapshot()
    with open(ws / "a" / "one", "a") as handle:
        handle.write("more\n")
    second = store.snapshot()
    assert second != first
    store.restore(first)
    assert (ws / "b" / "two").read_text() == "1\n"


def test_large_files_are_stored_by_hash_and_ignored_paths_skipped(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "data").mkdir(parents=True)
    big = os.urandom(50_000)
    (ws / "data" / "big.bin").write_bytes(big)
    (ws / "node_modules" / "x").mkdir(parents=True)
    (ws / "node_modules" / "x" / "index.js").write_text("junk\n")
    (ws / "keep.txt").write_text("k\n")
    config = SnapshotConfig(max_file_size=10_000, ignore=["node_modules/"])
    store = SnapshotStore(ws, tmp_path / "store", config)
    first = store.snapshot()
    assert store.skipped() == ["node_modules"]
    assert len(list((tmp_path / "store" / "large").iterdir())) == 1
    (ws / "data" / "big.bin").write_bytes(b"small now\n")
    (ws / "keep.txt").unlink()
    second = store.snapshot()
    store.restore(first)
    assert (ws / "data" / "big.bin").read_bytes() == big
    assert (ws / "keep.txt").read_text() == "k\n"
    assert (ws / "node_modules" / "x" / "index.js").read_text() == "junk\n", "ignored paths are left alone"
    text, left_out = snapdiff.patch(store.objects, first, second)
    assert left_out == ["data/big.bin"] and "big.bin" not in text


def test_diff_lists_text_binary_and_mode_changes(tmp_path: Path, storage: str) -> None:
    ws = make_repo(tmp_path / "ws")
    store = SnapshotStore(ws, tmp_path / "store")
    a = store.snapshot()
    (ws / "src" / "app.py").write_text("def f():\n    return 42\n")
    (ws / "data.bin").write_bytes(b"\0\1\2")
    os.chmod(ws / "run.sh", 0o700)
    os.rmdir(ws / "empty")
    b = store.snapshot()
    result = snapdiff.diff(store.objects, a, b)
    assert "-    return 1\n+    return 42\n" in result.text
    assert result.binary == ["data.bin"]
    modes = {c.path: (c.old_mode, c.new_mode) for c in result.mode_changes}
    assert modes == {"run.sh": (0o100755, 0o100700)}
    assert any(c.path == "empty/" and c.kind == "deleted" for c in result.changes)


def test_restore_to_unknown_tree_changes_nothing(tmp_path: Path) -> None:
    ws = make_repo(tmp_path / "ws")
    store = SnapshotStore(ws, tmp_path / "store")
    store.snapshot()
    before = fingerprint(ws)
    with pytest.raises(SnapshotError):
        store.restore("0" * 40)
    assert fingerprint(ws) == before


def _plant_hostile(repo: Path, marker: Path) -> None:
    touch = f"touch {marker}"
    config = repo / ".git" / "config"
    config.write_text(
        config.read_text() + f"[core]\n\tfsmonitor = {touch}\n\thooksPath = hooks\n"
        f'[filter "evil"]\n\tclean = {touch}\n\tsmudge = {touch}\n\tprocess = {touch}\n'
        f'[diff "evil"]\n\ttextconv = {touch}\n\tcommand = {touch}\n'
    )
    for hook in ("pre-commit", "post-checkout", "post-index-change", "fsmonitor-watchman"):
        for folder in (repo / ".git" / "hooks", repo / "hooks"):
            folder.mkdir(exist_ok=True)
            (folder / hook).write_text(f"#!/bin/sh\n{touch}\n")
            os.chmod(folder / hook, 0o755)
    (repo / ".gitattributes").write_text("* filter=evil diff=evil\n")
    buried = repo / "vendor" / "buried.git" / "config"
    buried.write_text(buried.read_text() + f"[core]\n\tfsmonitor = {touch}\n")


def test_hostile_repository_runs_nothing_on_the_host(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    repo = make_repo(tmp_path / "repo")
    _plant_hostile(repo, marker)
    ws = tmp_path / "ws"
    shutil.copytree(repo, ws, symlinks=True)
    store = SnapshotStore(ws, tmp_path / "store")
    a = store.snapshot()
    (ws / "src" / "app.py").write_text("changed\n")
    (ws / "new.txt").write_text("new\n")
    b = store.snapshot()
    snapdiff.diff(store.objects, a, b)
    text, _ = snapdiff.patch(store.objects, a, b)
    store.restore(a)
    store.restore(b)
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy, symlinks=True)
    done = snapdiff.git(store.objects, "apply", "--check", "-", cwd=str(copy), work_tree=str(copy), stdin=text.encode())
    assert done.returncode == 0, done.stderr
    assert not marker.exists(), "a command planted by the repository ran on the host"
    # The plant is live: plain git in that repository does run it, so the check above means something.
    subprocess.run(["git", "-C", str(copy), "status"], capture_output=True, check=False)
    assert marker.exists()


def test_directory_recreated_at_once_is_rescanned(tmp_path: Path) -> None:
    """rm -rf + mkdir often reuses the inode: the snapshot must still see the new contents."""
    ws = tmp_path / "ws"
    (ws / "pkg" / "sub").mkdir(parents=True)
    (ws / "pkg" / "sub" / "old.txt").write_text("old\n")
    store = SnapshotStore(ws, tmp_path / "store")
    first = store.snapshot()
    for round_ in range(3):
        shutil.rmtree(ws / "pkg")
        (ws / "pkg" / "sub").mkdir(parents=True)
        (ws / "pkg" / "sub" / "new.txt").write_text(f"new {round_}\n")
        tree = store.snapshot()
        fresh = SnapshotStore(ws, tmp_path / f"check-{round_}", SnapshotConfig(watch=False)).snapshot()
        assert tree == fresh != first


def test_incremental_snapshots_equal_fresh_full_walks_under_random_edits(tmp_path: Path) -> None:
    import random

    rng = random.Random(7)
    ws = tmp_path / "ws"
    ws.mkdir()
    store = SnapshotStore(ws, tmp_path / "store")
    store.snapshot()

    def dirs() -> list[Path]:
        return [ws] + [p for p in ws.rglob("*") if p.is_dir() and not p.is_symlink()]

    def entries() -> list[Path]:
        return [p for p in ws.rglob("*")]

    for round_ in range(40):
        for _ in range(rng.randint(1, 4)):
            op, base = rng.random(), rng.choice(dirs())
            candidates = entries()
            victim = rng.choice(candidates) if candidates else None
            if op < 0.3:
                (base / f"f{rng.randint(0, 30)}").write_bytes(os.urandom(rng.randint(0, 64)))
            elif op < 0.45:
                (base / f"d{rng.randint(0, 9)}").mkdir(exist_ok=True)
            elif op < 0.55 and victim is not None:
                shutil.rmtree(victim) if victim.is_dir() and not victim.is_symlink() else victim.unlink()
            elif op < 0.7 and victim is not None and not (victim.is_dir() and base.is_relative_to(victim)):
                target = base / f"r{rng.randint(0, 99)}"
                if not target.exists():
                    os.rename(victim, target)
            elif op < 0.8 and victim is not None and not victim.is_symlink():
                os.chmod(victim, rng.choice([0o755, 0o700, 0o750] if victim.is_dir() else [0o755, 0o644, 0o600]))
            elif op < 0.9:
                link = base / f"l{rng.randint(0, 9)}"
                if not os.path.lexists(link):
                    os.symlink(rng.choice(["/etc", "..", "nowhere", "f1"]), link)
            elif victim is not None and victim.is_file() and not victim.is_symlink():
                with open(victim, "ab") as handle:
                    handle.write(b"x")
        tree = store.snapshot()
        fresh = SnapshotStore(ws, tmp_path / "fresh", SnapshotConfig(watch=False))
        assert tree == fresh.snapshot(), f"round {round_}"
        shutil.rmtree(tmp_path / "fresh")


def test_durable_snapshot_flushes_only_its_own_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Many new objects are fsynced one by one (with their directories), never by a machine-wide sync
    that would make concurrent sessions wait for each other's disks."""
    ws = tmp_path / "ws"
    (ws / "many").mkdir(parents=True)
    for i in range(300):
        (ws / "many" / f"f{i}.txt").write_text(f"file {i}\n")
    (ws / "big.bin").write_bytes(os.urandom(4096))
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    def machine_wide() -> None:
        raise AssertionError("os.sync() flushes every disk of the machine")

    monkeypatch.setattr(os, "sync", machine_wide)
    monkeypatch.setattr(os, "fsync", fsync)
    store = SnapshotStore(ws, tmp_path / "store", SnapshotConfig(durable=True, max_file_size=1024))
    store.snapshot()
    store.close()
    objects = tmp_path / "store" / "git" / "objects"
    packs = {str(p) for p in (objects / "pack").iterdir()}
    assert len(packs) == 2, "300 new objects go into one pack (and its index)"
    on_disk = (
        {str(p) for p in objects.glob("??/*")} | packs | {str(p) for p in (tmp_path / "store" / "large").iterdir()}
    )
    assert on_disk <= set(synced), "every new object file, pack and large file is fsynced"
    folders = {str(objects), str(objects / "pack"), str(tmp_path / "store"), *(str(p) for p in objects.glob("??"))}
    assert folders <= set(synced)


def test_a_sparse_file_costs_what_it_holds_in_the_store_and_after_a_restore(tmp_path: Path) -> None:
    """A 256 MiB sparse file (what `truncate -s 256M` makes) with a little data: stored and restored as
    holes, not as 256 MiB of zeros; the content (and so the snapshot) is the same after the round trip."""
    ws = tmp_path / "ws"
    ws.mkdir()
    big = ws / "big.img"
    with open(big, "wb") as handle:
        handle.truncate(256 * 1024**2)
        handle.seek(100 * 1024**2)
        handle.write(b"data in the middle")
    (ws / "small.txt").write_text("x\n")
    store = SnapshotStore(ws, tmp_path / "store")
    first = store.snapshot()
    [kept] = [p for p in (tmp_path / "store" / "large").iterdir() if not p.name.startswith(".")]
    assert kept.stat().st_size == 256 * 1024**2 and kept.stat().st_blocks * 512 < 4 * 1024**2
    big.unlink()
    (ws / "small.txt").write_text("y\n")
    store.restore(first)
    assert big.stat().st_size == 256 * 1024**2 and big.stat().st_blocks * 512 < 4 * 1024**2
    with open(big, "rb") as handle:
        handle.seek(100 * 1024**2)
        assert handle.read(18) == b"data in the middle"
    assert store.snapshot() == first
    store.close()


def test_caches_and_bytecode_never_reach_a_diff_or_a_patch(tmp_path: Path) -> None:
    """What test runs and tools write on their own (.pytest_cache, __pycache__, .pyc) is snapshotted
    (a rollback restores it) but is never part of a change."""
    ws = tmp_path / "ws"
    (ws / "pkg").mkdir(parents=True)
    (ws / "pkg" / "mod.py").write_text("X = 1\n")
    store = SnapshotStore(ws, tmp_path / "store")
    before = store.snapshot()
    (ws / "pkg" / "mod.py").write_text("X = 2\n")
    (ws / ".pytest_cache" / "v" / "cache").mkdir(parents=True)
    (ws / ".pytest_cache" / "v" / "cache" / "lastfailed").write_text("{}\n")
    (ws / "pkg" / "__pycache__").mkdir()
    (ws / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"\x00pyc")
    (ws / "stray.pyc").write_bytes(b"\x00pyc")
    after = store.snapshot()
    assert [c.path for c in snapdiff.diff(store.objects, before, after).changes] == ["pkg/mod.py"]
    text, left_out = snapdiff.patch(store.objects, before, after)
    assert "pkg/mod.py" in text and "pytest_cache" not in text and ".pyc" not in text and left_out == []
    store.restore(before)
    assert not (ws / ".pytest_cache").exists()  # snapshots hold them: a rollback puts things back exactly
    store.close()
