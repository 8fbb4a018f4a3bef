"""`anthropic:MODEL` — the Messages API over the official `anthropic` SDK, streamed.

The system prompt travels separately, tool results are `tool_result` blocks (with `is_error`), and
consecutive user-side messages (tool results) are merged into one user message, as the API expects.
Usage is normalised: Anthropic's `input_tokens` excludes cached tokens, ours includes them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import anthropic
import httpx2

from harness.errors import (
    ModelAuthError,
    ModelBadResponse,
    ModelContextLengthError,
    ModelError,
    ModelRateLimited,
    ModelSpendLimitError,
    ModelUnavailable,
)
from harness.providers.arguments import build_tool_call, safe_turn
from harness.providers.config import ProviderConfig, redact
from harness.providers.factory import register_provider
from harness.providers.retry import parse_retry_after
from harness.providers.sse import WireItem, is_whole_json, read_body, refuse_unreadable
from harness.providers.stream import drain, sdk_timeout, transport_error
from harness.types import Message, ModelTurn, Reasoning, StopReason, ToolSchema, Usage

DEFAULT_BASE_URL = "https://api.anthropic.com"
CACHE_BREAKPOINT = {"type": "ephemeral"}
"""Prompt-cache marker: everything up to and including the marked block is cached (5 min TTL)."""
_STOP_REASONS: dict[str, StopReason] = {
    "end_turn": "end_turn",
    "stop_sequence": "end_turn",
    "tool_use": "tool_use",
    "max_tokens": "max_tokens",
    "model_context_window_exceeded": "max_tokens",
    "refusal": "refusal",
}
_RETRYABLE_KINDS = {"overloaded_error", "api_error", "timeout_error"}
THINKING_BUDGETS = {"low": 1024, "medium": 4096, "high": 16384}
"""Extended-thinking budget per `reasoning_effort` (`--thinking`); with adaptive thinking, the room
added to the turn's output limit for the thinking the model chooses to do."""
ADAPTIVE_FROM = (4, 6)
"""Claude versions from which thinking is adaptive (`thinking: {type: adaptive}` with an effort):
4.6 takes both forms (the budget is deprecated), 4.7 and later refuse a budget."""
ADAPTIVE_NAMES = ("mythos", "fable")
"""Model lines that only think adaptively, whatever their version."""
INTERLEAVED_BETA = "interleaved-thinking-2025-05-14"
"""The beta that lets budget-thinking Claude 4 models think between tool calls (adaptive thinking
interleaves without it)."""
MAX_BREAKPOINTS = 4
"""The protocol's limit of cache_control markers per request."""
_CONTEXT_MARKERS = ("prompt is too long", "context window", "context length", "too many tokens")


class AnthropicProvider:
    """Streams a Messages call; returns one typed ModelTurn per call."""

    def __init__(
        self,
        config: ProviderConfig,
        *,
        api_key: str | None,
        http_client: httpx2.Client | None = None,
        cloud: CloudAccess | None = None,
    ) -> None:
        self.name = f"{cloud.prefix if cloud else 'anthropic'}:{config.model}"
        self.model = config.model
        self.config = config
        self._secret = api_key
        self._cloud = cloud
        # The SDK's own client for the vendor's endpoint, or the Bedrock / Vertex one a cloud gives
        # (same Messages protocol, its own auth); never SDK retries: ours is the only policy.
        self._client: Any = (
            cloud.client(config, api_key, http_client)
            if cloud
            else anthropic.Anthropic(
                api_key=api_key or "not-needed",
                base_url=config.base_url or DEFAULT_BASE_URL,
                timeout=sdk_timeout(config),
                max_retries=0,
                http_client=http_client,
                open_telemetry=False,
            )
        )

    def __repr__(self) -> str:
        return f"AnthropicProvider({self.name!r})"

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema],
        *,
        max_tokens: int,
        timeout_s: float | None = None,
    ) -> ModelTurn:
        """Send the conversation, assemble the streamed events into a ModelTurn."""
        system, wire_messages = to_anthropic_messages(messages)
        request: dict[str, Any] = {
            "model": self.model,
            "messages": wire_messages,
            "max_tokens": max_tokens,
            "stream": True,
        }
        if system:
            request["system"] = system
        if tools:
            request["tools"] = [t.anthropic() for t in tools]
        forced = self.config.forced_tool(messages, tools)
        if forced:
            request["tool_choice"] = {"type": "any"} if forced == "required" else {"type": "tool", "name": forced}
        if self.config.reasoning_effort:
            request.update(thinking_request(self.model, self.config, max_tokens))
        assembly = EventAssembly()
        latency_ms = drain(
            lambda timeout: _Answer(self._client.messages.create(**request, timeout=timeout)),
            assembly.add,
            assembly.usage,
            config=self.config,
            limit_s=timeout_s,
            foreign=(anthropic.AnthropicError, httpx2.HTTPError, *(self._cloud.auth_errors() if self._cloud else ())),
            translate=self._translate,
        )
        return safe_turn(assembly.turn().model_copy(update={"latency_ms": latency_ms}))

    def _translate(self, error: BaseException, silence: str) -> ModelError:
        if self._cloud and isinstance(error, self._cloud.auth_errors()):
            return ModelAuthError(
                redact(f"{self._cloud.prefix} credentials: {error} ({self._cloud.auth_hint})", self._secret)
            )
        return translate_error(error, self._secret, silence, str(self._client.base_url))


