import json

from harness.agent.outcome import RunState
from harness.trajectory import (
    STATE_FILE,
    TRAJECTORY_FILE,
    EventRecord,
    OutcomeRecord,
    Trajectory,
    TurnRecord,
    read_records,
    read_state,
    write_state,
)
from harness.types import ModelTurn, ToolCall


def test_records_round_trip(tmp_path):
    traj = Trajectory(tmp_path)
    turn = ModelTurn(text="hi", tool_calls=[ToolCall(id="a", name="read_file", arguments={"path": "x"})])
    traj.append(TurnRecord(step=1, turn=turn), durable=True)
    traj.append(OutcomeRecord(outcome="verified"))
    traj.close()
    records = read_records(tmp_path)
    assert [r.kind for r in records] == ["turn", "outcome"]
    assert records[0].turn == turn


def test_torn_last_line_is_dropped_and_cut_before_the_next_append(tmp_path):
    traj = Trajectory(tmp_path)
    traj.append(EventRecord(event="one"))
    traj.close()
    with open(tmp_path / TRAJECTORY_FILE, "a") as handle:
        handle.write('{"kind": "event", "event": "tw')  # a crash mid-write
    assert [r.event for r in read_records(tmp_path)] == ["one"]
    traj = Trajectory(tmp_path)
    traj.append(EventRecord(event="two"))
    traj.close()
    assert [r.event for r in read_records(tmp_path)] == ["one", "torn_tail", "two"]  # the drop is on record
    assert all(json.loads(line) for line in (tmp_path / TRAJECTORY_FILE).read_text().splitlines())


def test_secrets_never_reach_the_disk(tmp_path):
    key = "sk-test-1234567890abcdef"
    traj = Trajectory(tmp_path, secrets=[key])
    traj.append(EventRecord(event="error", detail=f"401 for key {key}"))
    traj.close()
    state = RunState(session_id="s", task=f"uses {key}", model="openai:x")
    write_state(tmp_path, state, secrets=[key])
    for name in (TRAJECTORY_FILE, STATE_FILE):
        assert key not in (tmp_path / name).read_text()


def test_state_is_replaced_atomically(tmp_path):
    write_state(tmp_path, RunState(session_id="s", task="t", model="m", step=1))
    write_state(tmp_path, RunState(session_id="s", task="t", model="m", step=2))
    assert read_state(tmp_path, RunState).step == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == [STATE_FILE]  # no temp files left
    empty = tmp_path / "empty"
    empty.mkdir()
    assert read_state(empty, RunState) is None
