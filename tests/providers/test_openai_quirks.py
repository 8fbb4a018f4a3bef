"""What real OpenAI and OpenAI-compatible servers send that the plain protocol does not promise, through
the real openai SDK against the loopback wire server: refusals, error objects inside a 200 stream, a
stream that reaches [DONE] without a finish reason, names repeated in every fragment, a server that
ignores `stream: true`, and reasoning servers that need their reasoning sent back."""

from __future__ import annotations

import json

import pytest

from harness.errors import ModelContextLengthError, ModelError, ModelRateLimited, RetryBudgetExhausted
from harness.providers.config import ProviderConfig, RetryConfig
from harness.providers.factory import make_provider
from harness.types import Message, ModelTurn, Reasoning, ToolCall
from tests.providers.conftest import KEY, PROMPT, TOOL
from tests.providers.wire_server import Reply, openai_chunk, openai_turn, openai_usage, sse_data, sse_event

pytestmark = pytest.mark.timeout(60)
DONE = b"data: [DONE]\n\n"


def provider(wire, sleeps=None, **config):
    retry = config.pop("retry", RetryConfig(initial_backoff_s=0.01, max_retries_per_call=2))
    cfg = ProviderConfig(base_url=wire.openai_base_url, retry=retry, **config)
    return make_provider("openai:test-model", cfg, api_key=KEY, sleep=sleeps or (lambda s: None))


def stream(*chunks: dict, done: bool = True) -> Reply:
    return Reply(events=[sse_data(c) for c in chunks] + ([DONE] if done else []))


def test_a_refusal_reaches_the_turn_with_its_stop_reason(wire):
    wire.push(
        stream(
            openai_chunk({"role": "assistant", "refusal": "I can't help "}),
            openai_chunk({"refusal": "with that."}),
            openai_chunk({}, finish="stop"),
            openai_chunk(None, usage=openai_usage(12, 4)),
        )
    )
    turn = provider(wire).complete(PROMPT, [TOOL], max_tokens=50)
    assert (turn.stop_reason, turn.refusal, turn.text) == (
        "refusal",
        "I can't help with that.",
        "I can't help with that.",
    )
    assert turn.usage.input_tokens == 12


@pytest.mark.parametrize("code", [400, "400"])
def test_an_error_chunk_with_a_4xx_code_is_not_retried_and_keeps_its_usage(wire, code):
    usage = openai_usage(30, 7)
    wire.push(
        stream(
            openai_chunk({"content": "partial"}),
            openai_chunk({}, finish="length"),
            {"error": {"code": code, "message": "Provider returned error"}, "usage": usage},
        )
    )
    with pytest.raises(ModelError) as raised:
        provider(wire).complete(PROMPT, [TOOL], max_tokens=50)
    assert not raised.value.retryable and "400" in str(raised.value) and len(wire.requests) == 1
    assert raised.value.usage is not None and raised.value.usage.input_tokens == 30  # billed, not lost


def test_an_error_chunk_with_a_5xx_code_is_retried(wire):
    wire.push(stream({"error": {"code": 502, "message": "upstream overloaded"}}), openai_turn("fine"))
    turn = provider(wire).complete(PROMPT, [TOOL], max_tokens=50)
    assert turn.text == "fine" and turn.retries == 1 and len(wire.requests) == 2
    assert turn.retry_reasons and "502" in turn.retry_reasons[0]


def test_an_error_chunk_about_the_context_window_is_a_context_error(wire):
    wire.push(stream({"error": {"code": 400, "message": "This model's maximum context length is 8192 tokens"}}))
    with pytest.raises(ModelContextLengthError):
        provider(wire).complete(PROMPT, [TOOL], max_tokens=50)


def test_an_error_chunk_429_is_retried_then_gives_up(wire):
    wire.push(*[stream({"error": {"code": 429, "message": "slow down"}}) for _ in range(3)])
    with pytest.raises(RetryBudgetExhausted) as raised:
        provider(wire).complete(PROMPT, [TOOL], max_tokens=50)
    assert isinstance(raised.value.last_error, ModelRateLimited) and len(wire.requests) == 3


def test_groq_tool_use_failed_becomes_a_malformed_call_fed_back_to_the_model(wire):
    failed = '{"name": "read_file", "arguments": {"path": "a.py"'
    error = {
        "error": {
            "message": "Failed to call a function. Please adjust your prompt.",
            "type": "invalid_request_error",
            "code": "tool_use_failed",
            "failed_generation": failed,
        }
    }
    wire.push(Reply(events=[sse_data(openai_chunk({"role": "assistant", "content": ""})), sse_event("error", error)]))
    turn = provider(wire).complete(PROMPT, [TOOL], max_tokens=50)
    [call] = turn.tool_calls
    assert call.name == "unparsed_tool_call" or call.name == "read_file"
    assert call.parse_error is not None and "could not parse" in call.parse_error and call.raw_arguments == failed
    assert turn.stop_reason == "tool_use" and len(wire.requests) == 1


