"""The Docker engine goes away mid-run and comes back: the run ends `infra_error` (cause
`engine_unavailable`) in one line (exit 125) within seconds, the model is not called again after the
failure, nothing recorded is lost, and `harness resume` finishes the run once the engine answers
again. (The outage is a real cut of the engine's socket, through tests.faults.EngineProxy.)"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from harness.trajectory import read_records
from tests.agent.conftest import ADD_FIX, run_args, turn
from tests.faults import EngineProxy
from tests.telemetry.test_run_spans import spans_in

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]


def test_an_engine_outage_ends_infra_error_and_resume_continues(harness, script, tmp_path, docker_client):
    model = script(
        turn("Running the tests.", ("run_tests", {})),
        {**turn("Fixing it.", ("apply_patch", ADD_FIX)), "delay_s": 4},  # the engine goes away meanwhile
        turn("Fixed add(); the tests pass."),
    )
    with EngineProxy(tmp_path / "engine.sock") as proxy:
        spans = tmp_path / "spans.jsonl"
        args = run_args(model, "--otel-file", str(spans), session="outage")
        child = harness.start(
            *args, env={"DOCKER_HOST": proxy.url}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        folder = harness.session_dir("outage")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any(
            r.kind == "step" and r.step == 1 for r in (read_records(folder) if folder.exists() else [])
        ):
            time.sleep(0.2)
        proxy.stop()  # the engine is gone while the model "thinks" about step 2
        cut = time.monotonic()
        out, err = child.communicate(timeout=120)
        ended_in = time.monotonic() - cut
        assert child.returncode == 125, out + err
        result = json.loads(out)
        assert result["outcome"] == "infra_error" and result["cause"] == "engine_unavailable", out
        assert "Traceback" not in err and ended_in < 60, f"the run ended {ended_in:.0f} s after the engine went"
        records = read_records(folder)
        tools = [(r.step, r.name) for r in records if r.kind == "tool"]
        assert (1, "run_tests") in tools, "what was recorded before the outage is kept"
        turns = [r.step for r in records if r.kind == "turn"]
        assert max(turns) == 2, "no model call after the sandbox failed (the step-2 turn was already answered)"
        proxy.start()  # the engine is back
        resumed = harness("resume", "outage", "--json", "--otel-file", str(spans), env={"DOCKER_HOST": proxy.url})
    assert resumed.code == 0 and resumed.json()["outcome"] == "verified", resumed.stdout + resumed.stderr
    runs = [s for s in spans_in(spans) if s["name"] == "invoke_agent harness"]
    assert [(r["attributes"]["harness.outcome"], r["attributes"].get("harness.cause")) for r in runs] == [
        ("infra_error", "engine_unavailable"),
        ("verified", None),
    ], "the run span says the machine failed, and the resume is a run span of its own"
    assert runs[0]["status"] == 2 and runs[1]["attributes"]["harness.resumed"] is True
    mine = {"label": ["harness.session=outage", f"harness.state={harness.state_dir.resolve()}"]}
    assert docker_client.containers.list(all=True, filters=mine, ignore_removed=True) == []
