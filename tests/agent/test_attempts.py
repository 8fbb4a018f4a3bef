"""`harness run --attempts K`: K attempts at the example from one start, at once, under one budget;
`first` keeps the first verified and stops the rest, `best` keeps the smaller verified change; the
chosen change is the run's (show, diff, export); a share nothing is left for is refused; kill -9
then `harness resume` finishes the attempts not done. Real containers, the CLI as a subprocess."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.agent.conftest import ADD_FIX, ROOT, run_args, turn

pytestmark = pytest.mark.docker

EXAMPLE_SCRIPT = ROOT / "examples" / "attempts-fix.yaml"


def attempts_of(harness, session: str) -> dict[str, Any]:
    return json.loads((harness.session_dir(session) / "attempts.json").read_text())


def kinds(session_dir: Path) -> list[str]:
    """The kinds of a session's trajectory records so far (a torn last line left out)."""
    path = session_dir / "trajectory.jsonl"
    found = []
    for line in path.read_text().splitlines() if path.is_file() else []:
        try:
            found.append(json.loads(line)["kind"])
        except ValueError:
            pass
    return found


def outcomes(record: dict[str, Any]) -> dict[str, str]:
    return {a["name"]: a["outcome"] for a in record["attempts"]}


def test_first_keeps_the_first_verified_attempt_and_stops_the_others(harness) -> None:
    ran = harness.run(f"scripted:{EXAMPLE_SCRIPT}", "--attempts", "4", "--select", "first")
    assert ran.code == 0, ran.stderr
    result = ran.json()
    parent = result["session_id"]
    record = attempts_of(harness, parent)
    assert record["chosen"] == "a4" and record["why"] == "a4 verified first", record
    found = outcomes(record)
    assert found["a4"] == "verified" and found["a2"] == "interrupted", "a2 thinks longer: a4 verified first"
    assert {found["a1"], found["a3"]} <= {"stuck", "interrupted"}, "each ended unverified, or was stopped if still on"
    for attempt in record["attempts"]:
        if attempt["outcome"] == "interrupted":
            assert attempt["detail"] == "stopped: a4 verified first", attempt
    assert result["outcome"] == "verified" and result["detail"].startswith("a4 verified first")
    assert "total += b" in harness.final(parent, "calc/ops.py"), "the chosen change is the run's"
    assert "total += b" in Path(result["patch"]).read_text()
    for attempt in record["attempts"]:  # each attempt an ordinary session
        assert harness.session_dir(attempt["session_id"]).is_dir()
    shown = harness("show", parent)
    assert shown.code == 0, shown.stderr
    assert "a4 ✓ chosen" in shown.stdout and "chosen: a4 verified first (select first)" in shown.stdout
    exported = harness("export", parent)
    assert exported.code == 0 and "total += b" in exported.stdout, exported.stderr


def test_best_ranks_every_attempt_and_keeps_the_smaller_verified_change(harness) -> None:
    ran = harness.run(f"scripted:{EXAMPLE_SCRIPT}", "--attempts", "4", "--select", "best")
    assert ran.code == 0, ran.stderr
    parent = ran.json()["session_id"]
    record = attempts_of(harness, parent)
    assert outcomes(record) == {"a1": "stuck", "a2": "verified", "a3": "stuck", "a4": "verified"}
    assert record["chosen"] == "a2", record
    assert record["why"] == "a2 verified with the smallest change (2 line(s) in 1 file(s); the other verified: a4 9)"
    failing = {a["name"]: a["failing"] for a in record["attempts"]}
    assert failing["a1"] > failing["a3"], "a1's wrong fix broke one more test than doing nothing"
    final = harness.final(parent, "calc/ops.py")
    assert "return a + b" in final and "total += b" not in final
    diff = harness("diff", parent)
    assert diff.code == 0 and "+    return a + b" in diff.stdout, diff.stderr
    a2 = next(a for a in record["attempts"] if a["name"] == "a2")["session_id"]
    shown = harness("show", a2, env={"COLUMNS": "200"}).stdout
    steps = {block.split()[0]: block for block in ("\n" + shown).split("\nstep ")[1:]}
    assert "files changed" not in steps["2"], "a grep changes nothing: " + steps["2"]
    assert "files changed: the state after step 4 is kept" in steps["4"], "the fix does: " + steps["4"]


