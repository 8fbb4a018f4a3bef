"""`harness batch` on a real Dask cluster on 127.0.0.1 and the real engine: scripted tasks that verify,
fail, or are blocked by the gate; the same command again does nothing; a spent global budget stops scheduling and
says so in the records; no container is left."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.batch.adaptive import read_log
from harness.batch.records import BatchDir
from tests.cli_process import run_cli
from tests.telemetry.receiver import Receiver

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "calc"
FIX = ROOT / "examples" / "calc-fix.yaml"
pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(600)]


def _tasks(tmp_path: Path, count: int, hooks: dict | None = None) -> Path:
    tasks = []
    for n in range(count):
        kind = ("verified", "failing", "blocked")[n % 3]
        task = {
            "id": f"t{n}-{kind}",
            "repo": str(EXAMPLE),
            "task": "Fix the failing tests in calc.",
            "tags": {"category": kind},
        }
        if kind == "failing":
            task["verify"] = "false"
            task["limits"] = {"max_steps": 8}
        if kind == "blocked":  # the fix is refused by the gate: the tests stay red
            task["read_only"] = ["tests/", "calc/"]
        tasks.append(task)
    path = tmp_path / "tasks.yaml"
    defaults = {"verify": "python3 -m pytest -q", "model": [f"scripted:{FIX}"], **({"hooks": hooks} if hooks else {})}
    path.write_text(yaml.safe_dump({"defaults": defaults, "tasks": tasks}))
    return path


def _batch(*args: str, label: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HARNESS_RUN_ID": label}
    return run_cli(["batch", *args, "--json"], timeout=500, env=env, cwd=ROOT)


def _result(done: subprocess.CompletedProcess[str]) -> dict:
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_batch_runs_every_task_once_and_again_does_nothing(tmp_path, run_label, docker_client):
    ended = tmp_path / "ended.log"  # the tasks file's own hook, run by the workers for every task-run
    tasks = _tasks(tmp_path, 6, {"SessionEnd": [{"command": f'echo "$HARNESS_SESSION_ID $(cat)" >> {ended}'}]})
    out = tmp_path / "out"
    with Receiver() as receiver:  # the batch's spans, from the client and from both workers
        first = _batch(
            str(tasks), "--out", str(out), "--workers", "2", "--otel-endpoint", receiver.url, label=run_label
        )
        spans = receiver.spans()
    assert first.returncode == 0, first.stdout + first.stderr
    _check_trace(spans, BatchDir(out).records())
    summary = _result(first)
    assert (summary["planned"], summary["ran"], summary["skipped"]) == (6, 6, 0)
    records = {r.key.task_id: r for r in BatchDir(out).records()}
    assert len(records) == 6 and all(r.status == "done" for r in records.values())
    lines = dict(line.split(" ", 1) for line in ended.read_text().splitlines())
    assert set(lines) == {r.session_id for r in records.values()}
    assert all(json.loads(lines[r.session_id])["reason"] == r.outcome for r in records.values())
    assert {r.outcome for k, r in records.items() if "verified" in k} == {"verified"}
    assert {r.outcome for k, r in records.items() if "failing" in k} <= {"failed_verification", "stuck"}
    assert {r.outcome for k, r in records.items() if "blocked" in k} <= {"failed_verification", "stuck"}
    verified = records["t0-verified"]
    assert (
        verified.turns >= 3
        and verified.first_tool == "run_tests"
        and verified.patch
        and "+    return a + b" in verified.patch
    )
    assert Path(verified.session_dir, "trajectory.jsonl").is_file()
    assert verified.obstacle.startswith("telling whether mean()")  # the final reply's line, via the loop
    assert "| completion rate | " in (out / "report.md").read_text() and (out / "report.json").is_file()
    report_html = (out / "report.html").read_text(encoding="utf-8")
    assert "telling whether mean()" in report_html and f"pages/{verified.session_id}.html" in report_html
    assert (out / "pages" / f"{verified.session_id}.html").is_file()
    again = _batch(str(tasks), "--out", str(out), "--workers", "2", label=run_label)
    assert again.returncode == 0 and (_result(again)["ran"], _result(again)["skipped"]) == (0, 6)
    mine = docker_client.containers.list(all=True, filters={"label": f"harness.run={run_label}"}, ignore_removed=True)
    assert [c for c in mine if c.labels.get("harness.kind") != "bench"] == []


def _check_trace(spans: list, records: list) -> None:
    """One trace: the batch span (the client's) is the parent of a task-run span per task-run (made by
    the worker processes, the context carried with each task), each the parent of its run's span,
    itself the parent of the model, tool and verify spans."""
    batches = [s for s in spans if s["name"] == "harness.batch"]
    assert len(batches) == 1 and batches[0]["parent_id"] == ""
    batch = batches[0]
    assert batch["attributes"]["harness.batch.planned"] == 6 and batch["attributes"]["harness.batch.ran"] == 6
    assert {s["trace_id"] for s in spans} == {batch["trace_id"]}
    task_runs = {s["attributes"]["harness.session.id"]: s for s in spans if s["name"] == "harness.task_run"}
    assert set(task_runs) == {r.session_id for r in records}
    assert all(s["parent_id"] == batch["span_id"] for s in task_runs.values())
    workers = {s["resource"]["service.instance.id"] for s in task_runs.values()}
    assert len(workers) == 2 and batch["resource"]["service.instance.id"] not in workers, "two workers and the client"
    for record in records:
        task_run = task_runs[record.session_id]
        assert task_run["attributes"]["harness.outcome"] == record.outcome
        runs = [s for s in spans if s["name"] == "invoke_agent harness" and s["parent_id"] == task_run["span_id"]]
        assert len(runs) == 1 and runs[0]["attributes"]["harness.outcome"] == record.outcome
        inner = [s for s in spans if s["parent_id"] == runs[0]["span_id"]]
        assert sum(s["name"].startswith("chat ") for s in inner) == record.steps
        assert any(s["name"].startswith("execute_tool ") for s in inner) and any(s["name"] == "verify" for s in inner)


def test_a_spent_budget_stops_scheduling_and_the_records_say_so(tmp_path, run_label):
    tasks = _tasks(tmp_path, 6)
    out = tmp_path / "out"
    capped = _batch(str(tasks), "--out", str(out), "--workers", "1", "--max-hours", "0.0003", label=run_label)
    assert capped.returncode == 0, capped.stdout + capped.stderr
    summary = _result(capped)
    assert summary["never_started"] >= 1 and summary["ran"] + summary["never_started"] == 6
    never = [r for r in BatchDir(out).records() if r.status == "never_started"]
    assert never and all("wall clock" in r.detail for r in never)
    rest = _batch(str(tasks), "--out", str(out), "--workers", "auto", label=run_label)
    assert _result(rest)["ran"] == summary["never_started"], "the never-started ones run on the next invocation"
    # --workers auto: its limit over time is in the batch, and in the report of it
    changes = read_log(out)
    assert changes[0].why.startswith("start at ") and changes[-1].why == "the batch ended"
    assert all(1 <= c.limit <= int(changes[0].why.split()[-1]) for c in changes)
    assert "### Concurrency (`--workers auto`)" in (out / "report.md").read_text()
    assert "Task-runs allowed at once" in (out / "report.html").read_text(encoding="utf-8")
    ran = [r for r in BatchDir(out).records() if r.status == "done"]
    assert ran and all(r.call_overhead_ms is not None and r.call_overhead_ms >= 0 for r in ran)
    assert all(r.rate_limited == 0 for r in ran)


def test_workers_is_a_number_or_auto(tmp_path, run_label):
    tasks = _tasks(tmp_path, 1)
    for value, said in (("lots", "not 'lots'"), ("0", "not 0"), ("257", "not 257")):
        done = _batch(str(tasks), "--out", str(tmp_path / "out"), "--workers", value, label=run_label)
        assert done.returncode == 64 and f"--workers must be a number from 1 to 256 or auto, {said}" in done.stderr
        assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists(), "nothing started, nothing written"


def test_a_broken_tasks_file_fails_with_the_line_and_starts_nothing(tmp_path, run_label):
    path = tmp_path / "tasks.yaml"
    path.write_text(f"tasks:\n  - {{id: a, repo: {EXAMPLE}, task: x}}\n  - {{id: a, repo: {EXAMPLE}, task: y}}\n")
    done = _batch(str(path), "--out", str(tmp_path / "out"), label=run_label)
    assert done.returncode == 78 and f"{path}:3: id:" in done.stderr and not (tmp_path / "out").exists()


def test_the_first_ctrl_c_stops_scheduling_and_the_rerun_finishes_each_task_once(tmp_path, run_label):
    import signal
    import time

    tasks = _tasks(tmp_path, 5)
    out = tmp_path / "out"
    env = {**os.environ, "HARNESS_RUN_ID": run_label}
    batch = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from harness.cli import main; main()",
            "batch",
            str(tasks),
            "--out",
            str(out),
            "--workers",
            "1",
            "--json",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not list((out / "runs").glob("*/*/*.json")):
        time.sleep(0.2)
    batch.send_signal(signal.SIGINT)
    stdout, stderr = batch.communicate(timeout=300)
    assert batch.returncode == 0 and "stopping" in stderr, stdout + stderr
    first = json.loads(stdout.strip().splitlines()[-1])
    assert 1 <= first["ran"] < 5 and first["never_started"] == 0
    rest = _batch(str(tasks), "--out", str(out), "--workers", "2", label=run_label)
    assert _result(rest)["ran"] == 5 - first["ran"] and _result(rest)["skipped"] == first["ran"]
    assert sorted(r.key.task_id for r in BatchDir(out).records()) == sorted(
        f"t{n}-{k}" for n, k in enumerate(["verified", "failing", "blocked", "verified", "failing"])
    )


def test_a_batch_client_killed_with_sigkill_leaves_nothing_running_and_the_rerun_finishes(
    tmp_path, run_label, docker_client
):
    """kill -9 of `harness batch` mid-batch (no clean-up of any kind runs): its worker processes go
    with it, and the same command again finishes every task-run exactly once, resuming the sessions
    that were cut, and leaves no container behind."""
    import signal
    import time

    import psutil

    tasks = _tasks(tmp_path, 6)
    out = tmp_path / "out"
    env = {**os.environ, "HARNESS_RUN_ID": run_label}
    batch = subprocess.Popen(
        [sys.executable, "-c", "from harness.cli import main; main()", "batch", str(tasks), "--out", str(out),
         "--workers", "2", "--json"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not list((out / "runs").glob("*/*/*.json")):
        time.sleep(0.2)
    workers = psutil.Process(batch.pid).children(recursive=True)
    assert workers, "the local cluster's worker processes"
    batch.send_signal(signal.SIGKILL)
    batch.wait(timeout=30)
    _, alive = psutil.wait_procs(workers, timeout=60)
    assert alive == [], f"worker processes outlived the killed client: {alive}"
    done_before = len(BatchDir(out).records())
    assert 1 <= done_before < 6

    rest = _batch(str(tasks), "--out", str(out), "--workers", "2", label=run_label)
    assert rest.returncode == 0, rest.stderr
    assert _result(rest)["ran"] == 6 - done_before and _result(rest)["skipped"] == done_before
    records = BatchDir(out).records()
    assert sorted(r.key.task_id for r in records) == sorted(
        f"t{n}-{k}" for n, k in enumerate(["verified", "failing", "blocked"] * 2)
    )
    assert {r.key.task_id: r.outcome for r in records if "verified" in r.key.task_id} == {
        "t0-verified": "verified",
        "t3-verified": "verified",
    }
    left = docker_client.containers.list(all=True, filters={"label": f"harness.run={run_label}"}, ignore_removed=True)
    assert left == [], [c.labels for c in left]


@pytest.mark.parametrize("columns", ["80", "120"])
def test_at_a_terminal_the_batch_shows_a_live_panel(tmp_path, run_label, columns):
    """Under a pseudo-terminal of 80 and 120 columns: the panel (counts, cost, time left) is drawn while
    the batch runs, and each finished task-run still gets its line, broken between phrases, never
    inside one."""
    import pty
    import select

    tasks = _tasks(tmp_path, 2)
    main, child = pty.openpty()
    env = {**os.environ, "HARNESS_RUN_ID": run_label, "TERM": "xterm-256color", "COLUMNS": columns}
    batch = subprocess.Popen(
        [sys.executable, "-c", "from harness.cli import main; main()", "batch", str(tasks), "--out",
         str(tmp_path / "out"), "--workers", "1"],
        cwd=ROOT, env=env, stdin=child, stdout=child, stderr=child, close_fds=True,
    )  # fmt: skip
    os.close(child)
    seen = b""
    while True:
        ready, _, _ = select.select([main], [], [], 300)
        if not ready:
            break
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the terminal closed: the batch is over
            break
        if not chunk:
            break
        seen += chunk
    assert batch.wait(timeout=60) == 0, seen.decode(errors="replace")[-2000:]
    os.close(main)
    text = seen.decode(errors="replace")
    assert "harness batch" in text and "1 running" in text and "/2 done" in text  # the live panel
    assert "t0-verified" in text and "verified" in text and "2 ran" in text  # the lines and the summary
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)
    assert "done 2, running 0, queued 0" in plain, plain[-1500:]  # a phrase whole at either width
    assert "0 not verified" in plain or "1 not verified" in plain
