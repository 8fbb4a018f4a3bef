"""`harness export SESSION --format rollout`: a session's turns as the records trainers read, in
Harbor's shapes: `agent_result` is its AgentContext (tokens, cost, and `rollout_details`: one
RolloutDetail for the run's own conversation, per turn the completion's log-probabilities and, where
the server gave them, the prompt and completion token ids), `verifier_result` its VerifierResult
(`rewards`: `reward` 1 or 0 from verification, `score` the fraction of tests passing).

Per-turn lists stay aligned with the run's turns: a turn the server gave nothing for (no `--rollout`,
or llama-cpp-python's grammar-constrained tool calls, which carry no log-probabilities) has an empty
list, and `extra.sampled` says which turns did. Ids are written only when every turn has them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness.agent.outcome import RunState
from harness.errors import NotFoundError
from harness.rollouts.server import graded
from harness.trajectory import TurnRecord, VerifyRecord, read_records, read_state


def rollout(session_dir: Path) -> dict[str, Any]:
    """The session's rollout record (see the module); NotFoundError for a session that never ran."""
    state = read_state(session_dir, RunState)
    if state is None:
        raise NotFoundError(f"session {session_dir.name} has no run: there is no rollout to export")
    records = read_records(session_dir)
    turns = [r for r in records if isinstance(r, TurnRecord)]
    sampled = [r.turn.rollout for r in turns]
    detail: dict[str, Any] = {
        "logprobs": [s.logprobs if s is not None else [] for s in sampled],
        "extra": {
            "steps": [r.step for r in turns],
            "tokens": [s.tokens if s is not None else [] for s in sampled],
            "sampled": [s is not None and bool(s.logprobs) for s in sampled],
        },
    }
    if sampled and all(s is not None and s.completion_ids is not None for s in sampled):
        detail["completion_token_ids"] = [s.completion_ids for s in sampled if s is not None]
    if sampled and all(s is not None and s.prompt_ids is not None for s in sampled):
        detail["prompt_token_ids"] = [s.prompt_ids for s in sampled if s is not None]
    result = state.result
    verified = result is not None and result.verified
    rounds = [r for r in records if isinstance(r, VerifyRecord) and r.layer == "verify"]
    score = graded(rounds[-1].output) if rounds and not verified else None
    reward = 1.0 if verified else 0.0
    tokens = result.tokens if result is not None else {}
    return {
        "agent_result": {
            "n_input_tokens": tokens.get("input", 0),
            "n_cache_tokens": tokens.get("cached", 0),
            "n_output_tokens": tokens.get("output", 0),
            "cost_usd": result.cost_usd if result is not None else 0.0,
            "rollout_details": [detail],
            "metadata": {
                "session_id": session_dir.name,
                "model": state.model,
                "outcome": result.outcome if result is not None else None,
                "tokens_estimated": tokens.get("estimated", 0),
            },
        },
        "verifier_result": {"rewards": {"reward": reward, "score": reward if score is None else score}},
    }
