"""A session that hangs past its wall clock does not hold a batch: its worker stops it after the grace
period (the engine stalls mid-call, so the run cannot end by itself), the record says so, and the
other task-runs of the batch are unaffected. The stall is real: the engine's socket, through
tests.faults.EngineProxy, stops passing bytes (an engine that hangs rather than goes away)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from harness.batch.records import BatchDir
from tests.agent.conftest import ADD_FIX, turn
from tests.faults import EngineProxy

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "calc"
pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(300)]


def test_a_hung_session_is_stopped_after_its_grace_and_recorded(tmp_path, run_label, docker_client):
    script = tmp_path / "hang.yaml"
    script.write_text(
        yaml.safe_dump(
            {
                "turns": [
                    turn("Running the tests.", ("run_tests", {})),
                    {**turn("Fixing it.", ("apply_patch", ADD_FIX)), "delay_s": 2},  # the engine stalls meanwhile
                    turn("Fixed add(); the tests pass."),
                ]
            }
        )
    )
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text(
        yaml.safe_dump(
            {
                "defaults": {"verify": "python3 -m pytest -q", "model": [f"scripted:{script}"], "grace_s": 2},
                "tasks": [{"id": "hangs", "repo": str(EXAMPLE), "task": "Fix it.", "limits": {"timeout_min": 0.1}}],
            }
        )
    )
    out = tmp_path / "out"
    with EngineProxy(tmp_path / "engine.sock") as proxy:
        env = {**os.environ, "HARNESS_RUN_ID": run_label, "DOCKER_HOST": proxy.url}
        started = time.monotonic()
        batch = subprocess.Popen(
            [sys.executable, "-c", "from harness.cli import main; main()", "batch", str(tasks), "--out", str(out),
             "--workers", "1", "--json"],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        sessions = out / "sessions"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any(
            '"run_tests"' in p.read_text(errors="replace") for p in sessions.glob("*/trajectory.jsonl")
        ):
            time.sleep(0.1)
        proxy.stall()  # every engine call from here on hangs (the session's next call among them)
        stdout, stderr = batch.communicate(timeout=200)
        elapsed = time.monotonic() - started
        proxy.stall(False)
    assert batch.returncode == 0, stdout + stderr
    result = json.loads(stdout.strip().splitlines()[-1])
    assert result["ran"] == 1 and result["gave_up"] == 1
    (record,) = BatchDir(out).records()
    assert record.outcome == "killed" and "wall clock plus 2 s of grace" in record.detail
    assert (sessions / record.session_id / "killed.json").is_file()
    assert elapsed < 60, f"the hung session held the batch for {elapsed:.0f} s"
    # The worker went while every engine call hung, so what the session had started is still there,
    # its controller dead: a prune (as after any crash) removes it.
    pruned = subprocess.run(
        [sys.executable, "-c", "from harness.cli import main; main()", "sandbox", "prune", "--run", run_label],
        cwd=ROOT, env={**os.environ, "HARNESS_RUN_ID": run_label}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert pruned.returncode == 0, pruned.stderr
    left = docker_client.containers.list(all=True, filters={"label": f"harness.session={record.session_id}"})
    assert left == [], [c.labels for c in left]
