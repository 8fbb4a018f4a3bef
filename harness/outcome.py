"""How a run ends (outcome, exit code, result object) and the state a resume starts from."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from harness.budget import Spent
from harness.context import ContextState
from harness.repetition import Repetition

OUTCOME_EXIT_CODES: dict[str, int] = {
    "verified": 0,
    "unverified": 10,
    "failed_verification": 11,
    "stuck": 12,
    "limit": 13,
    "model_error": 14,
    "state_error": 74,
    "sandbox_error": 125,
    "interrupted": 130,
}
"""Exit code of `harness run`/`resume` per outcome; every `limit:<which>` exits 13."""


def exit_code_for_outcome(outcome: str) -> int:
    return OUTCOME_EXIT_CODES[outcome.split(":", 1)[0]]


class ToolStreak(BaseModel):
    """Consecutive failures of one tool (the circuit breaker's memory)."""

    model_config = ConfigDict(extra="forbid")

    name: str = ""
    count: int = 0
    evidence: list[str] = Field(default_factory=list)

    def after(self, name: str, failed: bool, first_line: str, keep: int) -> ToolStreak:
        """The streak once one more call of `name` ended (a success resets it; another tool restarts it)."""
        if not failed:
            return ToolStreak()
        if name == self.name:
            return ToolStreak(name=name, count=self.count + 1, evidence=([*self.evidence, first_line])[-keep:])
        return ToolStreak(name=name, count=1, evidence=[first_line])


class RunState(BaseModel):
    """Written atomically at every step boundary: where a resumed run continues from."""

    model_config = ConfigDict(extra="forbid")

    session_id: str
    task: str
    model: str
    step: int = 0
    """Last complete model step."""
    snapshot_step: int = 0
    """Session snapshot step holding the workspace after `step`."""
    context: ContextState = Field(default_factory=ContextState)
    spent: Spent = Field(default_factory=Spent)
    awaiting_verify: bool = False
    """The model's last turn had no tool call; verification has not finished yet."""
    verify_rounds: int = 0
    last_failing: list[str] | None = None
    streak: ToolStreak = Field(default_factory=ToolStreak)
    repetition: Repetition = Field(default_factory=Repetition)
    """Fingerprints of the latest calls: what the loop-catcher counts (kept across a resume)."""
    finished: bool = False
    result: RunResult | None = None


class RunResult(BaseModel):
    """The final result object (`harness show --json`, `harness run --json`)."""

    model_config = ConfigDict(extra="forbid")

    session_id: str
    outcome: str
    detail: str = ""
    evidence: Any = None
    exit_code: int
    verified: bool
    steps: int
    tokens: dict[str, int]
    cost_usd: float
    elapsed_s: float
    verify_rounds: int = 0
    patch: str | None = None
    """Path of the exported patch (in the session directory)."""
    session_dir: str = ""

    @classmethod
    def of(
        cls,
        state: RunState,
        outcome: str,
        detail: str,
        evidence: Any,
        spent: Spent,
        *,
        patch: str | None,
        session_dir: str,
    ) -> RunResult:
        """The result of a run that ended with `outcome` after `state`'s steps and `spent`."""
        return cls(
            session_id=state.session_id,
            outcome=outcome,
            detail=detail,
            evidence=evidence,
            exit_code=exit_code_for_outcome(outcome),
            verified=outcome == "verified",
            steps=state.step,
            tokens={"input": spent.input_tokens, "output": spent.output_tokens, "cached": spent.cached_input_tokens},
            cost_usd=round(spent.cost_usd, 6),
            elapsed_s=round(spent.elapsed_s, 3),
            verify_rounds=state.verify_rounds,
            patch=patch,
            session_dir=session_dir,
        )


RunState.model_rebuild()
