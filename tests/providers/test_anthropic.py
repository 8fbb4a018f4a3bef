"""anthropic:MODEL through the real anthropic SDK against the loopback wire server."""

from __future__ import annotations

import json
import time

import genai_prices
import pytest

from harness.errors import (
    ModelAuthError,
    ModelContextLengthError,
    ModelError,
    ModelSpendLimitError,
    ModelUnavailable,
    RetryBudgetExhausted,
)
from harness.providers.config import ProviderConfig, RetryConfig
from harness.providers.factory import make_provider
from harness.types import Message, ToolCall
from tests.providers.conftest import KEY, PROMPT, TOOL, stalled_for
from tests.providers.wire_server import (
    anthropic_error,
    anthropic_error_event,
    anthropic_events,
    anthropic_turn,
)

pytestmark = pytest.mark.timeout(60)
MODEL = "claude-sonnet-4-6"


def provider(wire, sleeps=None, model=MODEL, **config):
    retry = config.pop("retry", RetryConfig(initial_backoff_s=0.01))
    cfg = ProviderConfig(base_url=wire.anthropic_base_url, retry=retry, **config)
    return make_provider(f"anthropic:{model}", cfg, api_key=KEY, sleep=sleeps)


def test_fragmented_stream_and_request_shape(wire):
    a = json.dumps({"path": "pkg/" + "p" * 300})
    b = json.dumps({"path": "tests/test_calc.py"})
    wire.push(
        anthropic_turn("I will read both files.", [("toolu_a", "read_file", a), ("toolu_b", "read_file", b)], pieces=40)
    )
    history = [
        *PROMPT,
        Message(
            role="assistant",
            content="Running.",
            tool_calls=[
                ToolCall(id="t1", name="read_file", arguments={"path": "x"}),
                ToolCall(id="t2", name="read_file", arguments={"path": "y"}),
            ],
        ),
        Message(role="tool", tool_call_id="t1", name="read_file", content="exit 0"),
        Message(role="tool", tool_call_id="t2", name="read_file", content="no such file", is_error=True),
    ]
    turn = provider(wire).complete(history, [TOOL], max_tokens=77)
    assert turn.text == "I will read both files." and turn.stop_reason == "tool_use"
    assert [(c.id, c.arguments) for c in turn.tool_calls] == [("toolu_a", json.loads(a)), ("toolu_b", json.loads(b))]
    sent = wire.requests[0]
    assert sent.path == "/v1/messages"
    assert KEY in (sent.headers.get("x-api-key"), sent.headers.get("authorization", "").removeprefix("Bearer "))
    body = sent.body
    assert body["system"] == "You fix bugs." and body["stream"] is True and body["max_tokens"] == 77
    assert body["tools"] == [TOOL.anthropic()]
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    # the pinned head (tools + system + task) ends in a prompt-cache breakpoint, and so does the
    # conversation's end (rolling); the assistant turn between carries none
    assert body["messages"][0]["content"] == [
        {"type": "text", "text": "Fix calc.", "cache_control": {"type": "ephemeral"}}
    ]
    assert "cache_control" not in json.dumps(body["messages"][1])

    assert body["messages"][1]["content"][1] == {
        "type": "tool_use",
        "id": "t1",
        "name": "read_file",
        "input": {"path": "x"},
    }
    assert body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "t1", "is_error": False, "content": "exit 0"},
        {
            "type": "tool_result",
            "tool_use_id": "t2",
            "is_error": True,
            "content": "no such file",
            "cache_control": {"type": "ephemeral"},
        },
    ]


def test_overloaded_error_event_after_200_is_retried_and_billed(wire, sleeps):
    partial = anthropic_events("Let me", input_tokens=1000)[:4]  # message_start (usage) .. first text delta
    wire.push(
        anthropic_error_event("overloaded_error", "Overloaded", after=partial),
        anthropic_turn("done", input_tokens=1000, output_tokens=10),
    )
    turn = provider(wire, sleeps).complete(PROMPT, [TOOL], max_tokens=50)
    assert turn.text == "done" and turn.retries == 1 and len(sleeps.waits) == 1
    # the failed attempt reported 1000 input + 1 output tokens at message_start: billed too
    assert (turn.usage.input_tokens, turn.usage.output_tokens) == (2000, 11)


def test_non_retryable_error_event_after_200(wire, sleeps):
    wire.push(anthropic_error_event("invalid_request_error", "bad tool schema"))
    with pytest.raises(ModelError, match="bad tool schema") as caught:
        provider(wire, sleeps).complete(PROMPT, [TOOL], max_tokens=50)
    assert not caught.value.retryable and sleeps.waits == []


def test_529_overloaded_and_429_are_retried(wire, sleeps):
    wire.push(
        anthropic_error(529, "overloaded_error", "Overloaded"),
        anthropic_error(429, "rate_limit_error", "slow down", headers={"retry-after": "2"}),
        anthropic_turn("ok"),
    )
    turn = provider(wire, sleeps).complete(PROMPT, [TOOL], max_tokens=50)
    assert turn.retries == 2 and sleeps.waits[1] == 2.0


