"""The wall-clock budget bounds every tool call and verification: a call never gets more than the
run time left, and when less than `min_call_s` is left the run stops before starting it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness import assembly
from harness.agent.budget import Budget
from harness.agent.outcome import RunState
from harness.assembly import Runtime
from harness.config import LimitsConfig, RunConfig
from harness.errors import ModelUnavailable, RetryBudgetExhausted
from harness.providers.scripted import ScriptedProvider, parse_script
from harness.trajectory import read_records
from harness.types import ModelTurn, ToolCall, Usage
from sandbox.fake import FakeSandbox
from sandbox.session.session import Session, SessionConfig
from tests.agent.conftest import turn

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "calc"
SLOW = "python3 -c 'import time; time.sleep(60)'"


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def agent_with_clock(
    tmp_path: Path, script: str, verify: str | None, phase_seconds: dict[str, float], writable_root: bool = False
):
    config = RunConfig(model="scripted:x", verify=verify, limits=LimitsConfig(timeout_min=1, min_call_s=2))
    session = Session.create(EXAMPLE, tmp_path, spec=config.spec(), config=SessionConfig(writable_root=writable_root))
    state = RunState(session_id=session.id, task="t", model="scripted:x", snapshot_step=session.step)
    clock, sandbox = Clock(), FakeSandbox()

    def advance(phase: str) -> None:  # time passes while the tools run, without sleeping
        clock.now += phase_seconds.get(phase, 0.0)

    agent = assembly.build_agent(
        config=config,
        session=session,
        sandbox=sandbox,
        provider=ScriptedProvider(parse_script(script)),
        state=state,
        runtime=Runtime(run_id="test", on_phase=advance),
    )
    agent.budget = Budget(config.limits, state.spent, clock=clock)
    return agent, sandbox, session.dir


@pytest.mark.parametrize("writable_root", [False, True])  # True: the call's spec follows the session's steps
def test_each_call_gets_at_most_the_time_left_then_the_run_stops_before_a_call(tmp_path, writable_root):
    call = "{name: run_command, arguments: {command: 'true'}}"
    script = f"turns:\n  - tool_calls: [{call}]\n  - tool_calls: [{call}]\n  - tool_calls: [{call}]\n"
    agent, sandbox, folder = agent_with_clock(tmp_path, script, "true", {"mid_tool": 29.5}, writable_root)
    assert (agent.tool_context.follow is not None) == writable_root
    result = agent.run()
    assert result.outcome == "limit:wall_clock" and result.exit_code == 13 and result.steps == 2
    timeouts = [r.envelope.limits.timeout_s for r in read_records(folder) if r.kind == "tool"]
    assert timeouts == [pytest.approx(60), pytest.approx(30.5)]  # 120 s by default, capped by what is left
    assert len(sandbox.calls) == 2  # 1 s left for the third call: it never started
    assert "under the 2s a call needs" in result.detail


def test_verification_is_capped_and_not_started_without_time(tmp_path):
    agent, sandbox, folder = agent_with_clock(tmp_path, "turns:\n  - text: done\n", "false", {"after_snapshot": 59.0})
    result = agent.run()
    assert result.outcome == "limit:wall_clock" and sandbox.calls == []
    assert result.verify_rounds == 0 and not [r for r in read_records(folder) if r.kind == "verify"]


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_a_slow_command_is_cut_at_the_wall_clock_limit(harness, script):
    model = script(
        turn("Running it.", ("run_command", {"command": SLOW})), turn("Again.", ("run_command", {"command": SLOW}))
    )
    ran = harness.run(model, "--timeout-min", "0.15", verify=None)  # 9 s for the whole run
    result = ran.json()
    assert ran.code == 13 and result["outcome"] == "limit:wall_clock", ran.stdout + ran.stderr
    assert result["elapsed_s"] < 30  # not the 60 s the command wanted, nor the 120 s default
    tools = [r for r in read_records(Path(result["session_dir"])) if r.kind == "tool"]
    assert len(tools) == 1 and tools[0].envelope.status == "timeout"
    assert tools[0].envelope.limits.timeout_s <= 9
    assert tools[0].error_kind == "timeout"
    assert json.loads(tools[0].model_dump_json())["envelope"]["duration_ms"] < 15_000


class SlowModel:
    """Answers one tool turn after 20 s of (fake) time, then hangs until its timeout runs out."""

    name = "slow"

    def __init__(self, clock: Clock) -> None:
        self.clock, self.given = clock, []

    def complete(self, messages, tools, *, max_tokens, timeout_s=None):
        self.given.append(timeout_s)
        if len(self.given) == 1:
            self.clock.now += 20
            return ModelTurn(tool_calls=[ToolCall(id="a", name="list_dir")], usage=Usage(input_tokens=3))
        self.clock.now += timeout_s  # the whole time it was given, then the transport gives up
        error = RetryBudgetExhausted(
            "model call failed after 2 attempts (the next retry would end past the run's "
            "wall clock): model endpoint timed out",
            ModelUnavailable("timed out"),
        )
        error.usage, error.cost_usd = Usage(input_tokens=4), 0.5
        raise error


def test_a_model_call_gets_the_time_left_and_running_into_it_is_the_wall_clock_limit(tmp_path):
    agent, _, folder = agent_with_clock(tmp_path, "turns: []\n", "true", {})
    clock = Clock()
    model = agent.provider = SlowModel(clock)
    agent.budget = Budget(agent.budget.limits, agent.state.spent, clock=clock)
    result = agent.run()
    assert model.given == [pytest.approx(60), pytest.approx(40)]  # 60 s run: all of it, then what was left
    assert result.outcome == "limit:wall_clock" and result.exit_code == 13
    assert "ran into the wall clock" in result.detail and "timed out" in result.detail
    assert result.tokens["input"] == 7 and result.cost_usd == 0.5  # the failed call is billed
    assert read_records(folder)[-1].kind == "outcome"
