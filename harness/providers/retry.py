"""THE retry policy: one tenacity loop around every model call (SDK-internal retries are off).

Retries only errors marked `retryable` (ModelUnavailable: timeouts, connection errors, stalled
streams, 5xx, overloaded; ModelRateLimited: 429 that is not a spend limit). Auth, spend-limit and
context-length errors pass straight through. A server's Retry-After is honoured, also beyond 60 s,
up to `max_retry_after_s`. Budgets: retries per call and per session (one policy per session).
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception

from harness.errors import ModelError, ModelUnreachable, RetryBudgetExhausted
from harness.providers.config import RetryConfig
from harness.providers.pricing import PriceTable
from harness.providers.protocol import Provider
from harness.types import Message, ModelTurn, ToolSchema, Usage

T = TypeVar("T")


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds a server asked us to wait (`retry-after-ms`, `retry-after` seconds or HTTP date)."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(float(millis) / 1000.0, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - datetime.now(UTC)).total_seconds(), 0.0)


def _is_retryable(error: BaseException) -> bool:
    return isinstance(error, ModelError) and error.retryable


class RetryPolicy:
    """Exponential backoff with jitter, Retry-After, and per-call/per-session retry budgets."""

    def __init__(
        self,
        config: RetryConfig | None = None,
        *,
        sleep: Callable[[float], None] = time.sleep,
        rng: Callable[[], float] = random.random,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config or RetryConfig()
        self._clock = clock
        self.session_retries = 0
        self.reached = False
        """Whether any call under this policy got an answer (until then an unreachable endpoint
        gets only `max_retries_unreached` retries)."""
        self.waits: list[float] = []
        """Every wait this policy slept, in order (for reports and tests)."""
        self._sleep = sleep
        self._rng = rng

    def compute_wait(self, error: BaseException, retry_number: int) -> float:
        """Seconds to wait before retry `retry_number` (1-based) after `error`."""
        cfg = self.config
        retry_after = getattr(error, "retry_after", None)
        if retry_after is not None:
            return min(float(retry_after), cfg.max_retry_after_s)
        backoff = min(cfg.initial_backoff_s * 2 ** (retry_number - 1), cfg.max_backoff_s)
        return backoff * (1.0 - cfg.jitter + cfg.jitter * self._rng())

    def now(self) -> float:
        """This policy's clock (deadlines given to `call` are on it)."""
        return self._clock()

    def call(self, attempt: Callable[[], T], deadline: float | None = None) -> tuple[T, list[str]]:
        """Run `attempt` under the policy; return its result and why each retry happened (the
        failed attempt's error, one line each). No retry starts (or waits) past `deadline`."""
        cfg = self.config
        reasons: list[str] = []

        def out_of_time(state: RetryCallState) -> bool:
            return deadline is not None and self._clock() + state.upcoming_sleep >= deadline

        def never_reached(state: RetryCallState) -> bool:
            error = state.outcome.exception() if state.outcome is not None else None
            return (
                not self.reached
                and isinstance(error, ModelUnreachable)
                and (error.nothing_listens or state.attempt_number > cfg.max_retries_unreached)
            )

        def stop(state: RetryCallState) -> bool:  # tenacity computes the wait first: upcoming_sleep is known
            return (
                never_reached(state)
                or state.attempt_number > cfg.max_retries_per_call
                or self.session_retries >= cfg.max_retries_per_session
                or out_of_time(state)
            )

        def wait(state: RetryCallState) -> float:
            error = state.outcome.exception() if state.outcome is not None else None
            return self.compute_wait(error, state.attempt_number) if error is not None else 0.0

        def before_sleep(state: RetryCallState) -> None:
            error = state.outcome.exception() if state.outcome is not None else None
            reasons.append(f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:300])
            self.session_retries += 1
            self.waits.append(state.upcoming_sleep)

        def exhausted(state: RetryCallState) -> T:
            assert state.outcome is not None
            last = state.outcome.exception()
            if never_reached(state) and isinstance(last, ModelUnreachable) and last.nothing_listens:
                raise last
            if never_reached(state):
                why = "the endpoint never answered: check the URL and that its server runs"
            elif (
                state.attempt_number <= cfg.max_retries_per_call and self.session_retries < cfg.max_retries_per_session
            ):
                why = "the next retry would end past the run's wall clock"
            else:
                why = (
                    f"{'session' if self.session_retries >= cfg.max_retries_per_session else 'call'} retry budget spent"
                )
            raise RetryBudgetExhausted(
                f"model call failed after {state.attempt_number} attempts ({why}): {last}", last
            ) from last

        retrying = Retrying(
            retry=retry_if_exception(_is_retryable),
            stop=stop,
            wait=wait,
            sleep=self._sleep,
            before_sleep=before_sleep,
            retry_error_callback=exhausted,
        )
        result = retrying(attempt)
        self.reached = True
        return result, reasons


class RetryingProvider:
    """Wraps a provider in the retry policy and prices every attempt that reported usage."""

    def __init__(self, inner: Provider, policy: RetryPolicy, prices: PriceTable) -> None:
        self.inner = inner
        self.policy = policy
        self.prices = prices
        self.name = inner.name

    def __repr__(self) -> str:
        return f"RetryingProvider({self.name!r})"

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema],
        *,
        max_tokens: int,
        timeout_s: float | None = None,
    ) -> ModelTurn:
        """One model turn, retried per the policy; usage and cost include failed attempts. With
        `timeout_s`, every attempt gets only what is left of it and no retry starts past it."""
        failed_usage = Usage()
        deadline = None if timeout_s is None else self.policy.now() + timeout_s

        def attempt() -> ModelTurn:
            nonlocal failed_usage
            left = None if deadline is None else max(0.001, deadline - self.policy.now())
            try:
                return self.inner.complete(messages, tools, max_tokens=max_tokens, timeout_s=left)
            except ModelError as error:
                if error.usage is not None:
                    failed_usage = failed_usage + error.usage
                raise

        model = getattr(self.inner, "model", "")
        try:
            turn, reasons = self.policy.call(attempt, deadline)
        except ModelError as error:
            raise error.with_usage(failed_usage, self.prices.cost(model, failed_usage).usd) from error.__cause__
        usage = turn.usage + failed_usage
        cost = self.prices.cost(model or turn.model, usage)
        return turn.model_copy(
            update={
                "usage": usage,
                "cost_usd": cost.usd,
                "cost_known": cost.known,
                "retries": len(reasons),
                "retry_reasons": reasons,
            }
        )
