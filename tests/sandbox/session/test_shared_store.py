"""One object store per state directory: sessions of one repository share its objects, a removed
session's own objects go at the next collection and nothing another session needs goes with them,
a collection racing a writer loses nothing, an ended session keeps its snapshots and not its
workspace (made again when something needs it), and a fork shares its parent's prefix."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandbox.layout import objects_dir
from sandbox.session.session import Session, SessionConfig
from sandbox.snapshot.objects import DIR, ObjectStore
from sandbox.snapshot.shared import collect
from sandbox.spec import SandboxSpec
from tests.sandbox.snapshot.snapshot_trees import fingerprint

pytestmark = pytest.mark.timeout(300)
REPO_ROOT = Path(__file__).resolve().parents[3]


def _repo(path: Path, files: int = 300) -> Path:
    for n in range(files):
        folder = path / f"pkg{n % 10}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"m{n}.py").write_text(f"VALUE = {n}\n" + "# padding line\n" * (n % 40))
    return path


def _size(folder: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in folder.rglob("*") if p.is_file())


def _objects(state: Path) -> set[str]:
    store = ObjectStore(objects_dir(state) / "git")
    found = {p.parent.name + p.name for p in store.objects.glob("??/*")}
    for idx in store.objects.glob("pack/*.idx"):
        from sandbox.snapshot import packs

        found |= set(packs.read_index(idx))
    return found


def _walk(store: ObjectStore, tree: str) -> int:
    """Read every object of tree (raises when one is missing); how many."""
    count, work = 0, [tree]
    while work:
        for entry in store.tree(work.pop()):
            count += 1
            if entry.mode & 0o170000 == DIR:
                work.append(entry.oid)
            else:
                store.read(entry.oid)
    return count


def test_two_sessions_share_objects_and_removing_one_keeps_the_other_whole(tmp_path: Path) -> None:
    repo, state = _repo(tmp_path / "repo"), tmp_path / "state"
    first = Session.create(repo, state, spec=SandboxSpec(), session_id="a")
    after_one = _size(objects_dir(state))
    second = Session.create(repo, state, spec=SandboxSpec(), session_id="b")
    assert _size(objects_dir(state)) - after_one < 64 * 1024, "the second import added (almost) nothing"
    assert not (second.dir / "store" / "git").exists(), "no store of its own"
    (first.workspace / "only_a.txt").write_text("written by a alone\n")
    first.commit_step("a")
    (second.workspace / "pkg1" / "m1.py").write_text("VALUE = 'b'\n")
    second.commit_step("b")
    only_a = ObjectStore(objects_dir(state) / "git").write(b"blob", b"written by a alone\n")
    before = fingerprint(second.workspace)
    first.delete()
    done = collect(objects_dir(state))
    assert done is not None and done.sessions == 1 and done.removed_objects >= 2 and not done.missing
    assert only_a not in _objects(state), "a's own objects went"
    store = ObjectStore(objects_dir(state) / "git")
    assert all(_walk(store, record.tree) for record in second.records)
    second.rollback(0)
    second.rollback(1)
    assert fingerprint(second.workspace) == before
    second.close()


WRITER = """
import sys
from pathlib import Path
from sandbox.session.session import Session
session = Session.open(Path(sys.argv[1]), "w")
ws, stop, step = session.workspace, Path(sys.argv[2]), 0
while step < 40 or not stop.exists():  # at least 40 steps, and on until the collector has run enough
    step += 1
    (ws / "pkg3" / f"new{step}.py").write_text(f"STEP = {step}\\n" * 20)
    (ws / "pkg4" / "m4.py").write_text(f"# rewritten {step}\\n")
    if step % 5 == 0:
        tree = session.tree_now()
        (ws / "scratch.txt").write_text(f"scratch {step}\\n")
        session.restore_tree(tree)
    session.commit_step(f"step {step}")
    print(step, flush=True)