class CloudAccess(Protocol):
    """How a cloud reaches Anthropic models (Bedrock, Vertex AI): its SDK client and its auth."""

    prefix: str
    auth_hint: str
    """One line: where the credentials come from and what to set."""

    def client(self, config: ProviderConfig, api_key: str | None, http_client: httpx2.Client | None) -> Any:
        """The SDK client for this cloud (its own auth), without SDK retries."""
        ...

    def auth_errors(self) -> tuple[type[BaseException], ...]:
        """The credential chain's own errors (no credentials, an expired token), raised while signing."""
        ...


class _Answer:
    """The SDK's event stream, or the events of a whole Message from a server that ignored
    `stream: true` (it answered application/json)."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.response = stream.response

    def __enter__(self) -> Iterator[Any]:
        response = self.response
        refuse_unreadable(response.headers.get("content-type", ""), response)
        if is_whole_json(response.headers.get("content-type", "")):
            return read_body((), response.read())
        return iter(self._stream)

    def __exit__(self, *exc: object) -> None:
        self._stream.close()


class EventAssembly:
    """Accumulates Messages stream events into text, thinking, tool calls (by block index) and usage."""

    def __init__(self) -> None:
        self.blocks: dict[int, list[str]] = {}  # index -> [kind, id, name, text / argument json / thinking, signature]
        self.raw_usage: dict[str, int] = {}
        self.stop_reason: str | None = None
        self.model = ""
        self.finished = False

    def add(self, event: Any) -> None:
        """Fold one raw stream event (or a whole Message) into the turn."""
        if isinstance(event, WireItem):
            self._add_message(event.payload)
            return
        kind = event.type
        if kind == "content_block_delta":
            block = self.blocks.get(event.index)
            delta = event.delta
            if block is not None:
                if delta.type == "text_delta":
                    block[3] += delta.text
                elif delta.type == "input_json_delta":
                    block[3] += delta.partial_json
                elif delta.type == "thinking_delta":
                    block[3] += delta.thinking
                elif delta.type == "signature_delta":
                    block[4] += delta.signature
        elif kind == "content_block_start":
            b = event.content_block
            self.blocks[event.index] = [
                b.type,
                getattr(b, "id", ""),
                getattr(b, "name", ""),
                getattr(b, "text", "") or getattr(b, "thinking", "") or getattr(b, "data", "") or "",
                getattr(b, "signature", "") or "",
            ]
        elif kind == "message_start":
            self.model = event.message.model or ""
            self._merge_usage(event.message.usage)
        elif kind == "message_delta":
            self.stop_reason = event.delta.stop_reason or self.stop_reason
            self._merge_usage(event.usage)
        elif kind == "message_stop":
            self.finished = True

    def _add_message(self, body: Any) -> None:
        """A whole Message (the JSON a non-streaming answer is)."""
        if not isinstance(body, dict) or body.get("type") == "error" or "content" not in body:
            raise ModelBadResponse(f"the model endpoint answered with JSON that is no message: {str(body)[:200]}")
        self.model = body.get("model") or ""
        self._merge_usage(body.get("usage") or {})
        for index, block in enumerate(body["content"]):
            kind = block.get("type", "")
            content = {"text": "text", "tool_use": "input", "thinking": "thinking", "redacted_thinking": "data"}
            value = block.get(content.get(kind, "text"), "")
            text = json.dumps(value) if kind == "tool_use" else str(value or "")
            self.blocks[index] = [kind, block.get("id", ""), block.get("name", ""), text, block.get("signature", "")]
        self.stop_reason = body.get("stop_reason")
        self.finished = True

    def _merge_usage(self, usage: Any) -> None:
        # message_delta counts are cumulative: the latest non-null value wins.
        for key in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"):
            value = usage.get(key) if isinstance(usage, dict) else getattr(usage, key, None)
            if value is not None:
                self.raw_usage[key] = value
        details = (
            usage.get("output_tokens_details")
            if isinstance(usage, dict)
            else getattr(usage, "output_tokens_details", None)
        )
        thinking = (
            details.get("thinking_tokens") if isinstance(details, dict) else getattr(details, "thinking_tokens", None)
        )
        if thinking is not None:  # part of output_tokens, as OpenAI's reasoning_tokens are
            self.raw_usage["thinking_tokens"] = thinking

    def usage(self) -> Usage | None:
        """Normalised usage: input includes cache reads and writes (our Usage convention)."""
        if not self.raw_usage:
            return None
        read = self.raw_usage.get("cache_read_input_tokens", 0)
        write = self.raw_usage.get("cache_creation_input_tokens", 0)
        return Usage(
            input_tokens=self.raw_usage.get("input_tokens", 0) + read + write,
            output_tokens=self.raw_usage.get("output_tokens", 0),
            cached_input_tokens=read,
            cache_write_tokens=write,
            reasoning_tokens=self.raw_usage.get("thinking_tokens", 0),
        )

    def turn(self) -> ModelTurn:
        """The finished ModelTurn; a stream cut off before message_stop is retryable."""
        if not self.finished or self.stop_reason is None:
            raise ModelUnavailable(
                "the model's stream ended before it finished (connection dropped)", usage=self.usage()
            )
        stop = _STOP_REASONS.get(self.stop_reason, "other")
        texts, calls, thoughts, blocks = [], [], [], []
        for index in sorted(self.blocks):
            kind, call_id, name, content, signature = self.blocks[index]
            if kind == "text":
                texts.append(content)
            elif kind == "tool_use":
                calls.append(build_tool_call(call_id, name, content, truncated=stop == "max_tokens"))
            elif kind == "thinking":  # sent back exactly as received, signature included
                thoughts.append(content)
                blocks.append({"type": "thinking", "thinking": content, "signature": signature})
            elif kind == "redacted_thinking":
                blocks.append({"type": "redacted_thinking", "data": content})
        text = "".join(texts)
        return ModelTurn(
            text=text,
            tool_calls=calls,
            stop_reason=stop,
            usage=self.usage() or Usage(),
            model=self.model,
            refusal=text if self.stop_reason == "refusal" else "",
            reasoning=Reasoning(text="\n\n".join(thoughts), blocks=blocks) if blocks else None,
        )


def thinking_mode(model: str, config: ProviderConfig) -> str:
    """`adaptive` or `budget` for this model: the config's choice, else by the model's version
    (Claude 4.6 and later, and the lines that know nothing else, think adaptively)."""
    if config.thinking_mode != "auto":
        return config.thinking_mode
    if any(line in model.lower() for line in ADAPTIVE_NAMES):
        return "adaptive"
    return "adaptive" if claude_version(model) >= ADAPTIVE_FROM else "budget"


def claude_version(model: str) -> tuple[int, int]:
    """(major, minor) read off a Claude model id in any of its spellings (`claude-opus-4-6`,
    `anthropic.claude-sonnet-4-6`, `claude-3-7-sonnet-20250219`, `claude-opus-4-6@20260101`); (0, 0)
    when the id names no version."""
    found = re.search(r"claude-(?:[a-z]+-)?(\d+)(?:[-.](\d{1,2})(?!\d))?", model.lower())
    return (int(found.group(1)), int(found.group(2) or 0)) if found else (0, 0)


def thinking_request(model: str, config: ProviderConfig, max_tokens: int) -> dict[str, Any]:
    """The request fields that turn thinking on at the configured effort, in the form the model takes.
    The turn's limit grows by the thinking room (the answer comes after the thinking)."""
    effort = config.reasoning_effort or "medium"
    room = THINKING_BUDGETS[effort]
    if thinking_mode(model, config) == "adaptive":
        return {"thinking": {"type": "adaptive"}, "output_config": {"effort": effort}, "max_tokens": max_tokens + room}
    fields: dict[str, Any] = {"thinking": {"type": "enabled", "budget_tokens": room}, "max_tokens": max_tokens + room}
    if claude_version(model) >= (4, 0):
        fields["extra_headers"] = {"anthropic-beta": INTERLEAVED_BETA}
    return fields


