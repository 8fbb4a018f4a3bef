"""openai:MODEL through the real openai SDK against the loopback wire server."""

from __future__ import annotations

import json
import time

import pytest

from harness.errors import (
    ModelAuthError,
    ModelContextLengthError,
    ModelError,
    ModelRateLimited,
    ModelSpendLimitError,
    ModelUnavailable,
    RetryBudgetExhausted,
)
from harness.providers.config import ProviderConfig, RetryConfig
from harness.providers.factory import make_provider
from harness.types import Message, ToolCall
from tests.providers.conftest import KEY, PROMPT, TOOL, stalled_for
from tests.providers.wire_server import Reply, openai_chunk, openai_error, openai_turn, openai_usage, sse_data

pytestmark = pytest.mark.timeout(60)


def provider(wire, sleeps=None, model="gpt-4.1", **config):
    retry = config.pop("retry", RetryConfig(initial_backoff_s=0.01))
    cfg = ProviderConfig(base_url=wire.openai_base_url, retry=retry, **config)
    return make_provider(f"openai:{model}", cfg, api_key=KEY, sleep=sleeps)


def test_fragmented_arguments_are_assembled_and_request_is_streamed(wire):
    args = json.dumps({"path": "pkg/calc.py", "note": "x" * 300})
    wire.push(openai_turn("Reading the file now.", [("call_1", "read_file", args)], pieces=60))
    turn = provider(wire).complete(PROMPT, [TOOL], max_tokens=321)
    assert turn.text == "Reading the file now."
    assert turn.tool_calls == [ToolCall(id="call_1", name="read_file", arguments=json.loads(args))]
    assert turn.stop_reason == "tool_use" and turn.model == "gpt-4.1" and turn.retries == 0
    sent = wire.requests[0]
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.body["stream"] is True and sent.body["stream_options"] == {"include_usage": True}
    assert sent.body["max_tokens"] == 321
    assert sent.body["tools"] == [TOOL.openai()]
    assert sent.body["messages"][0] == {"role": "system", "content": "You fix bugs."}


def test_parallel_calls_interleaved_never_mix(wire):
    a = json.dumps({"path": "a/" + "a" * 200})
    b = json.dumps({"path": "b/" + "b" * 200})
    wire.push(openai_turn("", [("call_a", "read_file", a), ("call_b", "read_file", b)], pieces=25, interleave=True))
    turn = provider(wire).complete(PROMPT, [TOOL], max_tokens=100)
    assert [(c.id, c.arguments) for c in turn.tool_calls] == [("call_a", json.loads(a)), ("call_b", json.loads(b))]


def test_history_with_tool_calls_is_sent_in_openai_form(wire):
    wire.push(openai_turn("done"))
    history = [
        *PROMPT,
        Message(
            role="assistant", content="", tool_calls=[ToolCall(id="c1", name="read_file", arguments={"path": "x"})]
        ),
        Message(role="tool", tool_call_id="c1", name="read_file", content="exit 0\nhello", is_error=False),
    ]
    provider(wire).complete(history, [TOOL], max_tokens=50)
    sent = wire.requests[0].body["messages"]
    assert sent[2] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "x"}'}}
        ],
    }
    assert sent[3] == {"role": "tool", "tool_call_id": "c1", "content": "exit 0\nhello"}


def test_error_event_after_200_is_retried(wire, sleeps):
    broken = Reply(
        events=[
            sse_data(openai_chunk({"content": "Let me"})),
            sse_data({"error": {"message": "upstream overloaded", "type": "server_error"}}),
        ]
    )
    wire.push(broken, openai_turn("fine"))
    turn = provider(wire, sleeps).complete(PROMPT, [TOOL], max_tokens=50)
    assert turn.text == "fine" and turn.retries == 1 and len(sleeps.waits) == 1


def test_stalled_stream_times_out_and_is_retried(wire, sleeps):
    stalled = openai_turn("never finishes", pieces=4, stall_after=2, stall_s=20)
    wire.push(stalled, openai_turn("recovered"))
    started = time.monotonic()
    turn = provider(wire, sleeps, stall_timeout_s=0.5).complete(PROMPT, [TOOL], max_tokens=50)
    assert turn.text == "recovered" and turn.retries == 1
    assert time.monotonic() - started < 10


def test_stalled_stream_without_retries_is_a_timeout(wire, sleeps):
    wire.push(openai_turn("x", stall_after=1, stall_s=20))
    with pytest.raises(RetryBudgetExhausted) as caught:
        provider(wire, sleeps, stall_timeout_s=0.3, retry=RetryConfig(max_retries_per_call=0)).complete(
            PROMPT, [TOOL], max_tokens=50
        )
    assert isinstance(caught.value.last_error, ModelUnavailable)
    assert "stalled" in str(caught.value.last_error)


