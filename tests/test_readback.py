"""The views read a session's files as plain JSON (`harness.readback`): what they read is what the
models wrote, the texts both say are said once, and a damaged file is the same one-line error."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from harness import readback
from harness.agent.budget import Spent
from harness.agent.outcome import RunResult, RunState, token_counts
from harness.cli import listing, run_view
from harness.errors import SessionError
from harness.policy.decision import Decision
from harness.trajectory import (
    DelegateRecord,
    EventRecord,
    HookRecord,
    OutcomeRecord,
    StepRecord,
    ToolRecord,
    Trajectory,
    TurnRecord,
    VerifyRecord,
    read_records,
    write_state,
)
from harness.types import ModelTurn, ToolCall, Usage


def _session(tmp_path, *, finished: bool = True):
    folder = tmp_path / "s1"
    folder.mkdir()
    trajectory = Trajectory(folder)
    turn = ModelTurn(
        text="look \x1b[2J first",
        tool_calls=[ToolCall(id="c1", name="bash", arguments={"command": "ls"})],
        usage=Usage(input_tokens=120, output_tokens=30, estimated=True),
    )
    records = [
        TurnRecord(step=1, turn=turn),
        ToolRecord(
            step=1,
            call_id="c1",
            name="bash",
            arguments={"command": "ls"},
            decision=Decision(action="allow", rule="r1", reason="listed"),
            text="calc.py\ntests",
            duration_ms=41,
            wrote=True,
        ),
        StepRecord(step=1, snapshot_step=1, wrote=True),
        HookRecord(event="PreToolUse", command="./check", place="container", step=2, verdict="block", reason="no"),
        DelegateRecord(phase="start", step=2, call_id="c2", child="d1", session="s1-d1", reserve={"max_steps": 6}),
        ToolRecord(step=1, call_id="x", name="read_file", text="child's", agent="d1"),
        DelegateRecord(
            phase="end", step=2, call_id="c2", child="d1", session="s1-d1", change="applied", paths=["a.py"]
        ),
        EventRecord(event="resumed", detail="from step 2"),
        VerifyRecord(round=1, passed=False, exit_code=1, status="failed", failing=["test_add"]),
        OutcomeRecord(outcome="failed_verification", detail="1 failing"),
    ]
    for record in records:
        trajectory.append(record)
    trajectory.close()
    spent = Spent(input_tokens=120, output_tokens=30, estimated_tokens=150, cost_usd=0.0123, elapsed_s=4.5)
    state = RunState(session_id="s1", task="Fix it.\nAll of it.", model="scripted:x", step=2, spent=spent)
    if finished:
        state.finished = True
        state.result = RunResult.of(
            state, "failed_verification", "1 failing", None, spent, patch=None, session_dir=str(folder)
        )
    write_state(folder, state)
    return folder, records


def test_the_views_read_what_the_models_wrote_and_say_it_as_the_models_do(tmp_path):
    folder, written = _session(tmp_path)
    plain, typed = readback.records(folder), read_records(folder, readback.EVERY_AGENT)
    assert len(plain) == len(typed) == len(written)
    for line, record in zip(plain, typed, strict=True):
        assert line == json.loads(record.model_dump_json())
    start, end = typed[4], typed[6]
    assert readback.reserve_text(plain[4]["reserve"]) == start.reserve_text == "max_steps 6"
    assert readback.change_text(end.change, end.paths, end.conflicts) == end.change_text == "change applied: a.py"
    assert readback.whose(plain[3]["place"]) == typed[3].whose == "the repository's, in a container"
    assert [line["kind"] for line in readback.records(folder, "d1")] == ["tool"]
    assert RunResult.model_validate(readback.result(folder)) == run_view.result_of(folder)
    assert readback.result(folder)["outcome"] == "failed_verification"

    out = Console(file=io.StringIO(), width=100, color_system=None)
    run_view.render_session(out, folder)
    shown = out.file.getvalue()
    for said in (
        "120 in / 30 out tokens, estimated",
        "→ bash(command='ls')",
        "✓ bash: calc.py (allow, 41 ms)",
        "files changed: the state after step 1 is kept",
        "hook PreToolUse block: no",
        "(the repository's, in a container)",
        "sub-agent d1 started (max_steps 6)",
        "│ ✓ read_file: child's (not gated, 0 ms)",
        "sub-agent d1 ended",
        "change applied: a.py",
        "resumed from step 2",
        "exit 1: failed test_add",
        "outcome   failed_verification — 1 failing",
        "150 of them estimated",
        "cost      $0.0123   elapsed 4.5s",
    ):
        assert said in shown, f"{said!r} not in:\n{shown}"
    assert "\x1b" not in shown and "\\x1b[2J" in shown, "a model's escape is shown, never sent"


def test_an_unfinished_run_reads_as_the_result_the_models_built_for_it(tmp_path):
    folder, _ = _session(tmp_path, finished=False)
    spent = Spent(input_tokens=120, output_tokens=30, estimated_tokens=150, cost_usd=0.0123, elapsed_s=4.5)
    assert readback.tokens(spent.model_dump()) == token_counts(spent)
    result = RunResult.model_validate(readback.result(folder))
    assert (result.outcome, result.exit_code, result.steps, result.tokens) == (
        "incomplete",
        130,
        2,
        {"input": 120, "output": 30, "cached": 0, "estimated": 150},
    )
    assert listing.run_of(folder) == {"outcome": "", "model": "scripted:x", "task": "Fix it."}


def test_an_old_spelling_a_torn_tail_and_damage_read_as_the_models_read_them(tmp_path):
    folder, _ = _session(tmp_path)
    state = json.loads((folder / "state.json").read_text())
    state["result"]["outcome"] = "sandbox_error"
    (folder / "state.json").write_text(json.dumps(state))
    assert readback.result(folder)["outcome"] == "infra_error"
    assert listing.run_of(folder)["outcome"] == "infra_error"

    trajectory = folder / "trajectory.jsonl"
    whole = trajectory.read_bytes()
    trajectory.write_bytes(whole + b'{"kind": "tool", "te')  # a crash mid-append
    assert len(readback.records(folder)) == len(read_records(folder, readback.EVERY_AGENT))
    for damage in (b"not json\n", b"[1, 2]\n"):
        trajectory.write_bytes(damage + whole)
        with pytest.raises(SessionError, match="is damaged and cannot be read back"):
            readback.records(folder)
    (folder / "state.json").write_text("[]")
    with pytest.raises(SessionError, match="is damaged"):
        readback.state(folder)


def test_the_list_reads_every_session_that_names_itself_and_skips_the_rest(tmp_path):
    for name, info in (
        ("b", {"id": "b", "repo": "/r", "created": 2.0}),
        ("a", {"id": "a", "repo": "/r", "created": 1.0, "parent": {"session": "b", "step": 3, "agent": "d1"}}),
        ("c", {"id": "c", "repo": "/r", "created": True}),
        ("d", ["not", "a", "record"]),
    ):
        (tmp_path / name).mkdir()
        (tmp_path / name / "session.json").write_text(json.dumps(info))
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "session.json").write_text("{torn")
    assert [info["id"] for info in readback.sessions(tmp_path)] == ["a", "b"]
    out = Console(file=io.StringIO(), width=120, color_system=None)
    listing.render_sessions(out, tmp_path, long=True)
    shown = out.file.getvalue()
    assert "sub-agent d1 of b (its step 3)" in shown and shown.index("a  no run") < shown.index("b  no run")


def _listed(folder: Path, width: int = 80, **options: Any) -> list[str]:
    out = Console(file=io.StringIO(), width=width, color_system=None)
    listing.render_sessions(out, folder, **options)
    return out.file.getvalue().splitlines()


def test_the_list_is_one_line_a_session_filtered_by_outcome_and_limited_to_the_newest(tmp_path):
    runs = {"s1": ("verified", 1.0), "s2": ("stuck", 2.0), "s3": ("limit:cost", 3.0), "s4": ("verified", 4.0)}
    for name, (outcome, created) in runs.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "session.json").write_text(json.dumps({"id": name, "repo": "/r", "created": created}))
        state = {"session_id": name, "task": "Fix the failing tests in calc.\nMore words.", "model": "anthropic:claude-sonnet-4-6",
                 "finished": True, "result": {"outcome": outcome}}  # fmt: skip
        (tmp_path / name / "state.json").write_text(json.dumps(state))
    narrow = _listed(tmp_path)
    assert all(len(line) <= 80 and line == line.rstrip() for line in narrow), narrow
    assert narrow[1].split() == ["tests", "in", "calc."], "the task wraps under itself, nothing cut"
    lines = _listed(tmp_path, width=120)
    assert [line.split()[2:4] for line in lines] == [
        ["s1", "verified"], ["s2", "stuck"], ["s3", "limit:cost"], ["s4", "verified"]
    ]  # fmt: skip
    assert lines[0].endswith("anthropic:claude-sonnet-4-6  Fix the failing tests in calc.")
    assert [line.split()[2] for line in _listed(tmp_path, 120, outcome="verified")] == ["s1", "s4"]
    assert [line.split()[2] for line in _listed(tmp_path, 120, outcome="limit")] == ["s3"], "limit matches limit:cost"
    newest = _listed(tmp_path, 120, limit=2)
    assert [line.split()[2] for line in newest[:2]] == ["s3", "s4"]
    assert newest[2] == "2 older not shown (--limit 2); --limit 0 shows all"
    assert _listed(tmp_path, outcome="failed") == [f"no sessions with outcome failed in {tmp_path}"]


def test_a_result_of_the_wrong_shape_is_damage_in_one_line(tmp_path):
    folder, _ = _session(tmp_path)
    state = json.loads((folder / "state.json").read_text())
    state["result"]["steps"] = "many"
    (folder / "state.json").write_text(json.dumps(state))
    with pytest.raises(SessionError, match="is damaged and cannot be read back"):
        run_view.result_of(folder)


def test_the_same_request_made_again_in_a_row_is_one_line_saying_how_many() -> None:
    """A client's retries of a refused request (pip retries five times) and a run of downloads from one
    host: one line each, bytes summed; another reason, another host or a request between them is not
    folded in."""
    refused = {"method": "CONNECT", "host": "pypi.org", "port": 443, "allowed": False, "reason": "not on the list"}
    other = {**refused, "reason": "the session ended"}
    got = {"method": "GET", "host": "files.example.invalid", "port": 443, "allowed": True, "sent": 10, "received": 90}
    folded = run_view.folded([refused] * 6 + [other, got, {**got, "sent": 5}, refused])
    assert [(r["reason"] if not r["allowed"] else r["host"], r["times"]) for r in folded] == [
        ("not on the list", 6), ("the session ended", 1), ("files.example.invalid", 2), ("not on the list", 1),
    ]  # fmt: skip
    assert (folded[2]["sent"], folded[2]["received"]) == (15, 180)
    assert run_view.target_of(folded[0]) == "CONNECT pypi.org:443 ×6"


def test_files_changed_is_said_of_a_step_that_changed_files_not_of_one_that_only_could(tmp_path):
    """A step of run_command may write (`wrote`), yet a grep changes nothing: only a step whose calls
    made a snapshot of their own (`changed`) says files changed. A record from before `changed` was
    kept says it of every step that could write, as it did."""
    folder = tmp_path / "s2"
    folder.mkdir()
    trajectory = Trajectory(folder)
    for record in (
        StepRecord(step=1, snapshot_step=0, wrote=True, changed=False),
        StepRecord(step=2, snapshot_step=1, wrote=True, changed=True),
        StepRecord(step=3, snapshot_step=1, wrote=False, changed=False),
        StepRecord(step=4, snapshot_step=2, wrote=True),
    ):
        trajectory.append(record)
    trajectory.close()
    shown = [run_view._row(line) for line in readback.records(folder)]
    said = [row[1] if row else None for row in shown]
    assert [bool(row and "files changed" in row) for row in said] == [False, True, False, True], said
