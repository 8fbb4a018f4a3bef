"""Chat-completions models of today, against real recorded answers (and named fakes where none exists):
the limit field and sampling by model family, a server that refuses the limit field, Gemini's thought
signatures echoed exactly, Ollama's reasoning field."""

from __future__ import annotations

import json

import pytest

from harness.agent.context import Context
from harness.config import ContextConfig
from harness.errors import ModelParameterRejected
from harness.providers.config import ProviderConfig, RetryConfig
from harness.providers.factory import make_provider
from harness.providers.openai_compat import limit_field
from harness.types import ToolSchema
from tests.providers.conftest import KEY, PROMPT, TOOL
from tests.providers.recordings import recording
from tests.providers.wire_server import Reply, gemini_signature_check, openai_chunk, openai_turn, openai_usage, sse_data

pytestmark = pytest.mark.timeout(60)
NO_RETRY = RetryConfig(max_retries_per_call=0)


def chat(wire, model: str, **config):
    settings = ProviderConfig(base_url=wire.openai_base_url, retry=NO_RETRY, **config)
    return make_provider(f"openai:{model}", settings, api_key=KEY)


@pytest.mark.parametrize(
    ("model", "base_url", "field"),
    [
        ("gpt-5", "http://127.0.0.1:1/v1", "max_completion_tokens"),
        ("o4-mini", None, "max_completion_tokens"),
        ("openai/gpt-5-codex", "http://127.0.0.1:1/v1", "max_completion_tokens"),  # behind a router
        ("gpt-4.1", None, "max_completion_tokens"),  # OpenAI's own endpoint deprecates max_tokens
        ("gpt-4.1", "http://127.0.0.1:1/v1", "max_tokens"),
        ("qwen2.5-coder", "http://127.0.0.1:1/v1", "max_tokens"),
    ],
)
def test_the_limit_field_by_model_family(model, base_url, field):
    assert limit_field(ProviderConfig(model=model, base_url=base_url)) == field


def test_gpt5_gets_max_completion_tokens_and_no_temperature(wire):
    case = recording("oa_gpt5_max_completion_tokens")
    wire.push(case.reply())
    turn = chat(wire, "gpt-5").complete([PROMPT[1]], [], max_tokens=500)
    assert turn.text == "4242" and turn.usage.reasoning_tokens == 64 and turn.usage.output_tokens == 75
    body = wire.requests[0].body
    assert body["max_completion_tokens"] == case.request["max_completion_tokens"] == 500
    assert "max_tokens" not in body and "temperature" not in body


def test_a_refused_limit_field_is_swapped_once_and_kept(wire):
    """A new reasoning model harness does not know by name: the recorded 400, then the same request
    with the other field, which the provider keeps using."""
    refusal = recording("oa_400_max_tokens_unsupported")
    wire.push(refusal.reply(), openai_turn("First."), openai_turn("Second."))
    provider = chat(wire, "brand-new-reasoner")
    assert provider.complete(PROMPT, [TOOL], max_tokens=64).text == "First."
    assert provider.complete(PROMPT, [TOOL], max_tokens=64).text == "Second."
    sent = [r.body for r in wire.requests]
    assert "max_tokens" in sent[0] and "max_completion_tokens" not in sent[0]
    assert [("max_completion_tokens" in b, "max_tokens" in b) for b in sent[1:]] == [(True, False), (True, False)]


def test_a_limit_field_set_in_config_is_never_swapped(wire):
    wire.push(recording("oa_400_max_tokens_unsupported").reply())
    with pytest.raises(ModelParameterRejected, match="Use 'max_completion_tokens' instead") as caught:
        chat(wire, "brand-new-reasoner", max_tokens_field="max_tokens").complete(PROMPT, [], max_tokens=64)
    assert caught.value.param == "max_tokens"
    assert len(wire.requests) == 1