def test_done_without_a_finish_reason_ends_the_turn(wire):
    head = {"index": 0, "id": "c1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "x"}'}}
    wire.push(stream(openai_chunk({"tool_calls": [head]})), stream(openai_chunk({"content": "all done"})))
    with_call = provider(wire).complete(PROMPT, [TOOL], max_tokens=50)
    assert with_call.stop_reason == "tool_use" and with_call.tool_calls[0].arguments == {"path": "x"}
    text_only = provider(wire).complete(PROMPT, [TOOL], max_tokens=50)
    assert (text_only.stop_reason, text_only.text) == ("end_turn", "all done")
    assert len(wire.requests) == 2, "a stream that reached [DONE] is never retried"


def test_a_stream_cut_before_done_and_finish_is_still_retried(wire):
    wire.push(stream(openai_chunk({"content": "par"}), done=False), openai_turn("whole"))
    assert provider(wire).complete(PROMPT, [TOOL], max_tokens=50).text == "whole" and len(wire.requests) == 2


@pytest.mark.parametrize("name_in_every_fragment", [True, False])
def test_a_name_repeated_in_every_fragment_is_not_concatenated(wire, name_in_every_fragment):
    tool = TOOL.model_copy(update={"name": "llm_version"})
    pieces = ['{"pa', 'th": ', '"x"}']
    frags = [{"index": 0, "id": "c1", "type": "function", "function": {"name": "llm_version", "arguments": ""}}]
    frags += [
        {
            "index": 0,
            "function": {"name": "llm_version", "arguments": p} if name_in_every_fragment else {"arguments": p},
        }
        for p in pieces
    ]
    wire.push(stream(*[openai_chunk({"tool_calls": [f]}) for f in frags], openai_chunk({}, finish="tool_calls")))
    [call] = provider(wire).complete(PROMPT, [tool], max_tokens=50).tool_calls
    assert (call.name, call.arguments) == ("llm_version", {"path": "x"})


def test_a_name_sent_in_pieces_is_joined(wire):
    tool = TOOL.model_copy(update={"name": "read_file"})
    frags = [
        {"index": 0, "id": "c1", "function": {"name": "read_", "arguments": ""}},
        {"index": 0, "function": {"name": "file", "arguments": '{"path": "y"}'}},
    ]
    wire.push(stream(*[openai_chunk({"tool_calls": [f]}) for f in frags], openai_chunk({}, finish="tool_calls")))
    [call] = provider(wire).complete(PROMPT, [tool], max_tokens=50).tool_calls
    assert call.name == "read_file"


def test_a_server_that_ignores_stream_true_is_understood(wire):
    body = {
        "id": "c",
        "object": "chat.completion",
        "model": "local-model",
        "usage": openai_usage(9, 3),
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": "Reading.",
                    "reasoning_content": "I should look first.",
                    "tool_calls": [
                        {
                            "id": "c9",
                            "type": "function",
                            "function": {"name": "read_file", "arguments": '{"path": "z"}'},
                        }
                    ],
                },
            }
        ],
    }
    wire.push(Reply(body=json.dumps(body).encode()))
    turn = provider(wire).complete(PROMPT, [TOOL], max_tokens=50)
    assert (turn.text, turn.stop_reason, turn.model) == ("Reading.", "tool_use", "local-model")
    assert turn.tool_calls == [ToolCall(id="c9", name="read_file", arguments={"path": "z"})]
    assert turn.reasoning == Reasoning(text="I should look first.") and turn.usage.output_tokens == 3
    assert len(wire.requests) == 1


def test_lone_surrogates_from_the_model_are_replaced_and_recorded(wire):
    raw = b'data: {"choices": [{"index": 0, "delta": {"content": "bad \\ud800 text", "tool_calls": [{"index": 0, "id": "c1", "function": {"name": "read_file", "arguments": "{\\"path\\": \\"a\\\\ud800.py\\"}"}}]}, "finish_reason": "tool_calls"}]}\n\n'
    wire.push(Reply(events=[raw, DONE]))
    turn = provider(wire).complete(PROMPT, [TOOL], max_tokens=50)
    assert turn.text == "bad \ufffd text" and turn.tool_calls[0].arguments == {"path": "a\ufffd.py"}
    assert len(turn.repairs) == 2
    turn.model_dump_json()  # serialisable: the trajectory can hold it


def _reasoning_turn(reasoning: str, calls=(), text="") -> Reply:
    chunks = [openai_chunk({"role": "assistant", "reasoning_content": part}) for part in (reasoning[:5], reasoning[5:])]
    for n, (cid, name, args) in enumerate(calls):
        chunks.append(
            openai_chunk({"tool_calls": [{"index": n, "id": cid, "function": {"name": name, "arguments": args}}]})
        )
    if text:
        chunks.append(openai_chunk({"content": text}))
    usage = {**openai_usage(20, 15), "completion_tokens_details": {"reasoning_tokens": 11}}
    chunks += [openai_chunk({}, finish="tool_calls" if calls else "stop"), openai_chunk(None, usage=usage)]
    return stream(*chunks)


