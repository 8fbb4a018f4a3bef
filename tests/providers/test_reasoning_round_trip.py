"""Reasoning models, the whole round trip for both protocols: a tool-call turn with reasoning, its tool
result, the next request, against strict servers that refuse the next request when the reasoning is
not sent back as their protocol requires (DeepSeek's reasoning_content, Anthropic's signed thinking
blocks). Also a server that ignores `stream: true` on the Anthropic side."""

from __future__ import annotations

import json

import pytest

from harness.agent.context import Context
from harness.config import ContextConfig
from harness.providers.config import ProviderConfig, RetryConfig
from harness.providers.factory import make_provider
from harness.types import Message, Reasoning, ToolCall
from tests.providers.conftest import KEY, PROMPT, TOOL
from tests.providers.wire_server import (
    Reply,
    anthropic_thinking_check,
    anthropic_turn,
    deepseek_thinking_check,
    openai_chunk,
    openai_turn,
    openai_usage,
    sse_data,
)

pytestmark = pytest.mark.timeout(60)
NO_RETRY = RetryConfig(max_retries_per_call=0)


def _continue(context: Context, turn, result: str) -> list[Message]:
    """What the loop does between two model calls: the turn, then each call's result."""
    context.add_turn(turn)
    for call in turn.tool_calls:
        context.add_tool_result(call, result, is_error=False)
    return context.prepare([TOOL])


def test_deepseek_reasoning_goes_back_and_the_strict_server_accepts_the_next_turn(wire):
    wire.require(deepseek_thinking_check)
    chunks = [
        openai_chunk({"role": "assistant", "reasoning_content": "Need to read calc.py first."}),
        openai_chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "c1", "function": {"name": "read_file", "arguments": '{"path": "calc.py"}'}}
                ]
            }
        ),
        openai_chunk({}, finish="tool_calls"),
        openai_chunk(None, usage=openai_usage(40, 30)),
    ]
    wire.push(Reply(events=[sse_data(c) for c in chunks] + [b"data: [DONE]\n\n"]), openai_turn("Fixed."))
    model = make_provider(
        "openai:deepseek-reasoner", ProviderConfig(base_url=wire.openai_base_url, retry=NO_RETRY), api_key=KEY
    )
    context = Context(ContextConfig(), "You fix bugs.", "Fix calc.")
    first = model.complete(context.prepare([TOOL]), [TOOL], max_tokens=100)
    assert first.reasoning == Reasoning(text="Need to read calc.py first.")
    second = model.complete(_continue(context, first, "def add(a, b): return a - b"), [TOOL], max_tokens=100)
    assert second.text == "Fixed." and len(wire.requests) == 2
    [assistant] = [m for m in wire.requests[1].body["messages"] if m["role"] == "assistant"]
    assert assistant["reasoning_content"] == "Need to read calc.py first."


def test_without_the_echo_deepseek_refuses_as_it_really_does(wire):
    wire.require(deepseek_thinking_check)
    wire.push(openai_turn("unused"))
    history = [
        *PROMPT,
        Message(role="assistant", content="", tool_calls=[ToolCall(id="c1", name="read_file")]),
        Message(role="tool", content="...", tool_call_id="c1", name="read_file"),
    ]
    model = make_provider(
        "openai:deepseek-reasoner",
        ProviderConfig(base_url=wire.openai_base_url, retry=NO_RETRY, reasoning_echo="never"),
        api_key=KEY,
    )
    with pytest.raises(Exception, match="reasoning_content in the thinking mode"):
        model.complete(history, [TOOL], max_tokens=100)


