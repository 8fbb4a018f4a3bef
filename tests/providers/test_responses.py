"""`openai-responses:` against real recorded Responses API answers (streams and JSON) replayed into the
real `openai` SDK, with request-side checks against the requests recorded with them; the whole round
trip of encrypted reasoning with `store: false`; in-stream errors classified like HTTP statuses."""

from __future__ import annotations

import json

import pytest

from harness.agent.context import Context
from harness.config import ContextConfig
from harness.errors import ModelAuthError, ModelSpendLimitError, RetryBudgetExhausted
from harness.providers.config import ProviderConfig, RetryConfig
from harness.providers.factory import make_provider
from harness.types import ModelTurn, ToolSchema
from tests.providers.conftest import KEY, PROMPT, TOOL
from tests.providers.recordings import recording
from tests.providers.wire_server import Reply, responses_reasoning_check, responses_turn

pytestmark = pytest.mark.timeout(60)
NO_RETRY = RetryConfig(max_retries_per_call=0)


def responses(wire, model: str = "gpt-4o", **config):
    settings = ProviderConfig(base_url=wire.openai_base_url, retry=NO_RETRY, **config)
    return make_provider(f"openai-responses:{model}", settings, api_key=KEY)


def tools_of(recorded: dict) -> list[ToolSchema]:
    return [
        ToolSchema(name=t["name"], description=t["description"], parameters=t["parameters"]) for t in recorded["tools"]
    ]


def test_a_streamed_text_answer_and_the_request_shape(wire):
    case = recording("resp_stream_text")
    wire.push(case.reply())
    turn = responses(wire).complete(PROMPT, [TOOL], max_tokens=300)
    deltas = [
        json.loads(line[6:])["delta"]
        for line in case.body.decode().splitlines()
        if line.startswith("data: ") and '"response.output_text.delta"' in line
    ]
    assert turn.text == "".join(deltas) and turn.stop_reason == "end_turn" and not turn.tool_calls
    assert turn.usage.input_tokens > 0 and turn.usage.output_tokens > 0 and turn.model.startswith("gpt-4o")
    assert turn.cost_known and turn.cost_usd > 0  # priced from the OpenAI table
    sent = wire.requests[0]
    assert sent.path == "/v1/responses" and sent.headers["authorization"] == f"Bearer {KEY}"
    body = sent.body
    assert body["store"] is False and body["stream"] is True and body["max_output_tokens"] == 300
    assert body["instructions"] == "You fix bugs." and body["input"] == [{"role": "user", "content": "Fix calc."}]
    assert body["tools"] == [
        {"type": "function", "name": "read_file", "description": TOOL.description, "parameters": TOOL.parameters}
    ]
    assert "include" not in body and "reasoning" not in body and body["temperature"] == 0.2  # not a reasoning model


def test_parallel_function_calls_are_assembled_by_output_index(wire):
    wire.push(recording("resp_stream_parallel_tools").reply())
    turn = responses(wire).complete(PROMPT, [TOOL], max_tokens=300)
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [
        ("secret_retrieval_tool", {"password": "mellon"}),
        ("secret_retrieval_tool", {"password": "radiance"}),
    ]
    assert turn.stop_reason == "tool_use" and len({c.id for c in turn.tool_calls}) == 2
    assert all(c.id.startswith("call_") for c in turn.tool_calls)


def test_a_response_cut_at_max_output_tokens_is_a_max_tokens_stop(wire):
    wire.push(recording("resp_stream_incomplete_max_output").reply())
    turn = responses(wire).complete(PROMPT, [], max_tokens=50)
    assert turn.stop_reason == "max_tokens" and turn.text.startswith("Sure! Here is a list")


def test_a_reasoning_model_asks_for_encrypted_reasoning_and_sends_no_temperature(wire):
    case = recording("resp_stream_tool_store_false")
    wire.push(case.reply())
    provider = responses(wire, "gpt-5.5", reasoning_effort="low")
    prompt = [PROMPT[0], PROMPT[1].model_copy(update={"content": case.request["input"][0]["content"]})]
    turn = provider.complete(prompt, tools_of(case.request), max_tokens=500)
    assert [(c.id, c.name, c.arguments) for c in turn.tool_calls] == [
        ("call_sVidsfFJ6zlzRpelrPkTPlpd", "multiply", {"a": 1231, "b": 2331})
    ]
    body = wire.requests[0].body
    for field in ("include", "store", "stream", "tools", "input"):
        assert body[field] == case.request[field], field
    assert body["reasoning"]["effort"] == case.request["reasoning"]["effort"]
    assert "temperature" not in body


