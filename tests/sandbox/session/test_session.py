"""Sessions: steps, rollback, diff, export to the original repository, crash safety."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandbox.errors import SessionNotFound, SnapshotError, StepOutOfRange
from sandbox.session.session import Session, SessionConfig, list_sessions
from sandbox.spec import SandboxSpec
from tests.sandbox.snapshot.snapshot_trees import fingerprint, make_repo
from tests.sandbox.snapshot.test_snapshot import _edits

pytestmark = pytest.mark.timeout(120)
REPO_ROOT = Path(__file__).resolve().parents[3]


def test_round_trip_rollback_and_export_applies_to_original(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    original = fingerprint(repo)
    session = Session.create(repo, tmp_path / "state", spec=SandboxSpec(), session_id="s1")
    assert session.step == 0 and session.image == "py311"
    prints = [fingerprint(session.workspace)]
    for number, edit in enumerate(_edits(session.workspace), start=1):
        edit()
        record = session.commit_step(f"edit {number}", committed_image=f"img-{number}" if number % 3 == 0 else None)
        assert record.step == number
        prints.append(fingerprint(session.workspace))
    assert session.image == "img-9"
    final = session.step
    for target in [2, 0, final, 5]:
        record = session.rollback(target)
        assert fingerprint(session.workspace) == prints[target]
        assert record.image == session.records[target].image == session.image
        assert record.rolled_back_to == target
    session.rollback(final)
    assert fingerprint(repo) == original, "the original repository is never written"

    patch = session.export_patch()
    assert "# harness: not in this patch" in patch and "vendor/inner/.git/HEAD" in patch
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(repo), str(copy)], check=True)
    done = subprocess.run(
        ["git", "apply", "--whitespace=nowarn", "-"], cwd=copy, input=patch.encode(), capture_output=True
    )
    assert done.returncode == 0, done.stderr
    want = fingerprint(session.workspace, skip_git=True, skip_empty_dirs=True, exec_only=True)
    assert fingerprint(copy, skip_git=True, skip_empty_dirs=True, exec_only=True) == want
    session.close()


def test_open_list_errors_and_failed_rollback_leaves_session_as_it_was(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    state = tmp_path / "state"
    with Session.create(repo, state, spec=SandboxSpec(), session_id="keep") as session:
        (session.workspace / "a.txt").write_text("a\n")
        session.commit_step("a")
        (session.workspace / "a.txt").write_text("b\n")
        session.commit_step("b")
    assert [info.id for info in list_sessions(state)] == ["keep"]
    with pytest.raises(SessionNotFound):
        Session.open(state, "nope")
    session = Session.open(state, "keep")
    assert session.step == 2
    with pytest.raises(StepOutOfRange):
        session.rollback(7)
    with pytest.raises(StepOutOfRange):
        session.diff(0, 3)
    tree = session.records[1].tree
    victim = next(
        p
        for p in (state / ".objects" / "git" / "objects").rglob("*")
        if p.is_file() and p.parent.name + p.name != tree and _is_blob_of(p, b"a\n")
    )
    victim.unlink()
    before = fingerprint(session.workspace)
    with pytest.raises(SnapshotError):
        session.rollback(1)
    assert session.step == 2 and fingerprint(session.workspace) == before
    assert Session.open(state, "keep").step == 2
    diff = session.diff(0, 2)
    assert "+b" in diff.text


def _is_blob_of(path: Path, content: bytes) -> bool:
    import zlib

    return zlib.decompress(path.read_bytes()) == b"blob %d\0" % len(content) + content


CHILD = """
import sys, time
from pathlib import Path
from sandbox.session.session import Session
session = Session.open(Path(sys.argv[1]), "crash")
ws = session.workspace
for step in range(1, 1000):
    for i in range(400):
        (ws / "many" / f"f{i}.txt").write_text(f"{step} {i}\\n" * 50)
    print("snapshot", step, flush=True)
    session.commit_step(f"step {step}")
"""


def test_killed_mid_snapshot_opens_at_last_complete_step(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "many").mkdir(parents=True)
    state = tmp_path / "state"
    Session.create(
        repo,
        state,
        spec=SandboxSpec(),
        session_id="crash",
        config=SessionConfig.model_validate({"snapshot": {"watch": False}}),
    ).close()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(state)], stdout=subprocess.PIPE, text=True, cwd=REPO_ROOT
    )
    seen = 0
    while seen < 3:
        line = child.stdout.readline()
        assert line, "child died early"
        seen = int(line.split()[1])
    time.sleep(0.05)  # inside the snapshot of step `seen` (400 files to hash and write)
    child.send_signal(signal.SIGKILL)
    child.wait()
    session = Session.open(state, "crash")
    assert session.step in (seen - 1, seen)
    with open(session.dir / "steps.jsonl", "ab") as handle:
        handle.write(b'{"step": 99, "tree": "torn')  # a torn append must be ignored too
    session = Session.open(state, "crash")
    last = session.step
    (session.workspace / "after.txt").write_text("after crash\n")
    assert session.commit_step("after crash").step == last + 1
    session.rollback(1)
    assert (session.workspace / "many" / "f7.txt").read_text() == "1 7\n" * 50
    assert not (session.workspace / "after.txt").exists()
    assert Session.open(state, "crash").step == last + 2


def test_unfinished_create_is_a_leftover_not_a_session(tmp_path: Path) -> None:
    from sandbox.docker.prune import UNFINISHED_AFTER_S, find_session_leftovers, remove_leftovers

    state = tmp_path / "state"
    (state / "half" / "workspace").mkdir(parents=True)
    old = time.time() - UNFINISHED_AFTER_S - 10
    os.utime(state / "half", (old, old))
    (state / "fresh" / "workspace").mkdir(parents=True)
    assert list_sessions(state) == []
    with pytest.raises(SessionNotFound):
        Session.open(state, "half")
    found = find_session_leftovers(None, state)
    assert found.folders == [state / "half"], "a create still in progress is left alone"
    assert (
        remove_leftovers(None, found) == [str(state / "half")]
        and not (state / "half").exists()
        and (state / "fresh").exists()
    )


def test_ready_hook_sees_the_copied_workspace_and_the_call_spec_before_step_0(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_repo(repo)
    seen = []

    def ready(workspace: Path, spec: SandboxSpec) -> None:
        seen.append((sorted(p.name for p in workspace.iterdir()), spec, (workspace.parent / "session.json").exists()))

    config = SessionConfig(writable_root=True)
    session = Session.create(repo, tmp_path / "state", spec=SandboxSpec(image="py311"), config=config, ready=ready)
    [(names, spec, recorded)] = seen
    assert names == sorted(p.name for p in repo.iterdir()) and not recorded
    assert spec == session.spec and spec.labels["harness.session"] == session.id and not spec.read_only_root
