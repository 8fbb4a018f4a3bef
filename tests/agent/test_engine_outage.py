"""The Docker engine goes away mid-run and comes back: the run ends `sandbox_error` in one line (exit
125), nothing recorded is lost, and `harness resume` finishes the run once the engine answers again.
(The outage is a real cut of the engine's socket, through tests.faults.EngineProxy.)"""

from __future__ import annotations

import subprocess
import time

import pytest

from harness.trajectory import read_records
from tests.agent.conftest import ADD_FIX, run_args, turn
from tests.faults import EngineProxy

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]


def test_an_engine_outage_ends_sandbox_error_and_resume_continues(harness, script, tmp_path, docker_client):
    model = script(
        turn("Running the tests.", ("run_tests", {})),
        {**turn("Fixing it.", ("apply_patch", ADD_FIX)), "delay_s": 4},  # the engine goes away meanwhile
        turn("Fixed add(); the tests pass."),
    )
    with EngineProxy(tmp_path / "engine.sock") as proxy:
        args = run_args(model, session="outage")
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
        out, err = child.communicate(timeout=120)
        assert child.returncode == 125, out + err
        assert '"outcome": "sandbox_error"' in out and "Traceback" not in err
        tools = [(r.step, r.name) for r in read_records(folder) if r.kind == "tool"]
        assert (1, "run_tests") in tools, "what was recorded before the outage is kept"
        proxy.start()  # the engine is back
        resumed = harness("resume", "outage", "--json", env={"DOCKER_HOST": proxy.url})
    assert resumed.code == 0 and resumed.json()["outcome"] == "verified", resumed.stdout + resumed.stderr
    mine = {"label": ["harness.session=outage", f"harness.state={harness.state_dir.resolve()}"]}
    assert docker_client.containers.list(all=True, filters=mine, ignore_removed=True) == []
