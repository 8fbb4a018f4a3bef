"""The retry policy's arithmetic and the price table, without a network."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from harness.errors import ModelAuthError, ModelRateLimited, ModelUnavailable, RetryBudgetExhausted
from harness.providers.config import ModelPrice, RetryConfig, redact
from harness.providers.pricing import PriceTable
from harness.providers.retry import RetryPolicy, parse_retry_after
from harness.types import Usage
from tests.providers.conftest import SleepRecorder


def test_backoff_is_exponential_capped_and_jittered():
    cfg = RetryConfig(initial_backoff_s=1, max_backoff_s=10, jitter=0.5)
    low = RetryPolicy(cfg, rng=lambda: 0.0)
    high = RetryPolicy(cfg, rng=lambda: 1.0)
    error = ModelUnavailable("503")
    assert [low.compute_wait(error, n) for n in range(1, 6)] == [0.5, 1, 2, 4, 5]
    assert [high.compute_wait(error, n) for n in range(1, 6)] == [1, 2, 4, 8, 10]


def test_retry_after_wins_over_backoff_and_is_capped():
    policy = RetryPolicy(RetryConfig(max_retry_after_s=300))
    assert policy.compute_wait(ModelRateLimited("429", retry_after=2), 5) == 2
    assert policy.compute_wait(ModelRateLimited("429", retry_after=90), 1) == 90
    assert policy.compute_wait(ModelRateLimited("429", retry_after=86400), 1) == 300


def test_parse_retry_after_forms():
    assert parse_retry_after({"retry-after": "2"}) == 2
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert parse_retry_after({}) is None
    assert parse_retry_after({"retry-after": "soon"}) is None
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=120), usegmt=True)
    assert 110 <= parse_retry_after({"retry-after": when}) <= 121


def test_non_retryable_error_passes_through_at_once():
    sleeps = SleepRecorder()
    calls = []

    def attempt():
        calls.append(1)
        raise ModelAuthError("401")

    with pytest.raises(ModelAuthError):
        RetryPolicy(RetryConfig(), sleep=sleeps).call(attempt)
    assert len(calls) == 1 and sleeps.waits == []


def test_budget_exhausted_carries_last_error():
    errors = iter([ModelUnavailable("first"), ModelUnavailable("second"), ModelUnavailable("last")])

    def attempt():
        raise next(errors)

    with pytest.raises(RetryBudgetExhausted) as caught:
        RetryPolicy(RetryConfig(max_retries_per_call=2, initial_backoff_s=0), sleep=SleepRecorder()).call(attempt)
    assert str(caught.value.last_error) == "last" and "3 attempts" in str(caught.value)


def test_success_reports_retry_count():
    outcomes = iter([ModelUnavailable("x"), ModelRateLimited("y", retry_after=3), "ok"])

    def attempt():
        value = next(outcomes)
        if isinstance(value, Exception):
            raise value
        return value

    sleeps = SleepRecorder()
    policy = RetryPolicy(RetryConfig(initial_backoff_s=1, jitter=0), sleep=sleeps)
    assert policy.call(attempt) == ("ok", ["ModelUnavailable: x", "ModelRateLimited: y"])
    assert sleeps.waits == [1, 3] == policy.waits and policy.session_retries == 2


def test_price_override_splits_cached_and_written_tokens():
    price = ModelPrice(input_per_mtok=3, output_per_mtok=15, cached_input_per_mtok=0.3, cache_write_per_mtok=3.75)
    usage = Usage(
        input_tokens=1_000_000, cached_input_tokens=500_000, cache_write_tokens=100_000, output_tokens=100_000
    )
    cost = PriceTable({"m": price}).cost("m", usage)
    assert cost.known and cost.usd == pytest.approx(0.4 * 3 + 0.5 * 0.3 + 0.1 * 3.75 + 0.1 * 15)


def test_table_prices_known_models_and_flags_unknown_ones():
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000)
    assert PriceTable(vendor="openai").cost("gpt-4.1", usage).usd == pytest.approx(10.0)
    unknown = PriceTable(vendor="openai").cost("qwen-local-7b-q4", usage)
    assert unknown.usd == 0 and not unknown.known
    assert PriceTable().cost("anything", Usage()).known  # nothing used, nothing to price


def test_redact_removes_key_and_its_head():
    key = "sk-proj-abcdef0123456789"
    text = redact(f"bad key {key}; you sent sk-proj-a...789", key)
    assert key not in text and "sk-proj-a" not in text and "[redacted]" in text


def test_the_price_table_is_loaded_only_when_a_price_is_needed():
    # genai-prices takes ~130 ms to import: a scripted or free run must not pay it at start-up.
    probe = (
        "import sys; from harness.providers.factory import make_provider; "
        "make_provider('openai:gpt-4o', api_key='k'); print('genai_prices' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
    assert PriceTable(vendor="openai").cost("gpt-4o", Usage(input_tokens=1000, output_tokens=10)).usd > 0


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_no_retry_waits_or_starts_past_the_deadline():
    clock, sleeps = FakeClock(), []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock.now += seconds

    policy = RetryPolicy(RetryConfig(initial_backoff_s=1.0, jitter=0.0), sleep=sleep, clock=clock)
    attempts = []

    def attempt():
        attempts.append(clock.now)
        clock.now += 2.0  # each attempt takes 2 s
        raise ModelUnavailable("down")

    with pytest.raises(RetryBudgetExhausted) as caught:
        policy.call(attempt, deadline=clock.now + 6.5)
    # 100-102 fails, waits 1 s, 103-105 fails; a 2 s wait would end at 107 > 106.5: no third attempt.
    assert attempts == [100.0, 103.0] and sleeps == [1.0]
    assert "the next retry would end past the run's wall clock" in str(caught.value)
    with pytest.raises(RetryBudgetExhausted) as caught:  # without a deadline the call budget is what ends it
        RetryPolicy(RetryConfig(max_retries_per_call=1), sleep=lambda s: None).call(attempt)
    assert "call retry budget spent" in str(caught.value)


def test_errors_carry_usage_even_with_tblib_pickling_installed():
    """distributed installs tblib's exception pickling; copying an error must not depend on it."""
    from tblib import pickling_support

    from harness.errors import ModelAuthError, ModelUnavailable
    from harness.types import Usage

    pickling_support.install()
    for error in (ModelUnavailable("gone", retry_after=2.0), ModelAuthError("no")):
        made = error.with_usage(Usage(input_tokens=5), 0.25)
        assert type(made) is type(error) and str(made) == str(error) and made.usage.input_tokens == 5
        assert made.cost_usd == 0.25 and error.usage is None
    assert made.__class__ is ModelAuthError
    assert ModelUnavailable("x", retry_after=3).with_usage(None).retry_after == 3
