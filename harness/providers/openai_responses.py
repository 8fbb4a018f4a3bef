"""`openai-responses:MODEL` — the Responses API (`POST /responses`) over the official `openai` SDK, streamed.

What Codex models answer on only, and what OpenAI's reasoning models do best on. Nothing is kept on
the server (`store: false`): every request carries the whole conversation, and the reasoning items
of earlier turns go back with their encrypted content, in the order they came (each before the
function call it led to), as the protocol requires. Output items are assembled by `output_index`, so
parallel function calls never mix their arguments; errors sent inside the stream are classified like
HTTP statuses (the same classification as chat completions).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx2
import openai

from harness.errors import ModelBadResponse, ModelError, ModelUnavailable
from harness.providers.arguments import build_tool_call, safe_turn
from harness.providers.config import ProviderConfig
from harness.providers.counting import TokenCounter
from harness.providers.factory import register_provider
from harness.providers.openai_compat import (
    WireAnswer,
    arguments_text,
    is_reasoning_model,
    openai_client,
    stream_error,
    translate_error,
)
from harness.providers.sse import WireItem
from harness.providers.stream import drain
from harness.types import Message, ModelTurn, Reasoning, StopReason, ToolCall, ToolSchema, Usage

RESPONSE_ITEMS = ("reasoning", "item_reference", "message", "function_call")
"""The kinds of output item a turn keeps in `Reasoning.blocks` (reasoning items whole, the message
and the function calls as places), so the next request sends them back in their order."""
_ENDED = {"response.completed", "response.incomplete", "response.failed"}
_INCOMPLETE: dict[str, StopReason] = {"max_output_tokens": "max_tokens", "content_filter": "content_filter"}


class ResponsesProvider:
    """Streams a Responses API call; returns one typed ModelTurn per call."""

    def __init__(
        self, config: ProviderConfig, *, api_key: str | None, http_client: httpx2.Client | None = None
    ) -> None:
        self.name = f"openai-responses:{config.model}"
        self.model = config.model
        self.config = config
        self._secret = api_key
        self._client = openai_client(config, api_key, http_client)
        self.counter = TokenCounter(config.base_url, config.is_local(), http_client)

    def __repr__(self) -> str:
        return f"ResponsesProvider({self.name!r})"

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema],
        *,
        max_tokens: int,
        timeout_s: float | None = None,
    ) -> ModelTurn:
        """Send the conversation, assemble the streamed (or whole) response into a ModelTurn."""
        instructions = "\n\n".join(m.content for m in messages if m.role == "system" and m.content)
        request: dict[str, Any] = {
            "model": self.model,
            "input": to_responses_input(messages),
            "stream": True,
            "store": False,
            "max_output_tokens": max_tokens,
        }
        if instructions:
            request["instructions"] = instructions
        if tools:
            request["tools"] = [
                {"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters}
                for t in tools
            ]
        forced = self.config.forced_tool(messages, tools)
        if forced:
            request["tool_choice"] = forced if forced == "required" else {"type": "function", "name": forced}
        reasoning = is_reasoning_model(self.model) or self.config.reasoning_effort is not None
        if reasoning:
            request["include"] = ["reasoning.encrypted_content"]
        if self.config.reasoning_effort:
            request["reasoning"] = {"effort": self.config.reasoning_effort, "summary": "auto"}
        elif self.config.temperature is not None and not reasoning:
            request["temperature"] = self.config.temperature
        assembly = ResponseAssembly()
        latency_ms = drain(
            lambda timeout: WireAnswer(self._client.responses.create(**request, timeout=timeout)),
            assembly.add,
            lambda: assembly.usage,
            config=self.config,
            limit_s=timeout_s,
            foreign=(openai.OpenAIError, httpx2.HTTPError),
            translate=self._translate,
        )
        turn = assembly.turn().model_copy(update={"latency_ms": latency_ms})
        if assembly.usage is None:  # the server sent none: counted, marked estimated
            turn = turn.model_copy(update={"usage": self.counter.usage(messages, tools, turn)})
        return safe_turn(turn)

    def _translate(self, error: BaseException, silence: str) -> ModelError:
        return translate_error(error, self._secret, silence, str(self._client.base_url))


class ResponseAssembly:
    """Accumulates Responses stream events (wire JSON) into output items by their `output_index`."""

    def __init__(self) -> None:
        self.items: dict[int, dict[str, Any]] = {}
        self.text: dict[int, list[str]] = {}
        self.refusal: list[str] = []
        self.arguments: dict[int, list[str]] = {}
        self.summary: dict[int, list[str]] = {}
        self.status: str | None = None
        self.incomplete_reason = ""
        self.usage: Usage | None = None
        self.model = ""
        self.stored = False
        """The server says it kept the response (`store: true`, whatever the request asked): its
        items can be referred to by id."""

    def add(self, item: WireItem) -> None:
        """Fold one event (or a whole response from a server that ignored `stream: true`)."""
        if item.kind == "done":
            return
        payload = item.payload if isinstance(item.payload, dict) else {}
        if item.kind == "whole":
            if "output" not in payload:
                if "error" in payload:
                    stream_error(payload)
                raise ModelBadResponse(
                    f"the model endpoint answered with JSON that is no response: {str(payload)[:200]}"
                )
            self._end(payload)
            return
        kind = str(payload.get("type") or item.event or "")
        index = payload.get("output_index", 0)
        if kind == "error":
            stream_error(payload)  # raises: an in-stream error, classified by its code
        elif kind in ("response.output_item.added", "response.output_item.done"):
            self.items[index] = dict(payload.get("item") or {})
        elif kind == "response.output_text.delta":
            self.text.setdefault(index, []).append(str(payload.get("delta") or ""))
        elif kind == "response.refusal.delta":
            self.refusal.append(str(payload.get("delta") or ""))
        elif kind == "response.function_call_arguments.delta":
            self.arguments.setdefault(index, []).append(str(payload.get("delta") or ""))
        elif kind == "response.reasoning_summary_text.delta":
            self.summary.setdefault(index, []).append(str(payload.get("delta") or ""))
        elif kind in _ENDED:
            response = payload.get("response") or {}
            if kind == "response.failed":
                self._add_usage(response.get("usage"))
                stream_error({"error": response.get("error") or {"message": "the response failed"}})
            self._end(response)
        elif kind == "response.created":
            self.model = str((payload.get("response") or {}).get("model") or self.model)
            self.stored = (payload.get("response") or {}).get("store") is True

    def _end(self, response: dict[str, Any]) -> None:
        """The final response: its output list is the whole truth where it has one."""
        self.model = str(response.get("model") or self.model)
        self.stored = response.get("store") is True if "store" in response else self.stored
        self._add_usage(response.get("usage"))
        for index, output in enumerate(response.get("output") or ()):
            if isinstance(output, dict):
                self.items[index] = dict(output)
        self.status = str(response.get("status") or "completed")
        self.incomplete_reason = str((response.get("incomplete_details") or {}).get("reason") or "")

    def _add_usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        self.usage = Usage(
            input_tokens=usage.get("input_tokens") or 0,
            output_tokens=usage.get("output_tokens") or 0,
            cached_input_tokens=(usage.get("input_tokens_details") or {}).get("cached_tokens") or 0,
            reasoning_tokens=(usage.get("output_tokens_details") or {}).get("reasoning_tokens") or 0,
        )

    def turn(self) -> ModelTurn:
        """The finished ModelTurn; a stream cut off before the response ended is retryable."""
        if self.status is None:
            raise ModelUnavailable("the model's stream ended before it finished (connection dropped)", usage=self.usage)
        truncated = self.status == "incomplete"
        texts, calls, thoughts, places = [], [], [], []
        refusal = "".join(self.refusal)
        for index in sorted(self.items):
            item = self.items[index]
            kind = item.get("type")
            if kind == "message":
                texts.append(self._message_text(index, item))
                refusal = refusal or "".join(
                    str(p.get("refusal") or "") for p in item.get("content") or () if p.get("type") == "refusal"
                )
                places.append({"type": "message"})
            elif kind == "function_call":
                arguments = item.get("arguments") or "".join(self.arguments.get(index, []))
                call_id = str(item.get("call_id") or item.get("id") or f"call_{index}")
                calls.append(build_tool_call(call_id, str(item.get("name") or ""), arguments, truncated=truncated))
                places.append({"type": "function_call", "call_id": call_id})
            elif kind == "reasoning":
                summary = [str(s.get("text") or "") for s in item.get("summary") or () if isinstance(s, dict)]
                thoughts.append("".join(summary) or "".join(self.summary.get(index, [])))
                if not item.get("encrypted_content") and self.stored and isinstance(item.get("id"), str):
                    places.append({"type": "item_reference", "id": item["id"]})  # kept there: sent back by id
                else:
                    places.append({k: v for k, v in item.items() if k != "status"})
        stop: StopReason = "tool_use" if calls else "end_turn"
        if refusal:
            stop = "refusal"
        elif truncated:
            stop = _INCOMPLETE.get(self.incomplete_reason, "other")
        text = "".join(texts) or refusal
        reasoning = Reasoning(text="\n\n".join(t for t in thoughts if t), blocks=places) if thoughts else None
        return ModelTurn(
            text=text,
            tool_calls=calls,
            stop_reason=stop,
            usage=self.usage or Usage(),
            model=self.model,
            refusal=refusal,
            reasoning=reasoning,
        )

    def _message_text(self, index: int, item: dict[str, Any]) -> str:
        parts = [str(p.get("text") or "") for p in item.get("content") or () if p.get("type") == "output_text"]
        return "".join(parts) or "".join(self.text.get(index, []))


def to_responses_input(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Provider-neutral messages -> Responses input items (the system prompt travels as instructions)."""
    items: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue
        if message.role == "tool":
            items.append(
                {"type": "function_call_output", "call_id": message.tool_call_id or "", "output": message.content}
            )
        elif message.role == "user":
            items.append({"role": "user", "content": message.content})
        else:
            items += _assistant_items(message)
    return items