def to_anthropic_messages(messages: Sequence[Message]) -> tuple[str, list[dict[str, Any]]]:
    """(system prompt, Messages API messages) with user-side runs merged into one user message.

    Cache breakpoints (see `mark_cache`): the pinned head, and the conversation's rolling end.
    """
    system = "\n\n".join(m.content for m in messages if m.role == "system" and m.content)
    wire: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message)
        if not blocks:
            continue
        if wire and wire[-1]["role"] == role:
            wire[-1]["content"].extend(blocks)
        else:
            wire.append({"role": role, "content": blocks})
    mark_cache(wire)
    return system, wire


def mark_cache(wire: list[dict[str, Any]]) -> None:
    """Put the prompt-cache breakpoints (three, within the protocol's four): the end of the first
    message (tools + system + task, cached once, read on every step), the end of the conversation
    (this request's prefix is written to the cache for the next one), and the end of the previous
    user turn (where the last request wrote it: read back, so a long run's history comes from the
    cache, not only its head)."""
    marked: set[int] = set()
    for index in (0, len(wire) - 3, len(wire) - 1):
        if 0 <= index < len(wire) and index not in marked and len(marked) < MAX_BREAKPOINTS:
            cacheable = [b for b in wire[index]["content"] if b.get("type") not in ("thinking", "redacted_thinking")]
            if cacheable:
                cacheable[-1]["cache_control"] = dict(CACHE_BREAKPOINT)
                marked.add(index)


