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


def test_at_80_and_100_columns_a_line_breaks_between_phrases_never_inside_one() -> None:
    from harness.cli.batch_view import finished_line

    now = [0.0]
    progress = BatchProgress(workers=8, clock=lambda: now[0])
    progress.observe(BatchEvent(kind="planned", queued=340, done=12))
    for n in range(40):
        progress.observe(BatchEvent(kind="started", key=_key(f"t{n}")))
        now[0] += 61
        progress.observe(BatchEvent(kind="finished", key=_key(f"t{n}"), record=_record(f"t{n}", n % 3 == 0, 0.125)))
    progress.observe(BatchEvent(kind="never_started", key=_key("late")))
    key = TaskRunKey(task_id="boltons-fix-the-iterutils-remap-of-nested-mappings", model="anthropic:claude-sonnet-4-6",
                     run_index=2)  # fmt: skip
    done = BatchEvent(kind="finished", key=key, record=_record("x", True, 0.5), done=41, running=7, queued=292)
    phrases = ["340 done", "14 verified", "26 not verified", "0 running", "elapsed", "left", "12 recorded before",
               "1 never started (budget)", "done 41, running 7, queued 292", "$0.5000"]  # fmt: skip
    for width in (80, 100):
        console = Console(width=width, record=True, force_terminal=True, color_system=None)
        console.print(progress.render())
        console.print(finished_line(done))
        text = console.export_text()
        lines = text.splitlines()
        assert all(len(line) <= width and line == line.rstrip() for line in lines), lines
        assert all(phrase in line for phrase in phrases for line in [next((x for x in lines if phrase in x), "")]), text
        assert lines[-1].startswith("  "), "a finished line's continuation is indented under its key"


def test_a_task_s_name_reaches_the_terminal_with_its_control_characters_spelled_out() -> None:
    from harness.cli.batch_view import finished_line

    key = TaskRunKey(task_id="t\x1b[2Jx", model="scripted:x", run_index=0)
    progress = BatchProgress(workers=1, clock=lambda: 0.0)
    progress.observe(BatchEvent(kind="started", key=key))
    console = Console(width=100, record=True, force_terminal=True, color_system=None)
    console.print(progress.render())
    console.print(finished_line(BatchEvent(kind="finished", key=key, record=_record("t", True, 0.0))))
    text = console.export_text()
    assert "\x1b[2J" not in text and text.count("t\\x1b[2Jx") == 2, text