def test_reasoning_content_is_kept_counted_and_sent_back_to_deepseek(wire):
    wire.push(_reasoning_turn("Look at calc first.", [("c1", "read_file", '{"path": "calc.py"}')]), openai_turn("ok"))
    deepseek = provider(wire, reasoning_effort="high")
    first = deepseek.complete(PROMPT, [TOOL], max_tokens=50)
    assert first.reasoning == Reasoning(text="Look at calc first.") and first.usage.reasoning_tokens == 11
    assert wire.requests[0].body["reasoning_effort"] == "high"
    history = [
        *PROMPT,
        Message(role="assistant", content=first.text, tool_calls=first.tool_calls, reasoning=first.reasoning),
        Message(role="tool", content="def add(): ...", tool_call_id="c1", name="read_file"),
        Message(role="assistant", content="no reasoning here", tool_calls=[ToolCall(id="c2", name="read_file")]),
    ]
    on_deepseek = make_provider("openai:deepseek-reasoner", ProviderConfig(base_url=wire.openai_base_url), api_key=KEY)
    on_deepseek.complete(history, [TOOL], max_tokens=50)
    sent = [m for m in wire.requests[1].body["messages"] if m["role"] == "assistant"]
    assert sent[0]["reasoning_content"] == "Look at calc first."
    assert sent[1]["reasoning_content"] == "", "DeepSeek refuses a tool-call turn without it, even an empty one"


def test_reasoning_is_never_sent_to_the_official_api(wire):
    wire.push(openai_turn("ok"))
    official = make_provider("openai:gpt-4.1", ProviderConfig(base_url="https://api.openai.com/v1"), api_key=KEY)
    assert official.inner.echo == "never"  # type: ignore[attr-defined]
    history = [
        *PROMPT,
        Message(
            role="assistant",
            content="x",
            reasoning=Reasoning(text="thought"),
            tool_calls=[ToolCall(id="c", name="read_file")],
        ),
    ]
    local = provider(wire, reasoning_echo="never")
    local.complete(history, [TOOL], max_tokens=50)
    assert all("reasoning_content" not in m for m in wire.requests[0].body["messages"])


def test_turn_is_a_model_turn(wire):
    wire.push(openai_turn("x"))
    assert isinstance(provider(wire).complete(PROMPT, [TOOL], max_tokens=5), ModelTurn)


def test_a_default_temperature_is_sent_where_the_model_takes_one(wire):
    wire.push(openai_turn("a"), openai_turn("b"), openai_turn("c"), openai_turn("d"))
    provider(wire).complete(PROMPT, [TOOL], max_tokens=5)
    make_provider("openai:o3-mini", ProviderConfig(base_url=wire.openai_base_url), api_key=KEY).complete(
        PROMPT, [TOOL], max_tokens=5
    )
    provider(wire, reasoning_effort="low").complete(PROMPT, [TOOL], max_tokens=5)
    provider(wire, temperature=None).complete(PROMPT, [TOOL], max_tokens=5)
    sent = [request.body.get("temperature") for request in wire.requests]
    assert sent == [0.2, None, None, None]


def test_the_model_reads_no_durations():
    from harness.agent.context import Context
    from harness.config import ContextConfig

    context = Context(ContextConfig(), "s", "t")
    call = ToolCall(id="c", name="run_tests")
    context.add_tool_result(call, "exit_code=0 status=ok duration=742ms\n--- stdout ---\n4 passed", is_error=False)
    context.add_tool_result(call, "exit_code=0 status=ok duration=803ms\n--- stdout ---\n4 passed", is_error=False)
    first, second = [m.content for m in context.messages() if m.role == "tool"]
    assert first == second == "exit_code=0 status=ok\n--- stdout ---\n4 passed"


@pytest.mark.parametrize(
    "event",
    [
        sse_data({"error": {"message": "bad", "type": "invalid_request_error"}}),
        sse_event("error", {"message": "bad request", "type": "invalid_request_error"}),
        sse_event("error", {"error": {"message": "no such model", "type": "not_found_error"}}),
        sse_data({"error": "tool_use_failed"}),
    ],
)
def test_an_in_band_error_named_a_4xx_is_never_retried_after_a_streamed_answer(wire, event):
    """An error event after some of the answer, with no status number but a type or code that names a
    client error (Groq's, OpenRouter's, vLLM's): one request only (each is billed), then a failed call."""
    wire.push(Reply(events=[sse_data(openai_chunk({"content": "x"})), event]), openai_turn("billed twice"))
    try:
        turn = provider(wire).complete(PROMPT, [TOOL], max_tokens=50)
    except ModelError as error:
        assert not error.retryable
    else:
        assert turn.tool_calls and turn.tool_calls[0].parse_error  # a failed generation, fed back
    assert len(wire.requests) == 1


def test_an_in_band_error_named_a_server_error_is_still_retried(wire):
    wire.push(
        Reply(events=[sse_event("error", {"error": {"message": "busy", "type": "server_error"}})]), openai_turn("ok")
    )
    assert provider(wire).complete(PROMPT, [TOOL], max_tokens=50).text == "ok" and len(wire.requests) == 2
