"""The live panel of `harness batch` at a terminal: counts, running task-runs with their time, cost,
and the time left at the pace so far (a fake clock; the panel rendered by rich as a terminal would)."""

from __future__ import annotations

from rich.console import Console

from harness.batch.records import TaskRunKey, TaskRunRecord
from harness.batch.runner import BatchEvent
from harness.cli.batch_view import BatchProgress


def _key(task: str) -> TaskRunKey:
    return TaskRunKey(task_id=task, model="scripted:x", run_index=0)


def _record(task: str, verified: bool, cost: float) -> TaskRunRecord:
    outcome = "verified" if verified else "failed_verification"
    return TaskRunRecord(key=_key(task), status="done", outcome=outcome, verified=verified, cost_usd=cost)


def _text(progress: BatchProgress) -> str:
    console = Console(width=200, record=True, force_terminal=True, color_system=None)
    console.print(progress.render())
    return console.export_text()


def test_the_panel_counts_times_and_estimates_what_is_left() -> None:
    now = [100.0]
    progress = BatchProgress(workers=2, clock=lambda: now[0])
    progress.observe(BatchEvent(kind="planned", queued=4, done=3))
    progress.observe(BatchEvent(kind="started", key=_key("a")))
    progress.observe(BatchEvent(kind="started", key=_key("b")))
    first = _text(progress)
    assert "0/4 done" in first and "2 running" in first and "after the first finishes" in first
    assert "(3 recorded before)" in first
    now[0] = 130.0
    progress.observe(BatchEvent(kind="finished", key=_key("a"), record=_record("a", True, 0.25)))
    progress.observe(BatchEvent(kind="started", key=_key("c")))
    now[0] = 140.0
    shown = _text(progress)
    assert "1/4 done" in shown and "1 verified" in shown and "0 not verified" in shown and "$0.2500" in shown
    lines = shown.splitlines()
    running = [line for line in lines[1:] if line.strip()]
    assert running[0].split()[-1] == "40s" and running[1].split()[-1] == "10s"  # oldest first, with its time
    # 3 left at 30 s each over 2 slots = 45 s, minus the 40 s the oldest has already run
    assert progress.eta_s() == 5.0 and "~5s left" in shown
    progress.observe(BatchEvent(kind="finished", key=_key("b"), record=_record("b", False, 0.5)))
    progress.observe(BatchEvent(kind="never_started", key=_key("d")))
    last = _text(progress)
    assert "2/4 done" in last and "1 not verified" in last and "1 never started" in last and "$0.7500" in last