def test_anthropic_thinking_blocks_go_back_unchanged_and_first(wire):
    wire.require(anthropic_thinking_check)
    thinking = [{"thinking": "The sign in add() looks wrong.", "signature": "sig-abc123"}, {"redacted": "opaque=="}]
    wire.push(
        anthropic_turn("Reading.", [("toolu_1", "read_file", '{"path": "calc.py"}')], thinking=thinking),
        anthropic_turn("Fixed it."),
    )
    model = make_provider(
        "anthropic:claude-sonnet-4-5",  # a model of the budget form (4.6 and later think adaptively)
        ProviderConfig(base_url=wire.anthropic_base_url, retry=NO_RETRY, reasoning_effort="medium"),
        api_key=KEY,
    )
    context = Context(ContextConfig(), "You fix bugs.", "Fix calc.")
    first = model.complete(context.prepare([TOOL]), [TOOL], max_tokens=1000)
    assert first.reasoning is not None and first.reasoning.text == "The sign in add() looks wrong."
    assert first.reasoning.blocks == [
        {"type": "thinking", "thinking": "The sign in add() looks wrong.", "signature": "sig-abc123"},
        {"type": "redacted_thinking", "data": "opaque=="},
    ]
    sent = wire.requests[0].body
    assert sent["thinking"] == {"type": "enabled", "budget_tokens": 4096} and sent["max_tokens"] > 4096
    # thinking between tool calls (interleaved), which budget-thinking Claude 4 models need a beta for
    assert wire.requests[0].headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"
    second = model.complete(_continue(context, first, "def add(a, b): return a - b"), [TOOL], max_tokens=1000)
    assert second.text == "Fixed it."
    [assistant] = [m for m in wire.requests[1].body["messages"] if m["role"] == "assistant"]
    assert assistant["content"][:2] == first.reasoning.blocks
    assert [b["type"] for b in assistant["content"][2:]] == ["text", "tool_use"]


def test_anthropic_refuses_a_tool_turn_without_its_thinking(wire):
    wire.require(anthropic_thinking_check)
    history = [
        *PROMPT,
        Message(role="assistant", content="", tool_calls=[ToolCall(id="t1", name="read_file")]),
        Message(role="tool", content="...", tool_call_id="t1", name="read_file"),
    ]
    model = make_provider(
        "anthropic:claude-sonnet-4-6",
        ProviderConfig(base_url=wire.anthropic_base_url, retry=NO_RETRY, reasoning_effort="low"),
        api_key=KEY,
    )
    with pytest.raises(Exception, match="Expected `thinking`"):
        model.complete(history, [TOOL], max_tokens=1000)


def test_folding_never_drops_the_reasoning_a_protocol_needs():
    context = Context(ContextConfig(budget_tokens=1000, fold_at=0.5, keep_recent=0), "system", "task")
    reasoning = Reasoning(text="why", blocks=[{"type": "thinking", "thinking": "why", "signature": "sig-1"}])
    from harness.types import ModelTurn

    for n in range(6):
        turn = ModelTurn(
            tool_calls=[ToolCall(id=f"c{n}", name="read_file", arguments={"path": "a"})], reasoning=reasoning
        )
        context.add_turn(turn)
        context.add_tool_result(turn.tool_calls[0], "x" * 600, is_error=False)
    messages = context.prepare([TOOL])
    assistants = [m for m in messages if m.role == "assistant"]
    assert len(assistants) == 6 and all(m.reasoning == reasoning for m in assistants)


def test_anthropic_server_that_ignores_stream_true(wire):
    body = {
        "id": "msg",
        "type": "message",
        "role": "assistant",
        "model": "claude-local",
        "stop_reason": "tool_use",
        "content": [
            {"type": "thinking", "thinking": "hm", "signature": "sig-9"},
            {"type": "text", "text": "Reading."},
            {"type": "tool_use", "id": "toolu_9", "name": "read_file", "input": {"path": "z"}},
        ],
        "usage": {"input_tokens": 11, "output_tokens": 4},
    }
    wire.push(Reply(body=json.dumps(body).encode()))
    turn = make_provider(
        "anthropic:claude-local", ProviderConfig(base_url=wire.anthropic_base_url, retry=NO_RETRY), api_key=KEY
    ).complete(PROMPT, [TOOL], max_tokens=100)
    assert (turn.text, turn.stop_reason, turn.model) == ("Reading.", "tool_use", "claude-local")
    assert turn.tool_calls == [ToolCall(id="toolu_9", name="read_file", arguments={"path": "z"})]
    assert turn.reasoning is not None and turn.reasoning.blocks[0]["signature"] == "sig-9"
    assert len(wire.requests) == 1
