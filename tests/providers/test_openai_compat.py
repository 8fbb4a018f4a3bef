"""openai:MODEL through the real openai SDK against the loopback wire server."""

from __future__ import annotations

import json
import time

import pytest

from harness.errors import (
    ConfigError,
    ModelAuthError,
    ModelContextLengthError,
    ModelError,
    ModelRateLimited,
    ModelSpendLimitError,
    ModelUnavailable,
    ModelUnreachable,
    RetryBudgetExhausted,
)
from harness.providers.config import LocalTimeouts, ProviderConfig, RetryConfig
from harness.providers.factory import make_provider
from harness.types import Message, ToolCall
from tests.providers.conftest import KEY, PROMPT, TOOL, stalled_for
from tests.providers.wire_server import (
    Reply,
    WireServer,
    openai_chunk,
    openai_error,
    openai_turn,
    openai_usage,
    sse_data,
)

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
    """A tool-call turn without text carries null content (OpenAI's form); to a local server "" (the
    one llama.cpp's Python server takes)."""
    wire.push(openai_turn("done"), openai_turn("done"))
    history = [
        *PROMPT,
        Message(
            role="assistant", content="", tool_calls=[ToolCall(id="c1", name="read_file", arguments={"path": "x"})]
        ),
        Message(role="tool", tool_call_id="c1", name="read_file", content="exit 0\nhello", is_error=False),
    ]
    provider(wire, endpoint="hosted").complete(history, [TOOL], max_tokens=50)
    provider(wire).complete(history, [TOOL], max_tokens=50)
    assert wire.requests[1].body["messages"][2]["content"] == ""
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
    turn = provider(wire, sleeps, stall_timeout_s=0.5, endpoint="hosted").complete(PROMPT, [TOOL], max_tokens=50)
    assert turn.text == "recovered" and turn.retries == 1
    assert time.monotonic() - started < 10


def test_stalled_stream_without_retries_is_a_timeout(wire, sleeps):
    wire.push(openai_turn("x", stall_after=1, stall_s=20))
    with pytest.raises(RetryBudgetExhausted) as caught:
        provider(
            wire, sleeps, stall_timeout_s=0.3, endpoint="hosted", retry=RetryConfig(max_retries_per_call=0)
        ).complete(PROMPT, [TOOL], max_tokens=50)
    assert isinstance(caught.value.last_error, ModelUnavailable)
    assert "stalled (no data for 0.3s, the endpoint's stall limit)" in str(caught.value.last_error)


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


def test_a_loopback_port_nothing_listens_on_is_said_at_once_and_retried_once_it_answered(sleeps):
    """Before the endpoint ever answered, a refused loopback port is a server not started (or a wrong
    port): said at once, never retried. A server that answered and then refuses (restarting
    mid-run) gets the usual retries."""
    cfg = ProviderConfig(
        base_url="http://127.0.0.1:9/v1", retry=RetryConfig(max_retries_per_call=2, initial_backoff_s=0)
    )
    with pytest.raises(ModelUnreachable, match=r"^nothing listens on 127\.0\.0\.1:9 \(the model server of"):
        make_provider("openai:gpt-4.1", cfg, api_key=KEY, sleep=sleeps).complete(PROMPT, [TOOL], max_tokens=50)
    assert sleeps.waits == []
    with WireServer() as server:
        server.push(openai_turn("up"))
        cfg = cfg.model_copy(update={"base_url": server.openai_base_url})
        model = make_provider("openai:gpt-4.1", cfg, api_key=KEY, sleep=sleeps)
        assert model.complete(PROMPT, [TOOL], max_tokens=50).text == "up"
    with pytest.raises(RetryBudgetExhausted) as caught:  # the server is gone now: its port refuses
        model.complete(PROMPT, [TOOL], max_tokens=50)
    assert isinstance(caught.value.last_error, ModelUnreachable) and len(sleeps.waits) == 2
    assert "nothing listens on 127.0.0.1:" in str(caught.value)


