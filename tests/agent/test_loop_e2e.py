"""`harness run` end to end: scripted model, real sandbox (Docker), real sessions and tools."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.agent.outcome import RunState
from harness.trajectory import read_records, read_state
from tests.agent.conftest import ADD_FIX, EXAMPLE, FIX_SCRIPT, turn

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]


def test_the_example_fix_verifies_and_leaves_the_original_alone(harness):
    original = (EXAMPLE / "calc" / "ops.py").read_bytes()
    ran = harness.run(f"scripted:{FIX_SCRIPT}", session="demo")
    result = ran.json()
    assert ran.code == 0, ran.stderr
    assert result["outcome"] == "verified" and result["verified"] is True and result["steps"] == 5
    patch = Path(result["patch"]).read_text()
    assert "-    return a - b\n+    return a + b" in patch and "tests/" not in patch
    assert (EXAMPLE / "calc" / "ops.py").read_bytes() == original
    shown = harness("show", "demo", "--json")
    assert shown.code == 0 and shown.json() == result
    kinds = [r.kind for r in read_records(harness.session_dir("demo"))]
    # write-ahead: each turn is recorded before its tool records
    assert kinds.index("turn") < kinds.index("tool") and kinds[-1] == "outcome"
    rendered = harness("show", "demo")
    assert "apply_patch" in rendered.stdout and "verified" in rendered.stdout


def test_claiming_success_without_a_fix_fails_verification(harness, script):
    model = script(turn("I fixed add(); all tests pass now."))
    ran = harness.run(model, "--max-verify-rounds", "1")
    result = ran.json()
    assert ran.code == 11 and result["outcome"] == "failed_verification" and not result["verified"]
    assert "tests/test_ops.py::test_add" in result["evidence"]


def test_same_failing_tests_twice_is_stuck(harness, script):
    ran = harness.run(script(turn("Done, everything works.")))  # default: 3 verification rounds
    result = ran.json()
    assert ran.code == 12 and result["outcome"] == "stuck" and result["verify_rounds"] == 2
    assert "tests/test_ops.py::test_mean" in result["evidence"]


def test_editing_the_read_only_tests_is_denied(harness, script):
    cheat = {"path": "tests/test_ops.py", "old_text": "assert add(2, 3) == 5", "new_text": "assert True"}
    ran = harness.run(
        script(turn("I'll relax the test.", ("apply_patch", cheat)), turn("The tests pass now.")),
        "--max-verify-rounds",
        "1",
        session="cheat",
    )
    assert ran.json()["outcome"] == "failed_verification"
    [tool] = [r for r in read_records(harness.session_dir("cheat")) if r.kind == "tool"]
    assert (
        tool.is_error and tool.error_kind == "denied" and tool.decision is not None and tool.decision.action == "deny"
    )
    assert harness.final("cheat", "tests/test_ops.py") == (EXAMPLE / "tests" / "test_ops.py").read_text()


def test_a_tool_failing_three_times_in_a_row_trips_the_breaker(harness, script):
    missing = ("read_file", {"path": "calc/nope.py"})
    ran = harness.run(script(*[turn(f"try {n}", missing) for n in range(5)]))
    result = ran.json()
    assert ran.code == 12 and result["outcome"] == "stuck" and result["steps"] == 3
    assert "read_file failed 3 times" in result["detail"] and len(result["evidence"]) == 3


def test_malformed_turns_come_back_as_tool_errors_and_the_run_goes_on(harness, script):
    model = script(
        turn("", ("no_such_tool", {})),
        turn("", ("read_file", {})),
        turn("", ("read_file", {"path": "calc/ops.py", "bogus": 1})),
        turn("Fixing.", ("apply_patch", ADD_FIX)),
        turn("Changed add() to add. It subtracted. Verified by the verify command."),
    )
    ran = harness.run(model, session="malformed")
    assert ran.json()["outcome"] == "verified", ran.stdout
    kinds = [r.error_kind for r in read_records(harness.session_dir("malformed")) if r.kind == "tool"]
    assert kinds == ["unknown_tool", "invalid_arguments", "invalid_arguments", None]


@pytest.mark.parametrize(
    "flags, which, steps",
    [
        (("--max-steps", "2"), "steps", 2),
        (("--timeout-min", "0.0001"), "wall_clock", 0),
    ],
)
def test_limits_end_the_run_with_a_structured_outcome(harness, flags, which, steps):
    ran = harness.run(f"scripted:{FIX_SCRIPT}", *flags)
    result = ran.json()
    assert ran.code == 13 and result["outcome"] == f"limit:{which}" and result["steps"] == steps
    assert "Traceback" not in ran.stderr


def test_without_a_verify_command_the_repositorys_own_is_detected_and_said(harness):
    ran = harness(
        "run", "--image", "py311", "--model", f"scripted:{FIX_SCRIPT}", str(EXAMPLE), "--task", "Fix it.", "--json"
    )
    assert ran.code == 0 and ran.json()["outcome"] == "verified", ran.stdout + ran.stderr
    assert "verify: `python3 -m pytest -q` (detected: Python tests (tests/test_*.py and pyproject.toml))" in ran.stderr
    ran = harness("run", "--model", "x:y", str(EXAMPLE), "--task", "t", "--verify", "true", "--no-verify")
    assert ran.code == 64 and "contradict" in ran.stderr


def test_no_verify_command_is_unverified(harness):
    ran = harness.run(f"scripted:{FIX_SCRIPT}", "--test-cmd", "python3 -m pytest -q", verify=None)
    assert ran.code == 10 and ran.json()["outcome"] == "unverified"


def test_replay_reissues_the_tool_calls_and_the_model_turns(harness):
    assert harness.run(f"scripted:{FIX_SCRIPT}", session="orig").code == 0
    replayed = harness("replay", "orig", "--json")
    report = replayed.json()
    assert replayed.code == 0 and report["diverged"] == 0 and len(report["steps"]) == 5
    again = harness.run("replay:orig", session="again")
    assert again.code == 0 and again.json()["outcome"] == "verified"
    state = read_state(harness.session_dir("again"), RunState)
    assert state.result.steps == 5