def test_gemini_message_level_signature_comes_back_exactly(wire):
    """Gemini 2.5 through its OpenAI-compatible endpoint (recorded): a tool call with id '' and a
    thought signature on the message; the next request carries both fields back unchanged."""
    case = recording("gemini_openai_tool_call_no_id")
    answer = case.decoded()["choices"][0]["message"]
    wire.push(case.reply(), openai_turn("It is noon."))
    tool = ToolSchema(**{k: case.request["tools"][0]["function"][k] for k in ("name", "description", "parameters")})
    provider = chat(wire, "gemini-2.5-pro-preview-05-06")
    context = Context(ContextConfig(), "", "What is the current time?")
    turn = provider.complete(context.prepare([tool]), [tool], max_tokens=100)
    [call] = turn.tool_calls
    assert call.name == "get_current_time" and call.id == "call_0"  # the server sent an empty id
    assert turn.reasoning is not None
    assert turn.reasoning.extra == {
        "extra_content": answer["extra_content"],
        "thought_signature": answer["thought_signature"],
    }
    context.add_turn(turn)
    context.add_tool_result(call, "12:00", is_error=False)
    provider.complete(context.prepare([tool]), [tool], max_tokens=100)
    [assistant] = [m for m in wire.requests[1].body["messages"] if m["role"] == "assistant"]
    assert assistant["extra_content"] == answer["extra_content"]
    assert assistant["thought_signature"] == answer["thought_signature"]


def gemini3_turn() -> Reply:
    """Gemini 3's streamed parallel calls, each with its own signature (a fake: no recording exists)."""
    chunks = [openai_chunk({"role": "assistant", "content": ""}, model="gemini-3-pro")]
    for index, path in enumerate(("a.py", "b.py")):
        fragment = {
            "index": index,
            "id": f"c{index}",
            "type": "function",
            "function": {"name": "read_file", "arguments": json.dumps({"path": path})},
            "extra_content": {"google": {"thought_signature": "sig-read_file"}},
        }
        chunks.append(openai_chunk({"tool_calls": [fragment]}, model="gemini-3-pro"))
    chunks += [openai_chunk({}, finish="tool_calls"), openai_chunk(None, usage=openai_usage())]
    return Reply(events=[sse_data(c) for c in chunks] + [b"data: [DONE]\n\n"])


def test_gemini3_per_call_signatures_survive_the_trajectory_and_a_strict_server(wire, tmp_path):
    from harness.trajectory import Trajectory, TurnRecord, read_records

    wire.require(gemini_signature_check)
    wire.push(gemini3_turn(), openai_turn("Both read."))
    provider = chat(wire, "gemini-3-pro")
    context = Context(ContextConfig(), "", "Read both files.")
    turn = provider.complete(context.prepare([TOOL]), [TOOL], max_tokens=100)
    assert [c.provider_data for c in turn.tool_calls] == [
        {"extra_content": {"google": {"thought_signature": "sig-read_file"}}}
    ] * 2
    # through the trajectory and back (what resume and replay read)
    trajectory = Trajectory(tmp_path)
    trajectory.append(TurnRecord(step=1, turn=turn), durable=True)
    trajectory.close()
    [record] = [r for r in read_records(tmp_path) if r.kind == "turn"]
    context.add_turn(record.turn)
    for call in record.turn.tool_calls:
        context.add_tool_result(call, "x = 1", is_error=False)
    assert provider.complete(context.prepare([TOOL]), [TOOL], max_tokens=100).text == "Both read."


def test_ollama_reasoning_field_is_kept_and_the_tool_call_read(wire):
    case = recording("ollama_cloud_tool_call")
    wire.push(case.reply())
    turn = chat(wire, "gpt-oss:20b").complete(PROMPT, [TOOL], max_tokens=100)
    [call] = turn.tool_calls
    assert call.name == "final_result" and call.arguments == {"city": "Paris", "country": "France"}
    assert turn.stop_reason == "tool_use" and turn.reasoning is not None and "final_result" in turn.reasoning.text
    assert "max_tokens" in wire.requests[0].body  # a compatible server gets the classic field