def test_retry_after_2_is_honoured(wire, sleeps):
    wire.push(
        openai_error(
            429, "Rate limit reached", type="requests", code="rate_limit_exceeded", headers={"retry-after": "2"}
        ),
        openai_turn("ok"),
    )
    turn = provider(wire, sleeps).complete(PROMPT, [TOOL], max_tokens=50)
    assert turn.text == "ok" and sleeps.waits == [2.0]


def test_long_retry_after_is_honoured_beyond_60s_and_capped(wire, sleeps):
    wire.push(
        openai_error(429, "slow down", code="rate_limit_exceeded", headers={"retry-after": "120"}),
        openai_error(429, "slow down", code="rate_limit_exceeded", headers={"retry-after": "7200"}),
        openai_turn("ok"),
    )
    retry = RetryConfig(initial_backoff_s=0.01, max_backoff_s=30, max_retry_after_s=900)
    provider(wire, sleeps, retry=retry).complete(PROMPT, [TOOL], max_tokens=50)
    assert sleeps.waits == [120.0, 900.0]


def test_real_retry_after_wait(wire):
    wire.push(
        openai_error(429, "slow down", code="rate_limit_exceeded", headers={"retry-after": "2"}), openai_turn("ok")
    )
    started = time.monotonic()
    turn = provider(wire).complete(PROMPT, [TOOL], max_tokens=50)
    assert turn.retries == 1 and 1.9 <= time.monotonic() - started < 8


def test_500_storm_exhausts_the_call_budget(wire, sleeps):
    wire.push(*[openai_error(500, "boom", type="server_error") for _ in range(10)])
    with pytest.raises(RetryBudgetExhausted) as caught:
        provider(wire, sleeps, retry=RetryConfig(max_retries_per_call=3, initial_backoff_s=1)).complete(
            PROMPT, [TOOL], max_tokens=50
        )
    assert len(wire.requests) == 4 and len(sleeps.waits) == 3
    assert isinstance(caught.value.last_error, ModelUnavailable)
    assert all(0.5 <= w <= 4 for w in sleeps.waits)  # 1, 2, 4 s with 50% jitter


def test_500_storm_exhausts_the_session_budget(wire, sleeps):
    wire.push(
        *[openai_error(503, "busy", type="server_error") for _ in range(3)],
        openai_turn("ok"),
        *[openai_error(503, "busy", type="server_error") for _ in range(5)],
    )
    p = provider(
        wire, sleeps, retry=RetryConfig(max_retries_per_call=10, max_retries_per_session=4, initial_backoff_s=0)
    )
    assert p.complete(PROMPT, [TOOL], max_tokens=50).retries == 3
    with pytest.raises(RetryBudgetExhausted, match="session"):
        p.complete(PROMPT, [TOOL], max_tokens=50)
    assert len(wire.requests) == 6


def test_401_is_not_retried_and_never_shows_the_key(wire, sleeps):
    wire.push(
        openai_error(
            401,
            f"Incorrect API key provided: {KEY}. Also {KEY[:8]}...",
            type="invalid_request_error",
            code="invalid_api_key",
        )
    )
    p = provider(wire, sleeps)
    with pytest.raises(ModelAuthError) as caught:
        p.complete(PROMPT, [TOOL], max_tokens=50)
    assert len(wire.requests) == 1 and sleeps.waits == []
    shown = f"{caught.value} {caught.value!r} {p!r} {vars(p)}"
    assert KEY not in shown and KEY[:8] not in shown and "401" in str(caught.value)


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (
            openai_error(400, "This model's maximum context length is 128000 tokens.", code="context_length_exceeded"),
            ModelContextLengthError,
        ),
        (
            openai_error(429, "You exceeded your current quota.", type="insufficient_quota", code="insufficient_quota"),
            ModelSpendLimitError,
        ),
        (openai_error(404, "The model does not exist", code="model_not_found"), ModelError),
    ],
)
def test_errors_that_are_never_retried(wire, sleeps, reply, error):
    wire.push(reply)
    with pytest.raises(error) as caught:
        provider(wire, sleeps).complete(PROMPT, [TOOL], max_tokens=50)
    assert not isinstance(caught.value, (ModelRateLimited, ModelUnavailable, RetryBudgetExhausted))
    assert len(wire.requests) == 1 and sleeps.waits == []


