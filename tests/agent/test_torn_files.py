"""Files torn by a crash, read back: a trajectory cut inside a multi-byte character, and every other
file harness reads (state, step log, session.json, run.json) torn or damaged. Each ends cleanly: the
torn tail is dropped and recorded, or the command stops with one line and its exit code."""

from __future__ import annotations

import json

import pytest

from harness.trajectory import read_records
from sandbox.durable import read_log
from tests.agent.conftest import turn

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]

STEPS = [
    turn("Je lis le code d'abord — 日本語のテキストも。", ("read_file", {"path": "calc/ops.py"})),
    turn("Voilà: rien à changer ✓."),
]


def _torn(text: str) -> bytes:
    """A record cut in the middle of a multi-byte character."""
    encoded = json.dumps({"kind": "event", "ts": 1.0, "event": "x", "detail": text}, ensure_ascii=False).encode()
    cut = encoded.index("本".encode()) + 1
    return encoded[:cut]


@pytest.mark.parametrize("cut_at", ["turn_recorded:2", "model_answered:2"])
def test_resume_after_a_tear_inside_a_utf8_character(harness, script, cut_at, docker_client):
    crashed = harness.run(script(*STEPS), session="torn", verify=None, env={"HARNESS_CRASH_AT": cut_at})
    assert crashed.code == -9, crashed.stderr
    trajectory = harness.session_dir("torn") / "trajectory.jsonl"
    with open(trajectory, "ab") as handle:
        handle.write(_torn("日本語のテキスト"))
    assert read_log(trajectory).torn, "the file really ends torn inside a character"
    resumed = harness("resume", "torn", "--json")
    assert resumed.code == 10 and "Traceback" not in resumed.stderr, resumed.stdout + resumed.stderr
    mine = {"label": ["harness.session=torn", f"harness.state={harness.state_dir.resolve()}"]}
    assert docker_client.containers.list(all=True, filters=mine, ignore_removed=True) == [], "resume left none"
    events = [r for r in read_records(harness.session_dir("torn")) if r.kind == "event" and r.event == "torn_tail"]
    assert len(events) == 1 and "bytes" in events[0].detail
    shown = harness("show", "torn", "--json")
    assert shown.code == 0 and shown.json()["outcome"] == "unverified"


@pytest.mark.parametrize("name", ["state.json", "run.json", "session.json", "steps.jsonl", "trajectory.jsonl"])
def test_a_damaged_file_stops_resume_with_one_line(harness, script, name, docker_client):
    crashed = harness.run(script(*STEPS), session="bad", verify=None, env={"HARNESS_CRASH_AT": "turn_recorded:2"})
    assert crashed.code == -9
    path = harness.session_dir("bad") / name
    data = path.read_bytes()
    # damage in the middle (not a torn tail): a UTF-8 sequence cut and bytes that are no JSON
    path.write_bytes(data[: len(data) // 2] + b"\xe6\x97" + b"}{garbage\n" + data[len(data) // 2 :])
    resumed = harness("resume", "bad")
    assert resumed.code in (64, 66, 125), resumed.stdout + resumed.stderr
    assert "Traceback" not in resumed.stderr and len(resumed.stderr.strip().splitlines()) <= 2, resumed.stderr
    assert "damaged" in resumed.stderr or "unreadable" in resumed.stderr, resumed.stderr
    # What the killed run left on the engine (its controller is gone) goes with a prune, even though
    # the session's files are damaged; the resume itself already pruned it when it got that far.
    pruned = harness("sandbox", "prune", "--run", harness.env["HARNESS_RUN_ID"])
    assert pruned.code == 0, pruned.stderr
    left = docker_client.containers.list(
        all=True, filters={"label": ["harness.session=bad", f"harness.run={harness.env['HARNESS_RUN_ID']}"]}
    )
    assert left == [], [c.labels for c in left]
