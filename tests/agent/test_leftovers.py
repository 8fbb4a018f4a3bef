"""No container outlives a run: kill -9 early (while the pool starts, during the first tool call),
then resume to the end; and every way a run ends (verified, limit, model error) removes its own."""

from __future__ import annotations

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
    if phase != "model_answered:1":  # the earliest point: the pool's first creates may not have reached the engine
        assert _mine(docker_client, harness, "early"), "the crashed run's pool and holder are still there"
    resumed = harness("resume", "early", "--json")
    assert resumed.code == 0 and resumed.json()["outcome"] == "verified", resumed.stdout + resumed.stderr
    assert _mine(docker_client, harness, "early") == []


@pytest.mark.parametrize(("extra", "code"), [((), 0), (("--max-steps", "2"), 13)])
def test_every_ending_removes_the_runs_own_containers(harness, docker_client, extra, code):
    ran = harness.run(f"scripted:{FIX_SCRIPT}", *extra, session="ends")
    assert ran.code == code, ran.stdout + ran.stderr
    assert _mine(docker_client, harness, "ends") == []
