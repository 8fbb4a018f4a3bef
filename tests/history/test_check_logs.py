"""What `harness tasks check` leaves of its scratch sessions: the setup logs its verdicts name, and
nothing else; the folder goes when no verdict names one."""

from __future__ import annotations

from harness.history.check import _keep_logs


def test_the_named_logs_stay_and_the_sessions_go(tmp_path):
    scratch = tmp_path / "harness-check-x"
    (scratch / "t1-start" / "workspace").mkdir(parents=True)
    (scratch / "t1-start.setup.log").write_text("pip said why\n")
    (scratch / ".era" / "t2-reference").mkdir(parents=True)
    (scratch / ".era" / "t2-reference.setup.log").write_text("npm said why\n")
    (scratch / ".objects").mkdir()
    _keep_logs(scratch)
    kept = sorted(str(p.relative_to(scratch)) for p in scratch.rglob("*"))
    assert kept == [".era", ".era/t2-reference.setup.log", "t1-start.setup.log"]


def test_a_check_with_no_log_leaves_nothing(tmp_path):
    scratch = tmp_path / "harness-check-y"
    (scratch / "t1-start").mkdir(parents=True)
    _keep_logs(scratch)
    assert not scratch.exists()