def _blocks(message: Message) -> list[dict[str, Any]]:
    if message.role == "tool":
        result: dict[str, Any] = {
            "type": "tool_result",
            "tool_use_id": message.tool_call_id or "",
            "is_error": message.is_error,
        }
        if message.content:
            result["content"] = message.content
        return [result]
    blocks: list[dict[str, Any]] = []
    if message.role == "assistant" and message.reasoning:
        # Extended thinking: the turn's thinking and redacted_thinking blocks go back first, unchanged
        # (a turn another protocol made carries items this one does not know: they stay out).
        blocks += [dict(b) for b in message.reasoning.blocks if b.get("type") in ("thinking", "redacted_thinking")]
    if message.content:
        blocks.append({"type": "text", "text": message.content})
    for call in message.tool_calls:
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments})
    return blocks


def translate_error(error: BaseException, secret: str | None, silence: str = "", endpoint: str = "") -> ModelError:
    """The one place Anthropic SDK / httpx errors become harness.errors (keys redacted)."""
    transport = transport_error(
        error,
        timeouts=(anthropic.APITimeoutError,),
        unreachable=(anthropic.APIConnectionError,),
        secret=secret,
        silence=silence,
        endpoint=endpoint,
    )
    if transport is not None:
        return transport
    if isinstance(error, anthropic.APIResponseValidationError) or not isinstance(error, anthropic.APIStatusError):
        return ModelBadResponse(redact(f"unexpected response from the model endpoint: {error}", secret))
    status, kind = error.status_code, error.type or ""
    message = error.api_message or str(error)
    text = redact(f"model API error {status} {kind}: {message}".replace("  ", " "), secret)
    lowered = message.lower()
    retry_after = parse_retry_after(error.response.headers)
    if status in (401, 403) or kind in ("authentication_error", "permission_error"):
        return ModelAuthError(text)
    if status == 402 or kind == "billing_error" or "credit balance" in lowered:
        return ModelSpendLimitError(text)
    if status == 413 or kind == "request_too_large" or any(m in lowered for m in _CONTEXT_MARKERS):
        return ModelContextLengthError(text)
    if status == 429 or kind == "rate_limit_error":
        return ModelRateLimited(text, retry_after=retry_after)
    if kind in _RETRYABLE_KINDS or status in (408, 409) or status >= 500:
        return ModelUnavailable(text, retry_after=retry_after)
    return ModelError(text)


def _factory(target: str, config: ProviderConfig, api_key: str | None) -> AnthropicProvider:
    return AnthropicProvider(config.model_copy(update={"model": target}), api_key=api_key)


register_provider("anthropic", _factory)