def test_a_local_server_gets_its_first_token_limit_then_its_stall_limit(wire, sleeps):
    """A loopback endpoint is local: the wait before its answer starts (a CPU model reading the
    prompt) has the first-token limit, each silence after it the stall limit, and a timeout says which."""
    local = LocalTimeouts(first_token_timeout_s=5, stall_timeout_s=0.4)
    once = RetryConfig(max_retries_per_call=0)
    wire.push(openai_turn("thought long", delay_s=1.2))  # longer than the stall limit, shorter than the first token's
    assert provider(wire, sleeps, local=local, stall_timeout_s=0.1).complete(PROMPT, [TOOL], max_tokens=50).text == (
        "thought long"
    )
    wire.push(openai_turn("then stalled", pieces=4, stall_after=2, stall_s=20))
    with pytest.raises(RetryBudgetExhausted) as caught:
        provider(wire, sleeps, local=local, retry=once).complete(PROMPT, [TOOL], max_tokens=50)
    assert "(no data for 0.4s, the local server's stall limit)" in str(caught.value)
    wire.push(openai_turn("too slow to start", delay_s=20))
    slow = local.model_copy(update={"first_token_timeout_s": 0.5})
    with pytest.raises(RetryBudgetExhausted) as caught:
        provider(wire, sleeps, local=slow, retry=once).complete(PROMPT, [TOOL], max_tokens=50)
    assert "its answer did not start within the local server's first-token limit of 0.5s" in str(caught.value)


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("http://127.0.0.1:8080/v1", True),
        ("http://localhost:11434/v1", True),
        ("http://[::1]:8000/v1", True),
        ("http://192.168.1.20:8000/v1", True),
        ("http://10.0.0.7/v1", True),
        ("http://ollama:11434/v1", True),  # a container's service name
        ("https://api.openai.com/v1", False),
        ("https://api.deepseek.com", False),
        ("http://8.8.8.8:8000/v1", False),
        (None, False),
    ],
)
def test_which_endpoints_are_local(url, local):
    config = ProviderConfig(base_url=url)
    assert config.is_local() is local
    assert config.timeouts().first_token_s == (900.0 if local else 60.0)
    assert ProviderConfig(base_url=url, endpoint="hosted").timeouts().local is False
    assert ProviderConfig(base_url=url, endpoint="local").timeouts().stall_s == 300.0


def test_a_call_given_less_time_than_its_stall_timeout_ends_in_that_time(wire, sleeps):
    # The run's wall clock has 0.5 s left: a stalled stream may not hold the call for stall_timeout_s (60 s).
    wire.push(openai_turn("x", stall_after=1, stall_s=20), openai_turn("too late"))
    started = time.monotonic()
    with pytest.raises(RetryBudgetExhausted) as caught:
        provider(wire, sleeps, stall_timeout_s=60).complete(PROMPT, [TOOL], max_tokens=50, timeout_s=0.5)
    assert time.monotonic() - started < 5
    assert "wall clock" in str(caught.value) and isinstance(caught.value.last_error, ModelUnavailable)
    assert 0.3 < stalled_for(caught.value.last_error) <= 0.5


def test_a_turn_whose_server_reports_no_usage_is_counted_and_marked_estimated(wire):
    """A local server that sends no usage (llama.cpp's Python server) counts with its own tokenizer:
    llama-cpp-python's route, else llama.cpp's; a hosted endpoint is never asked and gets harness's
    estimate. Never a silent zero."""
    wire.routes["/extras/tokenize/count"] = Reply(body=b'{"count": 41}')
    wire.push(openai_turn("Reading it.", [("c1", "read_file", '{"path": "calc.py"}')], no_usage=True))
    turn = provider(wire).complete(PROMPT, [TOOL], max_tokens=50)
    assert (turn.usage.input_tokens, turn.usage.output_tokens, turn.usage.estimated) == (41, 41, True)
    prompt, answer = (r.body["input"] for r in wire.counts)
    assert PROMPT[-1].content in prompt and TOOL.name in prompt and "Reading it." in answer and "calc.py" in answer
    del wire.routes["/extras/tokenize/count"]
    wire.routes["/tokenize"] = Reply(body=json.dumps({"tokens": list(range(9))}).encode())
    wire.push(openai_turn("Done.", no_usage=True), openai_turn("Again.", no_usage=True))
    model = provider(wire)
    assert model.complete(PROMPT, [TOOL], max_tokens=50).usage.input_tokens == 9
    asked = len(wire.counts)
    assert model.complete(PROMPT, [TOOL], max_tokens=50).usage.output_tokens == 9
    assert [r.path for r in wire.counts[asked:]] == ["/tokenize", "/tokenize"]  # the route found is remembered
    wire.push(openai_turn("Hosted.", no_usage=True), openai_turn("Reported."))
    before = len(wire.counts)
    hosted = provider(wire, endpoint="hosted").complete(PROMPT, [TOOL], max_tokens=50)
    assert len(wire.counts) == before and hosted.usage.estimated and hosted.usage.output_tokens == 2  # "Hosted." / 4
    assert hosted.usage.input_tokens > 0
    reported = provider(wire).complete(PROMPT, [TOOL], max_tokens=50)
    assert not reported.usage.estimated and len(wire.counts) == before


