"""The loop's decisions with the FakeSandbox (host subprocess) where the real engine adds nothing:
the circuit breakers, limits, no verify command, model errors, Ctrl-C, and the state it leaves."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from harness import assembly
from harness.agent.outcome import RunResult, RunState
from harness.assembly import Runtime
from harness.batch import worker
from harness.causes import INFRA_CAUSES
from harness.config import LimitsConfig, RunConfig
from harness.errors import ModelBadResponse, ModelUnavailable, ModelUnreachable, RetryBudgetExhausted
from harness.providers.scripted import ScriptedProvider, parse_script
from harness.trajectory import read_records, read_state
from harness.types import Message, ModelTurn, ToolCall, ToolSchema, Usage
from sandbox import errors as sandbox_errors
from sandbox.errors import EngineUnavailable, ImageNotFound, SandboxError
from sandbox.fake import FakeSandbox
from sandbox.session.session import Session
from tests.inprocess import fake_run

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "calc"
READ = "{name: read_file, arguments: {path: nowhere.py}}"


class FailingProvider:
    """Answers `turns`, then raises `error` (a provider whose endpoint went away)."""

    name = "failing"

    def __init__(self, turns: list[ModelTurn], error: BaseException) -> None:
        self.turns, self.error = turns, error

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema],
        *,
        max_tokens: int,
        timeout_s: float | None = None,
    ) -> ModelTurn:
        if self.turns:
            return self.turns.pop(0)
        raise self.error


def run(tmp_path: Path, provider, verify: str | None = "false", **limits):
    config = RunConfig(model="scripted:x", verify=verify, limits=LimitsConfig(**limits))
    return fake_run(EXAMPLE, tmp_path, provider, config)


def scripted(text: str) -> ScriptedProvider:
    return ScriptedProvider(parse_script(text))


def test_three_failures_of_one_tool_in_a_row_is_stuck(tmp_path):
    result, folder = run(tmp_path, scripted("turns:\n" + f"  - tool_calls: [{READ}]\n" * 5))
    assert result.outcome == "stuck" and result.steps == 3 and len(result.evidence) == 3
    assert read_state(folder, RunState).finished


def test_a_success_in_between_resets_the_tool_breaker(tmp_path):
    ok = "{name: list_dir, arguments: {}}"
    text = (
        f"turns:\n  - tool_calls: [{READ}]\n  - tool_calls: [{READ}]\n  - tool_calls: [{ok}]\n"
        f"  - tool_calls: [{READ}]\n  - tool_calls: [{READ}]\n"
    )
    result, _ = run(tmp_path, scripted(text), max_steps=5)
    assert result.outcome == "limit:steps"


def test_same_failing_set_in_two_verification_rounds_is_stuck(tmp_path):
    result, folder = run(tmp_path, scripted("turns:\n  - text: done\n"))
    assert result.outcome == "stuck" and result.verify_rounds == 2
    feedback = [e.message.content for e in read_state(folder, RunState).context.entries if e.message.role == "user"]
    assert feedback[-1].startswith("VERIFICATION FAILED (round 1 of 3)")


def test_no_verify_command_is_unverified(tmp_path):
    result, _ = run(tmp_path, scripted("turns:\n  - text: done\n"), verify=None)
    assert result.outcome == "unverified" and result.exit_code == 10


def test_passing_verification_is_verified(tmp_path):
    result, _ = run(tmp_path, scripted("turns:\n  - text: done\n"), verify="true")
    assert result.outcome == "verified" and result.exit_code == 0 and result.verified


def test_exhausted_retry_budget_is_model_error_billed_and_resumable(tmp_path):
    error = RetryBudgetExhausted("the session's retry budget (40) is spent")
    error.usage, error.cost_usd = Usage(input_tokens=7), 0.25
    turn = ModelTurn(tool_calls=[ToolCall(id="a", name="list_dir")], usage=Usage(input_tokens=5, output_tokens=1))
    result, folder = run(tmp_path, FailingProvider([turn], error))
    assert result.outcome == "model_error" and result.exit_code == 14 and "retry budget" in result.detail
    assert result.steps == 1 and result.tokens["input"] == 12 and result.cost_usd == 0.25
    state = read_state(folder, RunState)
    assert not state.finished and state.step == 1
    assert [r.kind for r in read_records(folder)][-1] == "outcome"


@pytest.mark.parametrize(
    "error, cause",
    [
        (
            RetryBudgetExhausted("gave up", ModelUnreachable("cannot reach the model endpoint x: refused")),
            "endpoint_unreachable",
        ),
        (ModelUnreachable("the words of the message do not matter"), "endpoint_unreachable"),
        (RetryBudgetExhausted("cannot reach the model endpoint (said in words)", ModelUnavailable("503")), None),
        (ModelBadResponse("cannot reach the model endpoint (said in words)"), None),
    ],
)
def test_a_model_error_is_the_machines_by_its_class_never_by_its_words(tmp_path, error, cause):
    result, _ = run(tmp_path, FailingProvider([], error))
    assert result.outcome == "model_error" and result.kind == "model_error" and result.limit is None
    assert result.cause == cause
    assert worker._retried(result) is (cause is not None), "a batch tries again only what the machine failed"


@pytest.mark.parametrize(
    "error, cause",
    [
        (EngineUnavailable("no engine answers"), "engine_unavailable"),
        (ImageNotFound("image py311 is gone"), "image_missing"),
        (SandboxError("the container would not start"), "sandbox_failed"),
    ],
)
def test_a_sandbox_that_cannot_run_ends_infra_error_with_its_cause_and_no_more_model_calls(tmp_path, error, cause):
    provider = FailingProvider([], error)
    result, folder = run(tmp_path, provider)
    assert result.outcome == "infra_error" and result.exit_code == 125 and result.cause == cause
    assert worker._retried(result), "a batch tries it again as a new attempt"
    assert not read_state(folder, RunState).finished, "resumable once the machine is back"


def test_every_sandbox_error_names_a_cause_the_report_knows():
    classes = [c for c in vars(sandbox_errors).values() if isinstance(c, type) and issubclass(c, SandboxError)]
    assert len(classes) >= 8 and {c.infra_cause for c in classes} <= INFRA_CAUSES


def test_results_and_records_of_earlier_versions_still_read():
    spent = {"input": 0, "output": 0, "cached": 0}
    old = RunResult.model_validate(
        {
            "session_id": "s",
            "outcome": "sandbox_error",
            "exit_code": 125,
            "verified": False,
            "steps": 1,
            "tokens": spent,
            "cost_usd": 0.0,
            "elapsed_s": 1.0,
        }
    )
    assert old.outcome == "infra_error" and old.kind == "infra_error"


def test_ctrl_c_is_interrupted_with_the_trajectory_closed(tmp_path):
    result, folder = run(tmp_path, FailingProvider([], KeyboardInterrupt()))
    assert result.outcome == "interrupted" and result.exit_code == 130
    assert read_records(folder)[-1].outcome == "interrupted"


@pytest.mark.parametrize(
    "limits, which", [({"max_steps": 1}, "steps"), ({"max_tokens": 5}, "tokens"), ({"max_cost_usd": 0.5}, "cost")]
)
def test_each_limit(tmp_path, limits, which):
    turn = ModelTurn(tool_calls=[ToolCall(id="a", name="list_dir")], usage=Usage(input_tokens=5), cost_usd=1.0)
    result, _ = run(tmp_path, FailingProvider([turn, turn.model_copy()], RuntimeError("unreachable")), **limits)
    assert result.outcome == f"limit:{which}" and result.exit_code == 13 and result.steps == 1
    assert result.kind == "limit" and result.limit == which and result.cause is None


def test_ctrl_c_mid_turn_then_resume_neither_loses_nor_duplicates_the_turn(tmp_path):
    text = (
        "turns:\n  - tool_calls: [{name: list_dir, arguments: {}}, {name: write_file, arguments: "
        "{path: notes.txt, content: hi}}, {name: git_status, arguments: {}}]\n  - text: done\n"
    )

    def interrupt(phase: str) -> None:
        if phase == "mid_tool":
            raise KeyboardInterrupt

    config = RunConfig(model="scripted:x", verify="true")
    session = Session.create(EXAMPLE, tmp_path, spec=config.spec())
    state = RunState(session_id=session.id, task="t", model="scripted:x", snapshot_step=session.step)
    first = assembly.build_agent(
        config=config,
        session=session,
        sandbox=FakeSandbox(),
        provider=scripted(text),
        state=state,
        runtime=Runtime(run_id="test", on_phase=interrupt),
    )
    assert first.run().outcome == "interrupted"
    saved = read_state(session.dir, RunState)
    assert saved.step == 0 and len(saved.context.entries) == 2  # nothing of the half-done turn
    second = assembly.build_agent(
        config=config,
        session=Session.open(tmp_path, session.id),
        sandbox=FakeSandbox(),
        provider=scripted(text),
        state=saved.model_copy(update={"result": None}),
        runtime=Runtime(run_id="test", on_phase=lambda phase: None),
    )
    result = second.run()
    assert result.outcome == "verified" and result.steps == 2
    entries = read_state(session.dir, RunState).context.entries
    assert [e.message.role for e in entries] == ["system", "user", "assistant", "tool", "tool", "tool", "assistant"]


def test_malformed_turns_go_through_the_real_loop_to_a_precise_outcome(tmp_path):
    text = """