session.close()
"""


def test_a_collection_racing_a_writer_loses_nothing(tmp_path: Path) -> None:
    repo, state = _repo(tmp_path / "repo"), tmp_path / "state"
    Session.create(repo, state, spec=SandboxSpec(), session_id="w").close()
    for n in range(3):  # sessions removed while the writer runs: the collector has work each time
        doomed = Session.create(repo, state, spec=SandboxSpec(), session_id=f"d{n}")
        (doomed.workspace / "doomed.txt").write_text(f"{n}\n" * 1000)
        doomed.commit_step("doomed")
        doomed.close()
    stop = tmp_path / "stop"
    child = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(state), str(stop)], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True
    )
    runs = 0
    while child.poll() is None:
        if runs < 3:
            Session.open(state, f"d{runs}").delete()
        assert collect(objects_dir(state), wait_s=60) is not None
        runs += 1
        if runs >= 3:  # every collection so far raced the writer (it was still running): it may end now
            stop.touch()
        time.sleep(0.01)
    assert child.returncode == 0 and runs >= 3
    assert child.stdout is not None and int(child.stdout.read().split()[-1]) >= 40
    done = collect(objects_dir(state))
    assert done is not None and not done.missing and done.sessions == 1
    session = Session.open(state, "w")
    store = ObjectStore(objects_dir(state) / "git")
    assert all(_walk(store, record.tree) for record in session.records), "every step is whole"
    session.rollback(7)
    assert (session.workspace / "pkg3" / "new7.py").read_text() == "STEP = 7\n" * 20
    assert not (session.workspace / "pkg3" / "new8.py").exists()
    session.close()


def test_an_ended_session_keeps_its_snapshots_not_its_workspace(tmp_path: Path) -> None:
    repo, state = _repo(tmp_path / "repo"), tmp_path / "state"
    session = Session.create(repo, state, spec=SandboxSpec(), session_id="e")
    (session.workspace / "pkg2" / "m2.py").write_text("VALUE = 'changed'\n")
    session.commit_step("one")
    after_one = fingerprint(session.workspace)
    (session.workspace / "added.txt").write_text("added\n")
    session.commit_step("two")
    final = fingerprint(session.workspace)
    (session.workspace / "uncommitted.txt").write_text("no step holds me\n")
    assert not session.retire(), "uncommitted changes keep the workspace"
    (session.workspace / "uncommitted.txt").unlink()
    assert session.retire()
    assert not (session.dir / "workspace").exists() and session.retired
    assert not (session.dir / "store" / "index.pickle").exists()
    reopened = Session.open(state, "e")
    assert "VALUE = 'changed'" in reopened.diff().text and "+added" in reopened.export_patch()
    assert reopened.read_file(reopened.last_tree, "added.txt") == b"added\n"
    assert not (session.dir / "workspace").exists(), "reading the store made no workspace"
    assert fingerprint(reopened.workspace) == final, "made again from the last step when needed"
    reopened.rollback(1)
    assert fingerprint(reopened.workspace) == after_one
    reopened.close()


def test_a_fork_shares_its_parents_prefix_and_goes_its_own_way(tmp_path: Path) -> None:
    repo, state = _repo(tmp_path / "repo"), tmp_path / "state"
    parent = Session.create(repo, state, spec=SandboxSpec(), session_id="p")
    prints = [fingerprint(parent.workspace)]
    for n in range(1, 4):
        (parent.workspace / f"step{n}.txt").write_text(f"{n}\n")
        parent.commit_step(f"step {n}")
        prints.append(fingerprint(parent.workspace))
    assert parent.retire()
    size = _size(objects_dir(state) / "git")
    fork = Session.fork(parent, 2, tmp_path / "forks", "f1")
    assert _size(objects_dir(state) / "git") == size and not (fork.dir / "workspace").exists(), "nothing copied"
    assert [r.tree for r in fork.records] == [r.tree for r in parent.records[:3]]
    assert fork.info.parent is not None and (fork.info.parent.session, fork.info.parent.step) == ("p", 2)
    assert fingerprint(fork.workspace) == prints[2]
    (fork.workspace / "fork.txt").write_text("the fork's own\n")
    fork.commit_step("fork")
    assert fork.step == 3
    grandchild = Session.fork(fork, 3, tmp_path / "forks", "f2")
    assert (grandchild.workspace / "fork.txt").read_text() == "the fork's own\n"
    assert not (grandchild.workspace / "step3.txt").exists()
    parent.delete()
    done = collect(objects_dir(state))
    assert done is not None and done.sessions == 2 and not done.missing, "forks keep what they share"
    assert "+the fork's own" in grandchild.export_patch() and "+2" in grandchild.export_patch()
    with pytest.raises(FileExistsError):
        Session.fork(fork, 1, tmp_path / "forks", "f2")
    for session in (fork, grandchild):
        session.close()


def test_a_session_made_before_stores_were_shared_still_opens(tmp_path: Path) -> None:
    """An older session folder (its own `store/git`, no `objects` in session.json) keeps working."""
    import json

    repo, state = _repo(tmp_path / "repo", files=20), tmp_path / "state"
    session = Session.create(repo, state, spec=SandboxSpec(), session_id="old", config=SessionConfig())
    session.close()
    old = tmp_path / "old-state" / "old"
    old.parent.mkdir()
    subprocess.run(["cp", "-a", str(session.dir), str(old)], check=True)
    (old / "store").mkdir(exist_ok=True)
    subprocess.run(["cp", "-a", str(objects_dir(state) / "git"), str(old / "store" / "git")], check=True)
    info = json.loads((old / "session.json").read_text())
    info.pop("objects")
    (old / "session.json").write_text(json.dumps(info))
    reopened = Session.open(old.parent, "old")
    assert reopened.shared is None and reopened.diff().text == ""
    (reopened.workspace / "x.txt").write_text("x\n")
    assert reopened.commit_step("x").step == 1 and (old / "store" / "git" / "objects").is_dir()
    assert not reopened.retire(), "its workspace stays: it has no shared store to be made again from"
    reopened.close()


COLLECTOR = """
import sys
from pathlib import Path
from sandbox.snapshot.shared import collect
print("collecting", flush=True)
collect(Path(sys.argv[1]))
print("done", flush=True)
"""


def test_a_collection_killed_midway_loses_nothing(tmp_path: Path) -> None:
    import signal

    repo, state = _repo(tmp_path / "repo", files=600), tmp_path / "state"
    kept = Session.create(repo, state, spec=SandboxSpec(), session_id="kept")
    doomed = Session.create(repo, state, spec=SandboxSpec(), session_id="doomed")
    for step in range(25):  # loose objects of its own, many of them
        for n in range(40):
            (doomed.workspace / f"pkg{n % 10}" / f"doomed{n}.txt").write_text(f"{step} {n}\n" * 30)
        doomed.commit_step(f"doomed {step}")
    (kept.workspace / "kept.txt").write_text("kept\n")
    kept.commit_step("kept")
    before = fingerprint(kept.workspace)
    doomed.delete()
    for delay in (0.02, 0.05, 0.1):
        child = subprocess.Popen(
            [sys.executable, "-c", COLLECTOR, str(objects_dir(state))], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True
        )
        assert child.stdout is not None and child.stdout.readline().strip() == "collecting"
        time.sleep(delay)
        child.send_signal(signal.SIGKILL)
        child.wait()
        store = ObjectStore(objects_dir(state) / "git")
        assert all(_walk(store, record.tree) for record in kept.records), "every step whole after the kill"
    done = collect(objects_dir(state))
    assert done is not None and not done.missing and done.sessions == 1
    kept.rollback(0)
    kept.rollback(1)
    assert fingerprint(kept.workspace) == before
    kept.close()