def test_force_tool_makes_the_first_turns_call_a_tool(wire):
    """`force_tool` (for small local models that answer in prose): the first turns name the tool in
    `tool_choice`, later ones leave the choice to the model; a name that is no tool is a config error."""
    wire.push(openai_turn("a"), openai_turn("b"), openai_turn("c"))
    model = provider(wire, force_tool="read_file", force_tool_turns=1)
    model.complete(PROMPT, [TOOL], max_tokens=50)
    later = [*PROMPT, Message(role="assistant", content="a"), Message(role="user", content="go on")]
    model.complete(later, [TOOL], max_tokens=50)
    provider(wire, force_tool="required", force_tool_turns=2).complete(later, [TOOL], max_tokens=50)
    first, second, third = (r.body for r in wire.requests)
    assert first["tool_choice"] == {"type": "function", "function": {"name": "read_file"}}
    assert "tool_choice" not in second and third["tool_choice"] == "required"
    with pytest.raises(ConfigError, match="force_tool names 'write_file', which is no tool of this run"):
        provider(wire, force_tool="write_file").complete(PROMPT, [TOOL], max_tokens=50)


def test_rollout_asks_for_each_tokens_logprob_and_id_and_keeps_them_beside_the_turn(wire):
    """`--rollout`: the request asks for log-probabilities (and ids, which vLLM and SGLang answer); what
    the stream carries per token is kept in order, ids where given; nothing malformed is guessed at;
    and none of it is part of the message the conversation keeps."""

    def chunk(text: str, logprob: float, ids: list[int]) -> dict:
        piece = openai_chunk({"content": text})
        piece["choices"][0]["logprobs"] = {"content": [{"token": text, "logprob": logprob, "top_logprobs": []}]}
        piece["choices"][0]["token_ids"] = ids
        return piece

    first = {**chunk("Hel", -0.5, [9906]), "prompt_token_ids": [1, 2, 3]}
    odd = openai_chunk({"content": "!"})
    odd["choices"][0]["logprobs"] = {"content": [{"token": 7, "logprob": "x"}]}  # malformed: left out
    events = [
        first,
        chunk("lo", -0.25, [385]),
        odd,
        openai_chunk({}, finish="stop"),
        openai_chunk(usage=openai_usage(10, 3)),
    ]
    wire.push(Reply(events=[*map(sse_data, events), b"data: [DONE]\n\n"]))
    turn = provider(wire, rollout=True).complete(PROMPT, [TOOL], max_tokens=50)
    sent = wire.requests[0].body
    assert (sent["logprobs"], sent["top_logprobs"], sent["return_token_ids"]) == (True, 1, True)
    assert turn.text == "Hello!" and turn.rollout is not None
    assert (turn.rollout.tokens, turn.rollout.logprobs) == (["Hel", "lo"], [-0.5, -0.25])
    assert (turn.rollout.completion_ids, turn.rollout.prompt_ids) == ([9906, 385], [1, 2, 3])
    wire.push(openai_turn("plain"))
    plain = provider(wire).complete(PROMPT, [TOOL], max_tokens=50)
    assert plain.rollout is None and "logprobs" not in wire.requests[1].body
    assert "rollout" not in plain.model_dump(), "left out of the record when there is none"
