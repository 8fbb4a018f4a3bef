"""How a run ends (outcome, exit code, result object) and the state a resume starts from."""

from __future__ import annotations

from typing import Any, cast, get_args

from pydantic import BaseModel, ConfigDict, Field, field_validator

from harness import readback
from harness.agent.budget import Spent
from harness.agent.context import ContextState
from harness.agent.repetition import Repetition
from harness.causes import INFRA_CAUSES, Cause
from harness.errors import ModelAuthError, ModelError, ModelUnreachable, RetryBudgetExhausted
from harness.types import LimitKind, Outcome, OutcomeKind
from sandbox.errors import SandboxError
from sandbox.exit_code import ExitCode

OUTCOMES: frozenset[str] = frozenset(get_args(Outcome))

OUTCOME_EXIT_CODES = cast("dict[OutcomeKind, ExitCode]", readback.OUTCOME_EXIT_CODES)
"""Exit code of `harness run`/`resume` per outcome kind; every `limit:<which>` exits 13."""

RESUMABLE: frozenset[OutcomeKind] = frozenset({"interrupted", "model_error", "infra_error", "limit"})
"""Stopped short of a decision: `harness run` says how to continue it with `harness resume`."""

FINAL_OUTCOMES: frozenset[OutcomeKind] = frozenset({"verified", "unverified", "failed_verification", "stuck"})
"""Decided outcomes: a run that ended so is finished (the others stay resumable)."""


def outcome_kind(outcome: Outcome) -> OutcomeKind:
    """The outcome without its limit (`limit:steps` is `limit`)."""
    return cast(OutcomeKind, outcome.split(":", 1)[0])


def limit_of(outcome: Outcome) -> LimitKind | None:
    """Which budget a `limit:<which>` outcome spent (None for the others)."""
    kind, _, which = outcome.partition(":")
    return cast(LimitKind, which) if kind == "limit" else None


def limit_outcome(which: LimitKind) -> Outcome:
    """The spelled outcome of a spent budget."""
    return cast(Outcome, f"limit:{which}")


LEGACY_OUTCOMES = readback.LEGACY_OUTCOMES
"""Outcomes as earlier versions spelled them in results and records, and what they are now."""


def infra_cause(error: SandboxError) -> Cause:
    """What the sandbox failed on, as its error's class says."""
    cause = error.infra_cause
    return cast(Cause, cause) if cause in INFRA_CAUSES else "sandbox_failed"


is_infra = readback.is_infra


def machine_cause(error: ModelError) -> Cause | None:
    """Why a failed model call was the machine's fault (decided by the error's class, or by the last
    error a spent retry budget carries), or None when the model or its account failed."""
    last = error.last_error if isinstance(error, RetryBudgetExhausted) else error
    if isinstance(last, ModelAuthError):
        return "key_rejected"
    return "endpoint_unreachable" if isinstance(last, ModelUnreachable) else None


def exit_code_for_outcome(outcome: Outcome, cause: Cause | None = None) -> ExitCode:
    """The exit code of a run that ended so: its outcome's, except a model error whose endpoint could
    not be reached, or which rejected the key, which exits as every command does then (69, 77)."""
    if outcome_kind(outcome) == "model_error" and cause == "endpoint_unreachable":
        return ExitCode.MODEL_UNAVAILABLE
    if outcome_kind(outcome) == "model_error" and cause == "key_rejected":
        return ExitCode.MODEL_AUTH
    return OUTCOME_EXIT_CODES[outcome_kind(outcome)]


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
    stop_refused: bool = False
    """A Stop hook refused the model's last attempt to stop (its `stop_hook_active` next time)."""
    finished: bool = False
    result: RunResult | None = None


def token_counts(spent: Spent) -> dict[str, int]:
    """A result's `tokens`: input, output, cached, and `estimated` (the part harness counted where the
    server reported no usage) when there is one."""
    return readback.tokens(spent.model_dump())


class RunResult(BaseModel):
    """The final result object (`harness show --json`, `harness run --json`)."""

    model_config = ConfigDict(extra="forbid")

    session_id: str
    outcome: Outcome
    detail: str = ""
    evidence: Any = None
    exit_code: int
    cause: Cause | None = None
    """Set when the machine, not the model, failed the run (see `Cause`)."""
    verified: bool
    steps: int
    subagent_steps: int = 0
    """Model steps its sub-agents took (the tree's steps are `steps` + this); tokens and cost are
    the whole tree's already."""
    tokens: dict[str, int]
    """input, output, cached; `estimated` when part of them was counted by harness (no usage reported)."""
    cost_usd: float
    elapsed_s: float
    verify_rounds: int = 0
    patch: str | None = None
    """Path of the exported patch (in the session directory)."""
    session_dir: str = ""

    @field_validator("outcome", mode="before")
    @classmethod
    def _current_spelling(cls, value: Any) -> Any:
        return LEGACY_OUTCOMES.get(value, value) if isinstance(value, str) else value

    @property
    def kind(self) -> OutcomeKind:
        """The outcome without its limit."""
        return outcome_kind(self.outcome)

    @property
    def limit(self) -> LimitKind | None:
        """The budget a `limit:<which>` outcome spent."""
        return limit_of(self.outcome)

    @classmethod
    def of(
        cls,
        state: RunState,
        outcome: Outcome,
        detail: str,
        evidence: Any,
        spent: Spent,
        *,
        patch: str | None,
        session_dir: str,
        cause: Cause | None = None,
        subagent_steps: int = 0,
    ) -> RunResult:
        """The result of a run that ended with `outcome` after `state`'s steps and `spent`."""
        return cls(
            session_id=state.session_id,
            outcome=outcome,
            detail=detail,
            evidence=evidence,
            exit_code=exit_code_for_outcome(outcome, cause),
            cause=cause,
            verified=outcome == "verified",
            steps=state.step,
            subagent_steps=subagent_steps,
            tokens=token_counts(spent),
            cost_usd=round(spent.cost_usd, 6),
            elapsed_s=round(spent.elapsed_s, 3),
            verify_rounds=state.verify_rounds,
            patch=patch,
            session_dir=session_dir,
        )


RunState.model_rebuild()