def test_500_storm_exhausts_the_budget(wire, sleeps):
    wire.push(*[anthropic_error(500, "api_error", "Internal server error") for _ in range(5)])
    with pytest.raises(RetryBudgetExhausted) as caught:
        provider(wire, sleeps, retry=RetryConfig(max_retries_per_call=2, initial_backoff_s=0)).complete(
            PROMPT, [TOOL], max_tokens=50
        )
    assert len(wire.requests) == 3 and isinstance(caught.value.last_error, ModelUnavailable)


def test_stalled_stream_is_a_retryable_timeout(wire, sleeps):
    """The endpoint's stall limit ends the silence (the wire server is on loopback: `hosted` says which
    limits apply; a local endpoint's stall limit is minutes)."""
    wire.push(anthropic_turn("slow", stall_after=2, stall_s=20), anthropic_turn("fast"))
    started = time.monotonic()
    turn = provider(wire, sleeps, stall_timeout_s=0.4, endpoint="hosted").complete(PROMPT, [TOOL], max_tokens=50)
    assert turn.text == "fast" and turn.retries == 1
    assert time.monotonic() - started < 10, "the stall limit, not the server's silence, ended the first try"


def test_401_never_shows_the_key(wire, sleeps):
    wire.push(anthropic_error(401, "authentication_error", f"invalid x-api-key {KEY}"))
    p = provider(wire, sleeps)
    with pytest.raises(ModelAuthError) as caught:
        p.complete(PROMPT, [TOOL], max_tokens=50)
    assert KEY not in f"{caught.value} {caught.value!r} {p!r}" and len(wire.requests) == 1


@pytest.mark.parametrize(
    ("reply", "error"),
    [
        (
            anthropic_error(400, "invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum"),
            ModelContextLengthError,
        ),
        (
            anthropic_error(400, "invalid_request_error", "Your credit balance is too low to access the API."),
            ModelSpendLimitError,
        ),
        (
            anthropic_error(413, "request_too_large", "Request exceeds the maximum allowed number of bytes."),
            ModelContextLengthError,
        ),
    ],
)
def test_errors_that_are_never_retried(wire, sleeps, reply, error):
    wire.push(reply)
    with pytest.raises(error):
        provider(wire, sleeps).complete(PROMPT, [TOOL], max_tokens=50)
    assert len(wire.requests) == 1 and sleeps.waits == []


def test_truncation_at_max_tokens(wire):
    wire.push(
        anthropic_turn("", [("toolu_1", "read_file", '{"path": "a.py", "content": "x')], stop_reason="max_tokens")
    )
    turn = provider(wire).complete(PROMPT, [TOOL], max_tokens=5)
    assert turn.stop_reason == "max_tokens" and turn.tool_calls[0].parse_error is not None


def test_malformed_arguments_repaired(wire):
    wire.push(anthropic_turn("", [("toolu_1", "read_file", '{"path": "a.py",}'), ("toolu_2", "read_file", "nope")]))
    calls = provider(wire).complete(PROMPT, [TOOL], max_tokens=50).tool_calls
    assert calls[0].arguments == {"path": "a.py"} and calls[1].parse_error == "arguments are not valid JSON"


def test_empty_turn(wire):
    wire.push(anthropic_turn(""))
    turn = provider(wire).complete(PROMPT, [TOOL], max_tokens=50)
    assert turn.text == "" and turn.tool_calls == [] and turn.stop_reason == "end_turn"


def test_usage_with_cached_tokens_is_normalised(wire):
    wire.push(anthropic_turn("hi", input_tokens=100, cache_read=9000, cache_write=500, output_tokens=40))
    turn = provider(wire).complete(PROMPT, [TOOL], max_tokens=50)
    u = turn.usage
    # Anthropic's input_tokens excludes cache reads/writes; ours includes them
    assert (u.input_tokens, u.cached_input_tokens, u.cache_write_tokens, u.output_tokens) == (9600, 9000, 500, 40)
    expected = genai_prices.calc_price(
        genai_prices.Usage(input_tokens=9600, cache_read_tokens=9000, cache_write_tokens=500, output_tokens=40),
        MODEL,
        provider_id="anthropic",
    ).total_price
    assert turn.cost_known and turn.cost_usd == pytest.approx(float(expected)) and turn.cost_usd > 0


def test_a_call_given_less_time_than_its_stall_timeout_ends_in_that_time(wire, sleeps):
    wire.push(anthropic_turn("slow", stall_after=1, stall_s=20), anthropic_turn("too late"))
    started = time.monotonic()
    with pytest.raises(RetryBudgetExhausted) as caught:
        provider(wire, sleeps, stall_timeout_s=60).complete(PROMPT, [TOOL], max_tokens=50, timeout_s=0.5)
    assert time.monotonic() - started < 5
    assert "wall clock" in str(caught.value) and 0.3 < stalled_for(caught.value.last_error) <= 0.5
