"""How a run of attempts shares its budget and chooses (harness.assembly.attempts), and how a script
gives each attempt its turns: no engine, real Budgets and the real script parser."""

from __future__ import annotations

import pytest

from harness.agent.budget import Budget
from harness.assembly.attempts import AttemptEnd, check_attempts, rank, share, why_chosen
from harness.config import LimitsConfig, RunConfig
from harness.errors import ScriptError, UsageError
from harness.providers.scripted import ScriptedProvider


def shares(limits: LimitsConfig, count: int) -> list[LimitsConfig | None]:
    """Each attempt's limits as the run gives them out, one after the other, each held."""
    total, given = Budget(limits), []
    for number in range(count):
        mine = share(total.left(), limits, count - number, total.remaining_s())
        if mine is not None:
            total.reserve(mine)
        given.append(mine)
    return given


def test_the_steps_and_cost_are_divided_among_the_attempts_and_the_wall_clock_is_whole() -> None:
    limits = LimitsConfig(max_steps=40, max_cost_usd=0.4, timeout_min=10)
    given = shares(limits, 4)
    assert [g.max_steps for g in given if g] == [10, 10, 10, 10]
    assert [round(g.max_cost_usd or 0, 6) for g in given if g] == [0.1] * 4
    assert {round(g.timeout_min or 0, 1) for g in given if g} == {10.0}, "they run at once: each has the clock"
    uneven = shares(LimitsConfig(max_steps=10), 4)
    assert [g.max_steps for g in uneven if g] == [2, 2, 3, 3] and sum(g.max_steps for g in uneven if g) == 10


def test_an_attempt_nothing_is_left_for_is_refused() -> None:
    given = shares(LimitsConfig(max_steps=4), 5)
    assert [g.max_steps if g else None for g in given] == [1, 1, 1, 1, None]
    spent = Budget(LimitsConfig(max_steps=40, max_cost_usd=0.02))
    spent.charge(None, 0.02)  # an earlier process's attempts used it all
    assert share(spent.left(), spent.limits, 1, None) is None


def attempt(name: str, outcome: str = "verified", **fields: object) -> AttemptEnd:
    defaults: dict[str, object] = {"files": ["calc/ops.py"], "lines_changed": 2, "verified": outcome == "verified"}
    return AttemptEnd(name=name, session_id=f"s-{name}", outcome=outcome, **{**defaults, **fields})


def test_attempts_are_ranked_by_their_evidence_never_by_their_words() -> None:
    verified_big = attempt("a1", lines_changed=9)
    verified_small = attempt("a2", lines_changed=2, cost_usd=0.5)
    verified_small_cheap = attempt("a3", lines_changed=2, cost_usd=0.1)
    closest = attempt("a4", "failed_verification", failing=1)
    further = attempt("a5", "stuck", failing=3)
    no_change = attempt("a6", "stuck", files=[], lines_changed=0, failing=1)
    refused = AttemptEnd(name="a7", session_id="s-a7", outcome="refused")
    running = AttemptEnd(name="a8", session_id="s-a8")
    every = [verified_big, verified_small, verified_small_cheap, closest, further, no_change, refused, running]
    ranked = [a.name for a in rank(every)]
    assert ranked == ["a3", "a2", "a1", "a4", "a6", "a5"], "verified, fewer failing, smaller change, cheaper"
    assert why_chosen(rank(every)[0], rank(every), "best") == (
        "a3 verified with the smallest change (2 line(s) in 1 file(s); the other verified: a2 2, a1 9)"
    )
    assert why_chosen(verified_big, [verified_big], "first") == "a1 verified first"
    assert why_chosen(closest, [closest, further], "best") == "no attempt verified; a4 came closest (1 test(s) failing)"
    assert why_chosen(verified_big, [verified_big, further], "best") == "a1 is the only attempt that verified"
    assert (refused.ended, running.ended, attempt("a9", "limit:steps").ended, attempt("a10", "interrupted").ended) == (
        True,
        False,
        True,
        False,
    ), "a spent share ends an attempt; an interrupted one is continued by a resume"


def test_a_script_gives_each_attempt_its_turns_and_says_where_it_is_wrong(tmp_path) -> None:
    path = tmp_path / "script.yaml"
    path.write_text(
        "turns:\n  - text: main\nattempts:\n  - turns:\n      - text: first\n  - turns:\n      - text: second\n"
    )
    script = ScriptedProvider.from_file(path)
    answers = [script.for_attempt(n).complete([], [], max_tokens=100).text for n in (1, 2, 3)]
    assert answers == ["first", "second", "main"], "an attempt without an entry answers with the main turns"
    path.write_text("turns: []\nattempts:\n  a1:\n    turns: []\n")
    with pytest.raises(ScriptError, match=r"script.yaml:3: 'attempts' must be a list of scripts"):
        ScriptedProvider.from_file(path)
    path.write_text("turns: []\nattempts:\n  - turns: []\n    agents: {}\n")
    with pytest.raises(ScriptError, match=r"script.yaml:4: unknown key 'agents' in attempt a1"):
        ScriptedProvider.from_file(path)


def test_attempts_are_refused_where_they_cannot_run() -> None:
    config = RunConfig.model_validate({"model": "anthropic:claude-sonnet-4-5", "attempts": {"count": 2}})
    check_attempts(config)
    with pytest.raises(UsageError, match="a client's own calls"):
        check_attempts(config, served=True)
    hosted = config.model_copy(update={"agent": "claude-code"})
    with pytest.raises(UsageError, match=r"a hosted agent \(claude-code\) cannot be run as attempts"):
        check_attempts(hosted)
