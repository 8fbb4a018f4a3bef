"""A real Docker engine restart mid-run (a second engine of the test's own, stopped with SIGTERM as a
service manager does, then started again): the run ends `infra_error` in one line (exit 125),
nothing recorded is lost, `harness resume` finishes the run once the engine is back, and no
container of the session is left on the engine."""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

import pytest

from harness.trajectory import read_records
from sandbox.docker import images
from sandbox.docker.engine import resolve_image
from tests.agent.conftest import ADD_FIX, run_args, turn
from tests.faults import SecondEngine

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(400)]


def test_a_real_engine_restart_mid_run_then_resume(harness, script, docker_client):
    images.build(docker_client, "py311")
    py311, _ = resolve_image(docker_client, "py311")
    model = script(
        turn("Running the tests.", ("run_tests", {})),
        {**turn("Fixing it.", ("apply_patch", ADD_FIX)), "delay_s": 4},  # the engine restarts meanwhile
        turn("Fixed add(); the tests pass."),
    )
    root = Path("/var/lib") / f"harness-test-engine-{uuid.uuid4().hex[:8]}"
    with SecondEngine(root, [images.BASE_REF, py311]) as engine:
        child = harness.start(
            *run_args(model, session="restart"),
            env={"DOCKER_HOST": engine.url},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        folder = harness.session_dir("restart")
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not any(
            r.kind == "step" and r.step == 1 for r in (read_records(folder) if folder.exists() else [])
        ):
            time.sleep(0.2)
        engine.stop()  # every container on it stops; the socket goes away
        out, err = child.communicate(timeout=120)
        assert child.returncode == 125, out + err
        assert '"outcome": "infra_error"' in out and '"cause": "engine_unavailable"' in out and "Traceback" not in err
        tools = [(r.step, r.name) for r in read_records(folder) if r.kind == "tool"]
        assert (1, "run_tests") in tools, "what was recorded before the restart is kept"

        engine.start()  # back, with the stopped containers of the cut run still listed
        resumed = harness("resume", "restart", "--json", env={"DOCKER_HOST": engine.url})
        assert resumed.code == 0 and resumed.json()["outcome"] == "verified", resumed.stdout + resumed.stderr
        listed = subprocess.run(
            ["docker", "ps", "-aq", "--filter", "label=harness.session=restart"],
            env={"DOCKER_HOST": engine.url, "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
        )
        assert listed.stdout.split() == [], "the cut run's containers and the resumed run's are all gone"