def test_encrypted_reasoning_goes_back_whole_before_its_function_call(wire):
    """The recorded pair: the first answer's reasoning item and call, then the second request as the
    recording's own client sent it (reasoning item, function call, its output, in that order)."""
    first, second = recording("resp_json_encrypted_reasoning_tool"), recording("resp_json_encrypted_reasoning_echo")
    wire.push(first.reply(), second.reply())
    provider = responses(wire, "gpt-5.5", reasoning_effort="high")
    tools = tools_of(first.request)
    context = Context(ContextConfig(), "", first.request["input"][0]["content"])
    turn = provider.complete(context.prepare(tools), tools, max_tokens=1000)
    assert turn.reasoning is not None and turn.usage.reasoning_tokens == 63
    [item] = [b for b in turn.reasoning.blocks if b["type"] == "reasoning"]
    assert item["encrypted_content"].startswith("gAAAAAB")
    context.add_turn(turn)
    [call] = turn.tool_calls
    context.add_tool_result(call, "123124", is_error=False)
    provider.complete(context.prepare(tools), tools, max_tokens=1000)
    sent = wire.requests[1].body
    expected = second.request["input"]
    assert [i.get("type", i.get("role")) for i in sent["input"]] == [
        "user",
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert sent["input"][1] == expected[1]  # the reasoning item exactly as it came
    assert sent["input"][2] == expected[2] and sent["input"][3]["call_id"] == expected[3]["call_id"]
    assert sent["store"] is False and sent["include"] == ["reasoning.encrypted_content"]


def test_interleaved_reasoning_keeps_each_item_in_its_place(wire):
    wire.require(responses_reasoning_check)
    case = recording("resp_json_interleaved_reasoning_1")
    first = case.decoded()
    wire.push(case.reply())
    provider = responses(wire, "gpt-5.5", reasoning_effort="high")
    tools = tools_of(case.request)
    context = Context(ContextConfig(), "", "go")
    turn = provider.complete(context.prepare(tools), tools, max_tokens=1000)
    kinds = [item["type"] for item in first["output"]]
    assert [b["type"] for b in turn.reasoning.blocks] == kinds  # every item's place, in order
    # the next round, against a strict fake that refuses a call without its reasoning item before it
    wire.push(responses_turn("Done.", reasoning="enc-2"))
    context.add_turn(turn)
    for call in turn.tool_calls:
        context.add_tool_result(call, "ok", is_error=False)
    done = provider.complete(context.prepare(tools), tools, max_tokens=1000)
    assert done.text == "Done." and not done.tool_calls
    # a turn without tool calls keeps its reasoning too: with `store: false` every reasoning item goes
    # back, here after the turn went through the trajectory's JSON (what a resume reads) and a verdict
    context.add_turn(ModelTurn.model_validate_json(done.model_dump_json()))
    context.add_user("The tests still fail.")
    wire.push(responses_turn("Fixed."))
    provider.complete(context.prepare(tools), tools, max_tokens=1000)
    sent = wire.requests[-1].body["input"]
    assert [i.get("type", i.get("role")) for i in sent[-3:]] == ["reasoning", "assistant", "user"]
    assert sent[-3]["encrypted_content"] == "enc-2" and sent[-2]["content"] == "Done."
    assert sum(i.get("type") == "reasoning" for i in sent) == 1 + kinds.count("reasoning")


def test_an_error_event_inside_the_stream_is_classified_by_its_code(wire):
    wire.push(recording("resp_stream_error_event_quota").reply())
    with pytest.raises(ModelSpendLimitError, match="exceeded your current quota"):
        responses(wire, "gpt-5-nano").complete(PROMPT, [TOOL], max_tokens=100)
    assert len(wire.requests) == 1


def test_a_rejected_key_is_an_auth_error_and_the_key_never_shows(wire):
    wire.push(recording("resp_401_invalid_key").reply())
    settings = ProviderConfig(base_url=wire.openai_base_url)
    with pytest.raises(ModelAuthError) as caught:
        make_provider("openai-responses:gpt-4o", settings, api_key=KEY).complete(PROMPT, [], max_tokens=10)
    assert KEY not in str(caught.value) and len(wire.requests) == 1  # never retried


def test_a_stream_cut_before_the_response_ended_is_retried(wire):
    frames = responses_turn("Half an answer").events
    wire.push(Reply(events=frames[:-1]), responses_turn("Whole."))
    settings = ProviderConfig(base_url=wire.openai_base_url, retry=RetryConfig(initial_backoff_s=0, max_backoff_s=0))
    turn = make_provider("openai-responses:gpt-4o", settings, api_key=KEY).complete(PROMPT, [], max_tokens=10)
    assert turn.text == "Whole." and turn.retries == 1 and "ended before it finished" in turn.retry_reasons[0]
    with pytest.raises(RetryBudgetExhausted, match="ended before it finished"):
        wire.push(Reply(events=frames[:-1]))
        responses(wire).complete(PROMPT, [], max_tokens=10)


def test_a_refusal_and_a_failed_response(wire):
    """Fakes in the recorded streams' shape: a refusal content part, then a response.failed whose
    error is a server error (retryable, so it is retried and the retry answers)."""
    from tests.providers.wire_server import sse_event

    refusal = responses_turn("").events
    item = {"id": "msg_0", "type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "I can't help with that."}]}  # fmt: skip
    refusal.insert(1, sse_event("response.refusal.delta", {"type": "response.refusal.delta", "output_index": 0, "delta": "I can't help with that."}))  # fmt: skip
    refusal.insert(2, sse_event("response.output_item.done", {"type": "response.output_item.done", "output_index": 0, "item": item}))  # fmt: skip
    failed = sse_event(
        "response.failed",
        {
            "type": "response.failed",
            "response": {
                "status": "failed",
                "error": {"code": "server_error", "message": "The server had an error."},
                "usage": {"input_tokens": 7, "output_tokens": 0},
            },
        },
    )
    wire.push(Reply(events=[refusal[0], failed]), Reply(events=refusal))
    settings = ProviderConfig(base_url=wire.openai_base_url, retry=RetryConfig(initial_backoff_s=0, max_backoff_s=0))
    turn = make_provider("openai-responses:gpt-4o", settings, api_key=KEY).complete(PROMPT, [], max_tokens=10)
    assert turn.stop_reason == "refusal" and turn.refusal == turn.text == "I can't help with that."
    assert turn.retries == 1 and "The server had an error" in turn.retry_reasons[0]


@pytest.mark.parametrize("stored", [True, False])
def test_a_reasoning_item_the_server_kept_goes_back_by_id(wire, stored):
    """A server that keeps its responses whatever the request asked (`store: true` in its answer) sends a
    reasoning item without encrypted content: the next request refers to it by id, before the call it
    led to; one that kept nothing gets nothing it could not find."""
    from tests.providers.wire_server import _item_frames, _response, _responses_event

    reasoning = {"id": "rs_9", "type": "reasoning", "summary": [{"type": "summary_text", "text": "reading first"}]}
    call = {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "read_file", "arguments": "{}"}
    ended = {**_response("gpt-5.5", "completed", [reasoning, call]), "store": stored}
    frames = [
        _responses_event("response.created", response={**_response("gpt-5.5", "in_progress", []), "store": stored})
    ]
    frames += _item_frames(0, reasoning) + _item_frames(1, call)
    frames.append(_responses_event("response.completed", response=ended))
    wire.push(Reply(events=frames), responses_turn("Done."))
    provider = responses(wire, "gpt-5.5", reasoning_effort="low")
    context = Context(ContextConfig(), "", "go")
    turn = provider.complete(context.prepare([TOOL]), [TOOL], max_tokens=100)
    context.add_turn(ModelTurn.model_validate_json(turn.model_dump_json()))  # through the record, as a resume
    context.add_tool_result(turn.tool_calls[0], "ok", is_error=False)
    provider.complete(context.prepare([TOOL]), [TOOL], max_tokens=100)
    kinds = [(i.get("type", i.get("role")), i.get("id")) for i in wire.requests[1].body["input"]]
    if stored:
        assert kinds[1:3] == [("item_reference", "rs_9"), ("function_call", None)], kinds
    else:
        assert [k for k, _ in kinds] == ["user", "function_call", "function_call_output"], kinds
