"""Every cost of a run metered in one place: steps, input+output tokens, USD, wall clock.

The loop charges each model turn and each step here and calls `check()`; a spent limit raises
`LimitReached(which)`, which the loop turns into the outcome `limit:<which>`. The spent amounts are
a plain model so a resumed run continues from what the crashed one had already used.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from harness.deadline import Deadline
from harness.errors import LimitReached
from harness.types import ModelTurn, Usage

if TYPE_CHECKING:
    from harness.config import LimitsConfig


class Spent(BaseModel):
    """What a run has used so far (persisted in the session state for resume)."""

    model_config = ConfigDict(extra="forbid")

    steps: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    estimated_tokens: int = 0
    """The part of input and output tokens harness counted where the server reported none."""
    cost_usd: float = 0.0
    elapsed_s: float = 0.0
    """Wall-clock seconds of earlier processes of this run (resumes add to it)."""

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class Budget:
    """Meters one run against its limits."""

    def __init__(self, limits: LimitsConfig, spent: Spent | None = None, clock: Callable[[], float] = time.monotonic):
        self.limits = limits
        self._spent = (spent or Spent()).model_copy()
        self._clock = clock
        self._started = clock()

    def spent(self) -> Spent:
        """A copy of the current totals, wall clock included."""
        return self._spent.model_copy(update={"elapsed_s": self.elapsed_s()})

    def elapsed_s(self) -> float:
        return self._spent.elapsed_s + (self._clock() - self._started)

    def charge_turn(self, turn: ModelTurn) -> None:
        """Add a model turn's tokens and cost (retried attempts are already in its cost)."""
        self.charge(turn.usage, turn.cost_usd)

    def charge(self, usage: Usage | None, cost_usd: float) -> None:
        """Add tokens and cost; also used for failed calls, which are billed too."""
        if usage is not None:
            self._spent.input_tokens += usage.input_tokens
            self._spent.output_tokens += usage.output_tokens
            self._spent.cached_input_tokens += usage.cached_input_tokens
            if usage.estimated:
                self._spent.estimated_tokens += usage.input_tokens + usage.output_tokens
        self._spent.cost_usd += cost_usd

    def charge_step(self) -> None:
        """Count one model step."""
        self._spent.steps += 1

    def check(self) -> None:
        """Raise LimitReached for the first spent limit (steps, tokens, cost, wall clock)."""
        limits, spent = self.limits, self._spent
        if spent.steps >= limits.max_steps:
            raise LimitReached("steps", f"{spent.steps} of {limits.max_steps} steps used")
        if limits.max_tokens is not None and spent.tokens >= limits.max_tokens:
            raise LimitReached("tokens", f"{spent.tokens} of {limits.max_tokens} tokens used")
        if limits.max_cost_usd is not None and spent.cost_usd >= limits.max_cost_usd:
            raise LimitReached("cost", f"${spent.cost_usd:.4f} of ${limits.max_cost_usd:.4f} spent")
        if limits.timeout_min is not None and self.elapsed_s() >= limits.timeout_min * 60:
            raise LimitReached("wall_clock", f"{self.elapsed_s():.1f}s elapsed, limit {limits.timeout_min * 60:g}s")

    def deadline(self) -> Deadline:
        """What a call about to start may use of the wall clock; LimitReached("wall_clock") when less
        than `min_call_s` is left (the call would be cut short)."""
        remaining = self.remaining_s()
        if remaining is not None and remaining < self.limits.min_call_s:
            raise LimitReached(
                "wall_clock",
                f"{remaining:.1f}s of the wall clock left, under the {self.limits.min_call_s:g}s a call needs",
            )
        return Deadline(remaining)

    def remaining_s(self) -> float | None:
        """Seconds left on the wall clock, or None when unlimited (to cap a tool call's timeout)."""
        if self.limits.timeout_min is None:
            return None
        return max(0.0, self.limits.timeout_min * 60 - self.elapsed_s())