def _assistant_items(message: Message) -> list[dict[str, Any]]:
    """An assistant turn as the items it came as: reasoning items unchanged and in their places; a
    turn another protocol made (or a canned one) in the plain order, message then calls."""
    calls = {call.id: _call_item(call) for call in message.tool_calls}
    blocks = message.reasoning.blocks if message.reasoning else []
    places = [block for block in blocks if block.get("type") in RESPONSE_ITEMS]
    items: list[dict[str, Any]] = []
    said = False
    for place in places:
        kind = place.get("type")
        if kind == "reasoning" and place.get("encrypted_content"):
            # only with its encrypted content: with nothing stored server-side, a bare id is unknown there
            items.append(dict(place))
        elif kind == "item_reference" and place.get("id"):  # a reasoning item the server said it kept
            items.append({"type": "item_reference", "id": str(place["id"])})
        elif kind == "message" and message.content and not said:
            items.append({"role": "assistant", "content": message.content})
            said = True
        elif kind == "function_call" and place.get("call_id") in calls:
            items.append(calls.pop(str(place["call_id"])))
    if message.content and not said:
        items.append({"role": "assistant", "content": message.content})
    return items + list(calls.values())


def _call_item(call: ToolCall) -> dict[str, Any]:
    return {"type": "function_call", "call_id": call.id, "name": call.name, "arguments": arguments_text(call)}


def _factory(target: str, config: ProviderConfig, api_key: str | None) -> ResponsesProvider:
    return ResponsesProvider(config.model_copy(update={"model": target}), api_key=api_key)


register_provider("openai-responses", _factory)