def test_malformed_arguments_repaired_or_reported(wire):
    wire.push(
        openai_turn(
            "",
            [
                ("c1", "read_file", "{'path': 'a.py',}"),
                ("c2", "read_file", "path=a.py"),
                ("c3", "read_file", "[1, 2]"),
                ("c4", "read_file", ""),
            ],
            pieces=3,
        )
    )
    calls = provider(wire).complete(PROMPT, [TOOL], max_tokens=50).tool_calls
    assert calls[0].arguments == {"path": "a.py"} and calls[0].parse_error is None
    assert calls[0].raw_arguments == "{'path': 'a.py',}"
    assert calls[1].parse_error == "arguments are not valid JSON" and calls[1].raw_arguments == "path=a.py"
    assert calls[2].parse_error == "arguments must be a JSON object"
    assert calls[3].arguments == {} and calls[3].parse_error is None


def test_truncation_at_max_tokens_is_not_repaired(wire):
    wire.push(openai_turn("", [("c1", "read_file", '{"path": "a.py", "content": "def f')], finish="length"))
    turn = provider(wire).complete(PROMPT, [TOOL], max_tokens=5)
    assert turn.stop_reason == "max_tokens"
    assert turn.tool_calls[0].parse_error == "arguments are cut off at the output-token limit"


def test_empty_turn(wire):
    wire.push(openai_turn(""))
    turn = provider(wire).complete(PROMPT, [TOOL], max_tokens=50)
    assert turn.text == "" and turn.tool_calls == [] and turn.stop_reason == "end_turn"


def test_dropped_stream_is_retried(wire, sleeps):
    wire.push(Reply(events=[sse_data(openai_chunk({"content": "half"}))]), openai_turn("whole"))
    turn = provider(wire, sleeps).complete(PROMPT, [TOOL], max_tokens=50)
    assert turn.text == "whole" and turn.retries == 1


def test_usage_with_cached_tokens_and_cost(wire):
    wire.push(openai_turn("hi", usage=openai_usage(prompt=1_000_000, completion=100_000, cached=400_000)))
    turn = provider(wire).complete(PROMPT, [TOOL], max_tokens=50)
    assert (turn.usage.input_tokens, turn.usage.cached_input_tokens, turn.usage.output_tokens) == (
        1_000_000,
        400_000,
        100_000,
    )
    # gpt-4.1: $2/M input, $0.5/M cached input, $8/M output
    assert turn.cost_known and turn.cost_usd == pytest.approx(0.6 * 2 + 0.4 * 0.5 + 0.1 * 8)


def test_unknown_model_costs_zero_and_is_flagged(wire):
    wire.push(openai_turn("hi", usage=openai_usage(1000, 10)))
    turn = provider(wire, model="my-local-llama-q4").complete(PROMPT, [TOOL], max_tokens=50)
    assert turn.cost_usd == 0 and not turn.cost_known and turn.usage.input_tokens == 1000


def test_price_override_from_config(wire):
    from harness.providers.config import ModelPrice

    wire.push(openai_turn("hi", usage=openai_usage(2_000_000, 1_000_000)))
    prices = {"my-local-llama-q4": ModelPrice(input_per_mtok=0.1, output_per_mtok=0.2)}
    turn = provider(wire, model="my-local-llama-q4", prices=prices).complete(PROMPT, [TOOL], max_tokens=50)
    assert turn.cost_known and turn.cost_usd == pytest.approx(0.4)


def test_connection_refused_is_retryable_then_exhausted(sleeps):
    cfg = ProviderConfig(
        base_url="http://127.0.0.1:9/v1", retry=RetryConfig(max_retries_per_call=2, initial_backoff_s=0)
    )
    with pytest.raises(RetryBudgetExhausted) as caught:
        make_provider("openai:gpt-4.1", cfg, api_key=KEY, sleep=sleeps).complete(PROMPT, [TOOL], max_tokens=50)
    assert isinstance(caught.value.last_error, ModelUnavailable) and len(sleeps.waits) == 2
    assert "127.0.0.1:9" in str(caught.value)


def test_a_call_given_less_time_than_its_stall_timeout_ends_in_that_time(wire, sleeps):
    # The run's wall clock has 0.5 s left: a stalled stream may not hold the call for stall_timeout_s (60 s).
    wire.push(openai_turn("x", stall_after=1, stall_s=20), openai_turn("too late"))
    started = time.monotonic()
    with pytest.raises(RetryBudgetExhausted) as caught:
        provider(wire, sleeps, stall_timeout_s=60).complete(PROMPT, [TOOL], max_tokens=50, timeout_s=0.5)
    assert time.monotonic() - started < 5
    assert "wall clock" in str(caught.value) and isinstance(caught.value.last_error, ModelUnavailable)
    assert 0.3 < stalled_for(caught.value.last_error) <= 0.5
