import pytest

from harness.agent.budget import Budget, Spent
from harness.config import LimitsConfig
from harness.errors import LimitReached
from harness.types import ModelTurn, Usage


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def turn(inp: int, out: int, cost: float = 0.0) -> ModelTurn:
    return ModelTurn(usage=Usage(input_tokens=inp, output_tokens=out), cost_usd=cost)


def test_steps_limit_counts_model_steps():
    budget = Budget(LimitsConfig(max_steps=2))
    budget.check()
    budget.charge_step()
    budget.check()
    budget.charge_step()
    with pytest.raises(LimitReached) as stop:
        budget.check()
    assert stop.value.outcome == "limit:steps" and stop.value.which == "steps"


def test_tokens_are_input_plus_output():
    budget = Budget(LimitsConfig(max_tokens=1000))
    budget.charge_turn(turn(600, 300))
    budget.check()
    budget.charge_turn(turn(50, 50))
    with pytest.raises(LimitReached) as stop:
        budget.check()
    assert stop.value.outcome == "limit:tokens"
    assert budget.spent().tokens == 1000


def test_cost_includes_failed_calls():
    budget = Budget(LimitsConfig(max_cost_usd=0.10))
    budget.charge_turn(turn(10, 10, cost=0.06))
    budget.charge(Usage(input_tokens=5), 0.05)  # a failed, billed call
    with pytest.raises(LimitReached) as stop:
        budget.check()
    assert stop.value.outcome == "limit:cost"
    assert budget.spent().input_tokens == 15


def test_wall_clock_accumulates_across_resumes():
    clock = Clock()
    budget = Budget(LimitsConfig(timeout_min=1), Spent(elapsed_s=50), clock=clock)
    clock.now += 9
    budget.check()
    assert budget.remaining_s() == pytest.approx(1)
    clock.now += 1
    with pytest.raises(LimitReached) as stop:
        budget.check()
    assert stop.value.outcome == "limit:wall_clock"
    assert budget.spent().elapsed_s == pytest.approx(60)


def test_a_call_never_gets_more_than_the_wall_clock_left():
    clock = Clock()
    budget = Budget(LimitsConfig(timeout_min=1, min_call_s=2), clock=clock)
    assert budget.deadline().seconds(120) == pytest.approx(60)
    clock.now += 50
    assert budget.deadline().seconds(120) == pytest.approx(10) and budget.deadline().seconds(5) == 5
    clock.now += 8.5
    with pytest.raises(LimitReached) as stop:
        budget.deadline().seconds(120)  # 1.5 s left: under the floor, so the call is not started
    assert stop.value.outcome == "limit:wall_clock"
    assert Budget(LimitsConfig(), clock=clock).deadline().seconds(120) == 120  # no wall-clock limit


def test_resumed_budget_starts_from_spent():
    budget = Budget(LimitsConfig(max_steps=3), Spent(steps=3))
    with pytest.raises(LimitReached):
        budget.check()


def test_outcome_exit_codes_match_the_cli_exit_codes():
    from harness.agent.outcome import exit_code_for_outcome
    from harness.cli.app import ExitCode

    assert exit_code_for_outcome("verified") == ExitCode.OK
    assert exit_code_for_outcome("unverified") == ExitCode.UNVERIFIED
    assert exit_code_for_outcome("failed_verification") == ExitCode.FAILED_VERIFICATION
    assert exit_code_for_outcome("stuck") == ExitCode.STUCK
    assert exit_code_for_outcome("limit:cost") == ExitCode.LIMIT
    assert exit_code_for_outcome("model_error") == ExitCode.MODEL_ERROR
    assert exit_code_for_outcome("infra_error") == ExitCode.SANDBOX
    assert exit_code_for_outcome("interrupted") == ExitCode.INTERRUPTED


def test_a_childs_reserve_is_taken_out_of_what_is_left_and_its_use_counts_above():
    clock = Clock()
    parent = Budget(LimitsConfig(max_steps=20, max_tokens=1000, max_cost_usd=1.0, timeout_min=10), clock=clock)
    parent.charge_step()
    parent.charge_turn(turn(100, 0, 0.1))
    left = parent.left()
    assert (left.steps, left.tokens, left.cost_usd, left.seconds) == (19, 900, pytest.approx(0.9), 600)
    child = parent.reserve(LimitsConfig(max_steps=5, max_tokens=300, max_cost_usd=0.3, timeout_min=2))
    held = parent.left()  # a second child gets what neither the parent spent nor the first holds
    assert (held.steps, held.tokens, held.cost_usd) == (14, 600, pytest.approx(0.6))
    child.charge_step()
    child.charge_turn(turn(50, 50, 0.05))
    assert parent.spent().steps == 2 and parent.spent().tokens == 200, "the child's use counts above"
    assert parent.left().tokens == 600, "spent by the child or still held: the same to its siblings"
    clock.now += 150
    assert child.remaining_s() == 0.0 and parent.remaining_s() == pytest.approx(450)
    with pytest.raises(LimitReached) as stop:
        child.check()
    assert stop.value.which == "wall_clock", "its own two minutes are over, the run's ten are not"
    parent.release(child)
    assert parent.left().tokens == 800 and parent.left().steps == 18, "what it did not use is the parent's again"


def test_a_child_stops_at_the_runs_limit_even_within_its_own():
    parent = Budget(LimitsConfig(max_steps=3))
    child = parent.reserve(LimitsConfig(max_steps=10))
    for _ in range(3):
        child.charge_step()
    with pytest.raises(LimitReached) as stop:
        child.check()
    assert stop.value.which == "steps" and "of 3 steps" in str(stop.value)
