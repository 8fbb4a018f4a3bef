"""Every cost of a run metered in one place: steps, input+output tokens, USD, wall clock.

The loop charges each model turn and each step here and calls `check()`; a spent limit raises
`LimitReached(which)`, which the loop turns into the outcome `limit:<which>`. The spent amounts are
a plain model so a resumed run continues from what the crashed one had already used.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

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
    """Meters one run against its limits; a sub-agent's budget meters its reserve and charges every
    enclosing budget too (Inspect's stacked limits), so the tree never passes the run's limits."""

    def __init__(
        self,
        limits: LimitsConfig,
        spent: Spent | None = None,
        clock: Callable[[], float] = time.monotonic,
        parent: Budget | None = None,
        halted: Callable[[], bool | str] | None = None,
    ):
        self.limits = limits
        self.halted = halted
        """A sub-agent's or an attempt's: true once the person stopped the run, or another attempt
        verified first (its next check ends it as interrupted); a text says why (`halt_reason`)."""
        self._spent = (spent or Spent()).model_copy()
        self._clock = clock
        self._started = clock()
        self.parent = parent
        self._lock = threading.Lock()  # children at once charge their parent from their threads
        self._children: list[Budget] = []
        """Sub-agents running now: what they have not used of their reserve is not this budget's to give."""

    def check_halted(self) -> None:
        """KeyboardInterrupt once the run was stopped from outside while this budget's agent ran in a
        thread of its own (a sub-agent's, an attempt's)."""
        if self.halted is not None and self.halted():
            raise KeyboardInterrupt

    def halt_reason(self) -> str:
        """Why the run was stopped from outside when its `halted` says (another attempt verified
        first), or ''."""
        said = self.halted() if self.halted is not None else False
        return said if isinstance(said, str) else ""

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
        with self._lock:
            if usage is not None:
                self._spent.input_tokens += usage.input_tokens
                self._spent.output_tokens += usage.output_tokens
                self._spent.cached_input_tokens += usage.cached_input_tokens
                if usage.estimated:
                    self._spent.estimated_tokens += usage.input_tokens + usage.output_tokens
            self._spent.cost_usd += cost_usd
        if self.parent is not None:
            self.parent.charge(usage, cost_usd)

    def charge_step(self) -> None:
        """Count one model step."""
        with self._lock:
            self._spent.steps += 1
        if self.parent is not None:
            self.parent.charge_step()

    def add(self, spent: Spent) -> None:
        """Count what a sub-agent spent in an earlier process of this run (a resume picks it up: this
        budget's own state was saved before the sub-agent started)."""
        with self._lock:
            for name in ("steps", "input_tokens", "output_tokens", "cached_input_tokens", "estimated_tokens"):
                setattr(self._spent, name, getattr(self._spent, name) + getattr(spent, name))
            self._spent.cost_usd += spent.cost_usd
        if self.parent is not None:
            self.parent.add(spent)

    def check(self) -> None:
        """Raise LimitReached for the first spent limit (steps, tokens, cost, wall clock), this budget's
        own first, then every enclosing one's."""
        self.check_halted()
        self._check_own()
        if self.parent is not None:
            self.parent.check()

    def _check_own(self) -> None:
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
        """Seconds left on the wall clock (this budget's and every enclosing one's), or None when
        unlimited (to cap a tool call's timeout)."""
        own = None if self.limits.timeout_min is None else max(0.0, self.limits.timeout_min * 60 - self.elapsed_s())
        above = self.parent.remaining_s() if self.parent is not None else None
        return own if above is None else above if own is None else min(own, above)

    # --- sub-agents -----------------------------------------------------------------------------

    def left(self) -> Reserve:
        """What is left to give a sub-agent: each limit less what is spent and less what the children
        running now have not used of their reserves (None where unlimited)."""
        with self._lock:
            spent, limits, children = self.spent(), self.limits, list(self._children)
        held = [child.unused() for child in children]
        remaining = self.remaining_s()
        return Reserve(
            steps=limits.max_steps - spent.steps - sum(h.steps or 0 for h in held),
            tokens=_less(limits.max_tokens, spent.tokens, [h.tokens for h in held]),
            cost_usd=_less(limits.max_cost_usd, spent.cost_usd, [h.cost_usd for h in held]),
            seconds=None if remaining is None else remaining - sum(h.seconds or 0 for h in held),
        )

    def unused(self) -> Reserve:
        """What this (sub-agent's) budget has not used of its own limits."""
        spent, limits = self.spent(), self.limits
        return Reserve(
            steps=max(0, limits.max_steps - spent.steps),
            tokens=None if limits.max_tokens is None else max(0, limits.max_tokens - spent.tokens),
            cost_usd=None if limits.max_cost_usd is None else max(0.0, limits.max_cost_usd - spent.cost_usd),
            seconds=None if limits.timeout_min is None else max(0.0, limits.timeout_min * 60 - self.elapsed_s()),
        )

    def reserve(
        self, limits: LimitsConfig, spent: Spent | None = None, halted: Callable[[], bool | str] | None = None
    ) -> Budget:
        """A sub-agent's budget with these limits (already taken out of `left()`), held against this
        one until `release`."""
        child = Budget(limits, spent, self._clock, parent=self, halted=halted)
        with self._lock:
            self._children.append(child)
        return child

    def release(self, child: Budget) -> None:
        """A sub-agent ended: what it did not use is this budget's again."""
        with self._lock:
            if child in self._children:
                self._children.remove(child)


class Reserve(BaseModel):
    """Amounts of each limit (steps, tokens, USD, wall-clock seconds); None is unlimited."""

    model_config = ConfigDict(extra="forbid")

    steps: int
    tokens: int | None = None
    cost_usd: float | None = None
    seconds: float | None = None


def _less(limit: float | None, spent: float, held: list[Any]) -> Any:
    if limit is None:
        return None
    return limit - spent - sum(h or 0 for h in held)
