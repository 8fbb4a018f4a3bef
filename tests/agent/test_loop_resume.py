"""kill -9 at each phase of a step, then `harness resume`: same final workspace as an uninterrupted run,
the interrupted turn's tools executed once more (never the model asked twice for a recorded turn)."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.agent.outcome import RunState
from harness.trajectory import read_records, read_state
from sandbox.docker.ids import present_containers
from tests.agent.conftest import ADD_FIX, turn

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]

STEPS = [
    turn("Running the tests first.", ("run_tests", {})),
    turn("Reading the code.", ("read_file", {"path": "calc/ops.py"})),
    # a write followed by a run in ONE turn: `mid_tool` falls between them
    turn("Fixing add() and re-running the tests.", ("apply_patch", ADD_FIX), ("run_tests", {})),
    turn("I changed add() to return a + b. It subtracted, breaking two tests. The verify command passes."),
]


FIRST_RUN = [("apply_patch", 0), ("run_tests", 0)]
REAPPLIED = [("apply_patch", 0), ("run_tests", 0), ("apply_patch", 1)]  # the completed read is reused
EXPECTED_STEP3 = {
    "model_answered:3": FIRST_RUN,  # the turn was never recorded: the model is asked again
    "turn_recorded:3": FIRST_RUN,  # recorded, no tool ran: they run once, from the record
    "mid_tool:3": [("apply_patch", 0), ("apply_patch", 1), ("run_tests", 1)],
    "mid_snapshot:3": REAPPLIED,
    "after_snapshot:3": REAPPLIED,  # the snapshot exists but was never recorded: rolled back first
}


def files(workspace: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(workspace)): p.read_bytes()
        for p in sorted(workspace.rglob("*.py"))
        if "__pycache__" not in p.parts
    }


@pytest.fixture(scope="module")
def baseline(tmp_path_factory, run_label):
    import yaml

    from tests.agent.conftest import Harness

    folder = tmp_path_factory.mktemp("baseline")
    (folder / "s.yaml").write_text(yaml.safe_dump({"turns": STEPS}))
    harness = Harness(folder / "sessions", run_label)
    ran = harness.run(f"scripted:{folder / 's.yaml'}", session="base")
    assert ran.code == 0, ran.stdout + ran.stderr
    return files(harness.session_dir("base") / "workspace"), Path(ran.json()["patch"]).read_text()


@pytest.mark.parametrize(
    "phase", ["model_answered:3", "turn_recorded:3", "mid_tool:3", "mid_snapshot:3", "after_snapshot:3"]
)
def test_resume_after_kill_9_matches_an_uninterrupted_run(harness, script, baseline, phase, docker_client):
    crashed = harness.run(script(*STEPS), session="s", env={"HARNESS_CRASH_AT": phase})
    assert crashed.code == -9, crashed.stderr
    assert read_state(harness.session_dir("s"), RunState).step == 2  # step 3 never completed
    mine = {"label": ["harness.session=s", f"harness.state={harness.state_dir.resolve()}"]}
    assert present_containers(
        docker_client, mine
    )  # the crashed run's warm containers (Podman's 500s for the removed read as gone)
    resumed = harness("resume", "s", "--json")
    assert resumed.code == 0, resumed.stdout + resumed.stderr
    assert resumed.json()["outcome"] == "verified" and resumed.json()["steps"] == 4
    assert present_containers(docker_client, mine) == []  # resume removed them; its own are closed
    workspace, patch = baseline
    assert files(harness.session_dir("s") / "workspace") == workspace
    assert Path(resumed.json()["patch"]).read_text() == patch
    records = read_records(harness.session_dir("s"))
    turns = [r.step for r in records if r.kind == "turn"]
    assert turns == [1, 2, 3, 4]  # a recorded turn is never asked for again
    step3 = [(r.name, r.attempt) for r in records if r.kind == "tool" and r.step == 3]
    assert step3 == EXPECTED_STEP3[phase]  # each call completes once; a write is re-applied at most once
    state = read_state(harness.session_dir("s"), RunState)
    tool_ids = [e.message.tool_call_id for e in state.context.entries if e.message.role == "tool"]
    assert len(tool_ids) == len(set(tool_ids))  # no duplicated tool result in the conversation