turns:
  - tool_calls:
      - {name: read_file, arguments_text: 'path equals calc'}
      - {name: '', arguments: {}}
      - {name: no_such_tool, arguments: {x: 1}}
      - {name: read_file, arguments: [1, 2]}
      - {name: run_command, arguments: {command: "ls \\0 calc"}}
      - {name: read_file, arguments: {path: "calc/\\0ops.py"}}
  - {}
"""
    result, folder = run(tmp_path, scripted(text), verify="false", max_verify_rounds=2)
    assert result.outcome == "failed_verification" and result.steps >= 2
    kinds = [r.error_kind for r in read_records(folder) if r.kind == "tool"]
    assert kinds == [
        "invalid_json",
        "unknown_tool",
        "unknown_tool",
        "invalid_json",
        "invalid_arguments",
        "invalid_arguments",
    ]
    texts = [r.text for r in read_records(folder) if r.kind == "tool"]
    assert "NUL byte" in texts[4] and "NUL byte" in texts[5]


def test_reading_the_same_unchanged_file_over_and_over_is_noted_then_stuck(tmp_path):
    text = "turns:\n" + "  - tool_calls: [{name: run_command, arguments: {command: ls calc}}]\n" * 150
    provider = scripted(text)
    result, folder = run(tmp_path, provider, max_steps=200)
    assert result.outcome == "stuck" and result.steps == 6, (result.outcome, result.steps, result.detail)
    assert "same result 6 times in a row" in result.detail and len(result.evidence) == 6
    sent = read_state(folder, RunState).context.entries
    tool_texts = [e.message.content for e in sent if e.message.role == "tool"]
    assert "NOTE from the harness" not in tool_texts[1] and "NOTE from the harness" in tool_texts[2]


def test_a_short_cycle_of_calls_is_caught_too(tmp_path):
    a = "{name: run_command, arguments: {command: ls calc}}"
    b = "{name: run_command, arguments: {command: ls tests}}"
    text = "turns:\n" + f"  - tool_calls: [{a}]\n  - tool_calls: [{b}]\n" * 40
    result, _ = run(tmp_path, scripted(text), max_steps=200)
    assert result.outcome == "stuck" and result.steps == 8 and "repeated 4 times" in result.detail


def test_a_call_whose_result_changes_is_no_repetition():
    from harness.agent.repetition import Repetition
    from harness.config import RepetitionConfig

    memory, call = Repetition(), ToolCall(id="c", name="run_tests")
    for n in range(10):
        memory = memory.observe(n, call, f"exit_code=1 ... {n} failed")
    assert memory.verdict(RepetitionConfig()) is None and memory.repeats() == (1, 1)