def test_an_attempt_finds_nothing_left_of_the_budget_and_is_refused(harness, tmp_path) -> None:
    """Four steps for five attempts: a1-a4 get one each, a5 none (refused, never started); no attempt
    verifies, so the closest is chosen and the run says so."""
    script = tmp_path / "one-step.yaml"
    script.write_text(yaml.safe_dump({"turns": [turn("", ("run_tests", {}))]}))
    ran = harness.run(f"scripted:{script}", "--attempts", "5", "--select", "best", "--max-steps", "4")
    assert ran.code == 13, (ran.code, ran.stderr)
    result = ran.json()
    record = attempts_of(harness, result["session_id"])
    found = outcomes(record)
    assert found["a5"] == "refused" and all(found[f"a{n}"] == "limit:steps" for n in range(1, 5)), found
    refused = record["attempts"][4]
    assert refused["detail"] == "nothing was left of the run's budget to give it"
    assert not harness.session_dir(refused["session_id"]).exists(), "a refused attempt makes no session"
    assert record["why"].startswith("no attempt verified; a1 came closest"), record["why"]
    assert result["steps"] == 4, "the run's steps are its attempts' together"
    again = harness("resume", result["session_id"])
    assert again.code == 64 and "ran as attempts and ended as limit:steps with a1 chosen" in again.stderr, again


def test_kill_9_then_resume_finishes_the_attempts_not_done(harness, tmp_path) -> None:
    script = tmp_path / "slow.yaml"
    script.write_text(
        yaml.safe_dump(
            {
                "turns": [turn("nothing to do")],
                "attempts": [
                    {"turns": [turn("", ("run_tests", {})), {**turn("", ("apply_patch", ADD_FIX)), "delay_s": 6}, turn("fixed")]},
                    {"turns": [turn("I give up.")]},
                ],
            }
        )
    )  # fmt: skip
    process = harness.start(*run_args(f"scripted:{script}", "--attempts", "2", "--select", "best"))
    parent = ""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # a2 ended, a1 thinking over its fix: kill -9 now
        found = list(harness.state_dir.glob("*/attempts.json")) if harness.state_dir.is_dir() else []
        if found:
            parent = found[0].parent.name
            record = json.loads(found[0].read_text())
            if outcomes(record)["a2"] and "tool" in kinds(harness.session_dir(f"{parent}-a1")):
                break
        time.sleep(0.2)
    else:
        process.kill()
        pytest.fail("the attempts never reached the point to kill them at")
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert outcomes(attempts_of(harness, parent)) == {"a1": "", "a2": "stuck"}
    a2_trajectory = (harness.session_dir(f"{parent}-a2") / "trajectory.jsonl").read_text()
    resumed = harness("resume", parent, "--json")
    assert resumed.code == 0, resumed.stderr
    result = resumed.json()
    assert result["outcome"] == "verified" and result["session_id"] == parent
    record = attempts_of(harness, parent)
    assert record["chosen"] == "a1" and outcomes(record) == {"a1": "verified", "a2": "stuck"}
    assert (harness.session_dir(f"{parent}-a2") / "trajectory.jsonl").read_text() == a2_trajectory, "a2 ended: left be"
    assert "return a + b" in harness.final(parent, "calc/ops.py")
    events = [json.loads(line) for line in (harness.session_dir(parent) / "trajectory.jsonl").read_text().splitlines()]
    said = [e["detail"] for e in events if e.get("event") == "attempts"]
    assert said[-1].endswith("continuing those not ended"), said


def test_a_tasks_files_attempts_run_in_a_batch_reported_and_shown_side_by_side(harness, tmp_path) -> None:
    """`attempts: 4` and `select: best` in a tasks file: the task-run is the chosen attempt's (its
    turns and first tool in the record), the report counts one task-run, and the session's page
    shows the four attempts with the chosen one and why."""
    from tests.agent.conftest import EXAMPLE

    tasks = tmp_path / "tasks.yaml"
    tasks.write_text(
        yaml.safe_dump(
            {
                "defaults": {"image": "py311", "verify": "python3 -m pytest -q", "model": [f"scripted:{EXAMPLE_SCRIPT}"]},
                "tasks": [{"id": "calc", "repo": str(EXAMPLE), "task": "Fix the failing tests", "attempts": 4, "select": "best"}],
            }
        )
    )  # fmt: skip
    night = tmp_path / "night"
    ran = harness("batch", str(tasks), "--out", str(night), "--workers", "1", "--json")
    assert ran.code == 0, ran.stderr
    records = [json.loads(p.read_text()) for p in (night / "runs").rglob("*.json")]
    assert len(records) == 1, "one task-run, whatever its attempts"
    record = records[0]
    assert record["verified"] and record["first_tool"] == "run_tests" and record["turns"] == 6, record
    assert "+    return a + b" in record["patch"] and "total += b" not in record["patch"]
    session = Path(record["session_dir"])
    assert json.loads((session / "attempts.json").read_text())["chosen"] == "a2"
    report = harness("report", str(night), "--format", "json")
    assert report.code == 0, report.stderr
    overall = json.loads(report.stdout)[0]["overall"]
    assert (overall["task_runs"], overall["completed"], overall["pass_at_1"]) == (1, 1, 1.0)
    page = harness("view", str(session), "--no-open")
    assert page.code == 0, page.stderr
    html = (session / "view.html").read_text()
    assert '<section id="attempts"><h2>Attempts (4)</h2>' in html
    assert "chosen: a2 verified with the smallest change" in html and 'a2 <span class="badge ok">chosen</span>' in html
