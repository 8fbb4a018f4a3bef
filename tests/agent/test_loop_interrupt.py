"""Ctrl-C: the container of the call in flight is killed, the trajectory closed, exit 130, resumable."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from harness.agent.outcome import RunState
from harness.trajectory import read_records, read_state
from tests.agent.conftest import EXAMPLE, ROOT, turn

pytestmark = [pytest.mark.docker, pytest.mark.timeout(180)]


def test_ctrl_c_kills_the_running_container_and_exits_130(tmp_path, script, docker_client):
    label = f"test-int-{uuid.uuid4().hex[:8]}"  # own label: nothing else may be counted below
    model = script(turn("Running the (slow) tests.", ("run_tests", {})))
    sessions = tmp_path / "sessions"
    env = {**os.environ, "HARNESS_RUN_ID": label, "HARNESS_STATE_DIR": str(sessions)}
    command = [
        sys.executable,
        "-c",
        "from harness.cli import main; main()",
        "run",
        "--image",
        "py311",
        "--model",
        model,
        str(EXAMPLE),
        "--task",
        "t",
        "--session",
        "int",
        "--json",
        "--test-cmd",
        "python3 -c 'import time; time.sleep(120)'",
        "--verify",
        "true",
    ]
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not any(r.kind == "turn" for r in read_records(sessions / "int")):  # the turn is recorded
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.2)
        time.sleep(2.0)  # the sleeping test command is now running in its container
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        leftovers = docker_client.containers.list(all=True, filters={"label": f"harness.run={label}"})
        for container in leftovers:
            container.remove(force=True)
    assert proc.returncode == 130, err
    assert leftovers == []
    state = read_state(sessions / "int", RunState)
    assert state.result.outcome == "interrupted" and not state.finished
    assert read_records(sessions / "int")[-1].kind == "outcome"
