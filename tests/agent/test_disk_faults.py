"""A full disk and a failing one under the state directory, in the real loop: the run ends
`state_error` (exit 74) naming the path and the space left, nothing committed is lost, no good file
is replaced by a partial one, and `resume` continues once there is room."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from harness import assembly
from harness.agent.outcome import RunState
from harness.assembly import Runtime
from harness.config import RunConfig
from harness.providers.scripted import ScriptedProvider, parse_script
from harness.trajectory import read_records, read_state
from sandbox.fake import FakeSandbox
from sandbox.session.session import Session
from tests.faults import failing_fsync, fill, small_filesystem

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "calc"
SCRIPT = """
turns:
  - tool_calls: [{name: read_file, arguments: {path: calc/ops.py}}]
  - tool_calls: [{name: write_file, arguments: {path: notes.txt, content: "%s"}}]
  - tool_calls: [{name: read_file, arguments: {path: notes.txt}}]
  - text: done
"""


def _agent(session: Session, state: RunState):
    config = RunConfig(model="scripted:x", verify="true")
    provider = ScriptedProvider(parse_script(SCRIPT % ("n" * 200_000)))
    return assembly.build_agent(
        config=config,
        session=session,
        sandbox=FakeSandbox(),
        provider=provider,
        state=state,
        runtime=Runtime(run_id="test"),
    )


def _start(sessions: Path) -> tuple[Session, RunState]:
    session = Session.create(EXAMPLE, sessions, spec=RunConfig().spec(), session_id="disk")
    return session, RunState(session_id=session.id, task="t", model="scripted:x", snapshot_step=session.step)


def _no_debris(folder: Path) -> None:
    assert not [p for p in folder.rglob(".*.tmp")], "a failed atomic write leaves no temp file"


def test_a_full_disk_ends_state_error_and_resume_finishes_after_room_is_made(tmp_path):
    with small_filesystem(tmp_path / "small", "6m") as small:
        session, state = _start(small / "sessions")
        filler = fill(small, leave=64 * 1024)  # step 2's 200 kB turn cannot be recorded
        result = _agent(session, state).run()
        assert (result.outcome, result.exit_code) == ("state_error", 74), result.detail
        assert "disk is full" in result.detail and "free of" in result.detail and str(small) in result.detail
        saved = read_state(session.dir, RunState)
        assert saved is not None and not saved.finished and saved.step >= 1, "the last commit point is intact"
        _no_debris(session.dir)
        filler.unlink()
        reopened = Session.open(small / "sessions", "disk")
        resumed = _agent(reopened, saved.model_copy(update={"result": None})).run()
        assert resumed.outcome == "verified", resumed.detail
        turns = [r.step for r in read_records(reopened.dir) if r.kind == "turn"]
        assert turns.count(2) == 1, "the turn the full disk cut off was asked again, and recorded once"


@pytest.mark.parametrize("after", [0, 3, 8])
def test_an_io_error_at_fsync_ends_state_error_at_any_commit_point(tmp_path, after):
    session, state = _start(tmp_path / "sessions")
    with failing_fsync(session.dir, errno.EIO, after=after) as failed:
        result = _agent(session, state).run()
    assert failed, "the fault fired"
    assert (result.outcome, result.exit_code) == ("state_error", 74) and "I/O error" in result.detail
    _no_debris(session.dir)
    saved = read_state(session.dir, RunState) or state  # readable: old or new, never half (none yet at 0)
    assert isinstance(read_records(session.dir), list)  # readable: a torn tail at most
    resumed = _agent(Session.open(tmp_path / "sessions", "disk"), saved.model_copy(update={"result": None})).run()
    assert resumed.outcome == "verified", resumed.detail


@pytest.mark.docker
@pytest.mark.timeout(120)
def test_harness_run_on_a_full_disk_says_so_in_one_line(tmp_path, run_label):
    import subprocess
    import sys

    with small_filesystem(tmp_path / "small", "2m") as small:
        fill(small, leave=4096)
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                "from harness.cli import main; main()",
                "run",
                "--image",
                "py311",
                "--model",
                f"scripted:{EXAMPLE.parent.parent / 'examples' / 'calc-fix.yaml'}",
                str(EXAMPLE),
                "--task",
                "t",
                "--verify",  # given, so stderr holds nothing but the error (no detection header)
                "python3 -m pytest -q",
                "--state-dir",
                str(small / "sessions"),
            ],
            capture_output=True,
            text=True,
            timeout=100,
            env={"PATH": "/usr/bin:/bin", "HARNESS_RUN_ID": run_label},
        )
    assert done.returncode == 74, done.stdout + done.stderr
    assert "disk is full" in done.stderr and "free of" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
