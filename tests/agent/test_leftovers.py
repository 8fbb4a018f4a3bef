"""No container outlives a run: kill -9 early (while the pool starts, during the first tool call),
then resume to the end; kill -9 at every phase of a run (its session made but not yet recorded,
the model's answer, a tool call, a snapshot), then any start of harness that reaches the engine:
nothing of it is left, and `session rm` removes a session a crash cut short; and every way a run
ends (verified, limit, model error) removes its own."""

from __future__ import annotations

import subprocess

import pytest

from tests.agent.conftest import FIX_SCRIPT

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]


def _mine(docker_client, harness, session: str) -> list:
    labels = {"label": [f"harness.session={session}", f"harness.state={harness.state_dir.resolve()}"]}
    return docker_client.containers.list(all=True, filters=labels, ignore_removed=True)


@pytest.mark.parametrize("phase", ["model_answered:1", "mid_tool:1", "turn_recorded:1"])
def test_kill_9_early_then_resume_leaves_no_container(harness, docker_client, phase):
    crashed = harness.run(f"scripted:{FIX_SCRIPT}", session="early", env={"HARNESS_CRASH_AT": phase})
    assert crashed.code == -9, crashed.stderr
    resumed = harness("resume", "early", "--json")
    assert resumed.code == 0 and resumed.json()["outcome"] == "verified", resumed.stdout + resumed.stderr
    assert _mine(docker_client, harness, "early") == []


@pytest.mark.parametrize(("extra", "code"), [((), 0), (("--max-steps", "2"), 13)])
def test_every_ending_removes_the_runs_own_containers(harness, docker_client, extra, code):
    ran = harness.run(f"scripted:{FIX_SCRIPT}", *extra, session="ends")
    assert ran.code == code, ran.stdout + ran.stderr
    assert _mine(docker_client, harness, "ends") == []


def _left(docker_client, harness, session: str) -> dict[str, int]:
    """Every container, volume and network of the session's that is still there."""
    mine = [f"harness.session={session}", f"harness.state={harness.state_dir.resolve()}"]
    containers = _mine(docker_client, harness, session)
    ids = {c.id for c in containers}
    volumes = [v for v in docker_client.volumes.list(filters={"label": mine}) if v.id not in ids]
    networks = docker_client.networks.list(filters={"label": mine})
    return {"containers": len(containers), "volumes": len(volumes), "networks": len(networks)}


@pytest.mark.parametrize(
    "phase", ["session_ready", "model_answered:1", "mid_tool:2", "mid_snapshot:1", "after_snapshot:3"]
)
def test_kill_9_at_any_phase_then_any_start_leaves_nothing(harness, docker_client, phase):
    """The crashed controller's pre-started calls, holders and their volumes carry its pid and identity:
    the next start of harness that reaches the engine (here a one-shot `exec`) removes them. A session
    whose create the crash cut short (no record yet) is removed by `session rm`, never refused."""
    from tests.agent.conftest import EXAMPLE

    crashed = harness.run(f"scripted:{FIX_SCRIPT}", session="killed", env={"HARNESS_CRASH_AT": phase})
    assert crashed.code == -9, crashed.stderr
    start = harness("exec", str(EXAMPLE), "--", "true")
    assert start.code == 0, start.stderr
    assert _left(docker_client, harness, "killed") == {"containers": 0, "volumes": 0, "networks": 0}
    removed = harness("session", "rm", "killed")
    assert removed.code == 0, removed.stdout + removed.stderr
    if phase == "session_ready":
        assert "its create was cut short" in removed.stdout
    assert not (harness.state_dir / "killed").exists()


def test_kill_9_of_a_batch_then_any_start_leaves_nothing_and_the_rerun_reports_so(harness, docker_client, tmp_path):
    """A batch killed (-9) while its task-runs call tools: its workers go with it, and the next start of
    harness removes what they left; rerun, the batch finishes and its report says it left nothing."""
    import json
    import signal
    import time

    from tests.agent.conftest import EXAMPLE

    slow = tmp_path / "slow.yaml"
    slow.write_text(
        "turns:\n  - text: slow\n    delay_s: 30\n    tool_calls:\n      - name: run_tests\n        arguments: {}\n"
        "  - text: done\n"
    )
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text(
        "defaults:\n  image: py311\n  verify: python3 -m pytest -q\ntasks:\n"
        + "".join(f"  - id: t{n}\n    repo: {EXAMPLE}\n    task: Fix the failing tests in calc.\n" for n in range(2))
    )
    out = tmp_path / "out"
    args = ["batch", str(tasks), "--out", str(out), "--model", f"scripted:{slow}", "--workers", "2"]
    batch = harness.start(*args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sessions = out / "sessions"
    label = {"label": [f"harness.state={sessions.resolve()}"]}
    deadline = time.monotonic() + 120
    listed = lambda: docker_client.containers.list(all=True, filters=label, ignore_removed=True)  # noqa: E731 - a pooled container may go between the listing and its inspect
    while not listed() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert listed(), "the batch never started a call"
    batch.send_signal(signal.SIGKILL)
    batch.wait(30)
    time.sleep(2)  # its workers notice their parent is gone
    start = harness("exec", str(EXAMPLE), "--", "true")
    assert start.code == 0, start.stderr
    assert listed() == []
    assert docker_client.volumes.list(filters=label) == [] and docker_client.networks.list(filters=label) == []
    slow.write_text(slow.read_text().replace("delay_s: 30", "delay_s: 0"))
    rerun = harness(*args, timeout=240)
    assert rerun.code == 0, rerun.stdout + rerun.stderr
    assert json.loads((out / "left.json").read_text()) == {"containers": 0, "volumes": 0, "networks": 0}
    assert "Left on the engine when the batch ended: nothing." in (out / "report.md").read_text()
