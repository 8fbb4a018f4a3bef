"""`openai:MODEL` — chat completions over the official `openai` SDK, streamed.

Works with api.openai.com and compatible servers (vLLM, llama.cpp server, Ollama) via `base_url`.
Tool-call fragments are assembled by their `index`, so parallel calls never mix arguments.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import httpx2
import openai

from harness.errors import (
    ModelAuthError,
    ModelBadResponse,
    ModelContextLengthError,
    ModelError,
    ModelRateLimited,
    ModelSpendLimitError,
    ModelUnavailable,
)
from harness.providers.arguments import build_tool_call
from harness.providers.config import ProviderConfig, redact
from harness.providers.factory import register_provider
from harness.providers.retry import parse_retry_after
from harness.providers.stream import drain, sdk_timeout, transport_error
from harness.types import Message, ModelTurn, StopReason, ToolSchema, Usage

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_STOP_REASONS: dict[str, StopReason] = {
    "stop": "end_turn",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "length": "max_tokens",
    "content_filter": "content_filter",
}
_SPEND_CODES = {"insufficient_quota", "billing_hard_limit_reached", "billing_not_active", "quota_exceeded"}
_CONTEXT_MARKERS = ("context_length_exceeded", "context length", "context window", "maximum context", "too many tokens")


class OpenAICompatProvider:
    """Streams chat completions; returns one typed ModelTurn per call."""

    def __init__(
        self, config: ProviderConfig, *, api_key: str | None, http_client: httpx2.Client | None = None
    ) -> None:
        self.name = f"openai:{config.model}"
        self.model = config.model
        self.config = config
        self._secret = api_key
        # Explicit key and base_url so the SDK never consults the environment; max_retries=0 so the
        # retry layer is the only retry policy.
        self._client = openai.OpenAI(
            api_key=api_key or "not-needed",
            organization=None,
            project=None,
            base_url=config.base_url or DEFAULT_BASE_URL,
            timeout=sdk_timeout(config),
            max_retries=0,
            http_client=http_client,
        )

    def __repr__(self) -> str:
        return f"OpenAICompatProvider({self.name!r})"

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema],
        *,
        max_tokens: int,
        timeout_s: float | None = None,
    ) -> ModelTurn:
        """Send the conversation, assemble the streamed answer into a ModelTurn."""
        request: dict[str, Any] = {
            "model": self.model,
            "messages": [to_openai_message(m) for m in messages],
            "stream": True,
            "stream_options": {"include_usage": True},
            self.config.max_tokens_field: max_tokens,
        }
        if tools:
            request["tools"] = [t.openai() for t in tools]
        assembly = StreamAssembly()
        latency_ms = drain(
            lambda timeout: self._client.chat.completions.create(**request, timeout=timeout),
            assembly.add,
            lambda: assembly.usage,
            config=self.config,
            limit_s=timeout_s,
            foreign=(openai.OpenAIError, httpx2.HTTPError),
            translate=self._translate,
        )
        return assembly.turn().model_copy(update={"latency_ms": latency_ms})

    def _translate(self, error: BaseException, stall_s: float) -> ModelError:
        return translate_error(error, self._secret, stall_s, str(self._client.base_url))


class StreamAssembly:
    """Accumulates chat-completion chunks; tool calls keyed by their index (parallel-safe)."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.calls: list[list[str]] = []  # [id, name, argument text] per call, in order of first sight
        self.slot_of_index: dict[int, int] = {}
        self.finish_reason: str | None = None
        self.usage: Usage | None = None
        self.model = ""

    def add(self, chunk: Any) -> None:
        """Fold one ChatCompletionChunk into the turn."""
        if chunk.model:
            self.model = chunk.model
        if chunk.usage is not None:
            details = chunk.usage.prompt_tokens_details
            self.usage = Usage(
                input_tokens=chunk.usage.prompt_tokens or 0,
                output_tokens=chunk.usage.completion_tokens or 0,
                cached_input_tokens=(details.cached_tokens or 0) if details is not None else 0,
            )
        for choice in chunk.choices:
            delta = choice.delta
            if delta is not None:
                if delta.content:
                    self.text.append(delta.content)
                for fragment in delta.tool_calls or ():
                    self._add_fragment(fragment)
            if choice.finish_reason:
                self.finish_reason = choice.finish_reason

    def _add_fragment(self, fragment: Any) -> None:
        slot = self.slot_of_index.get(fragment.index)
        # A new id at a known index means a server that reuses index 0 for every call.
        if slot is None or (fragment.id and self.calls[slot][0] and fragment.id != self.calls[slot][0]):
            slot = len(self.calls)
            self.slot_of_index[fragment.index] = slot
            self.calls.append(["", "", ""])
        call = self.calls[slot]
        if fragment.id:
            call[0] = fragment.id
        function = fragment.function
        if function is not None:
            if function.name:
                call[1] += function.name
            if function.arguments:
                call[2] += function.arguments

    def turn(self) -> ModelTurn:
        """The finished ModelTurn; a stream cut off before its finish reason is retryable."""
        if self.finish_reason is None:
            raise ModelUnavailable("the model's stream ended before it finished (connection dropped)", usage=self.usage)
        stop = _STOP_REASONS.get(self.finish_reason, "other")
        truncated = stop == "max_tokens"
        calls = [
            build_tool_call(call_id or f"call_{n}", name, args, truncated=truncated)
            for n, (call_id, name, args) in enumerate(self.calls)
        ]
        if calls and stop == "end_turn":
            stop = "tool_use"  # some compatible servers say "stop" after tool calls
        return ModelTurn(
            text="".join(self.text), tool_calls=calls, stop_reason=stop, usage=self.usage or Usage(), model=self.model
        )


def to_openai_message(message: Message) -> dict[str, Any]:
    """Provider-neutral Message -> chat-completions message."""
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": message.content}
    if message.role == "assistant" and message.tool_calls:
        return {
            "role": "assistant",
            "content": message.content or None,
            "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                for c in message.tool_calls
            ],
        }
    return {"role": message.role, "content": message.content}


def _error_fields(error: openai.APIError) -> tuple[str, str]:
    body = error.body if isinstance(error.body, dict) else {}
    nested = body.get("error")
    inner: dict[str, Any] = nested if isinstance(nested, dict) else body
    code = str(inner.get("code") or error.code or "")
    kind = str(inner.get("type") or error.type or "")
    return code, kind


def translate_error(error: BaseException, secret: str | None, stall_s: float = 0, endpoint: str = "") -> ModelError:
    """The one place OpenAI SDK / httpx errors become harness.errors (keys redacted)."""
    transport = transport_error(
        error,
        timeouts=(openai.APITimeoutError,),
        unreachable=(openai.APIConnectionError,),
        secret=secret,
        stall_s=stall_s,
        endpoint=endpoint,
    )
    if transport is not None:
        return transport
    if not isinstance(error, openai.APIError):
        return ModelBadResponse(redact(f"unexpected client error: {error}", secret))
    code, kind = _error_fields(error)
    status = getattr(error, "status_code", None)
    text = redact(f"model API error{f' {status}' if status else ''}: {error.message}", secret)
    lowered = f"{code} {kind} {error.message}".lower()
    if isinstance(error, openai.APIResponseValidationError):
        return ModelBadResponse(text)
    if status in (401, 403):
        return ModelAuthError(text)
    if code in _SPEND_CODES or kind in _SPEND_CODES:
        return ModelSpendLimitError(text)
    if any(marker in lowered for marker in _CONTEXT_MARKERS):
        return ModelContextLengthError(text)
    headers = error.response.headers if isinstance(error, openai.APIStatusError) else {}
    if status == 429 or "rate_limit" in lowered:
        return ModelRateLimited(text, retry_after=parse_retry_after(headers))
    if status is None or status in (408, 409) or status >= 500:
        return ModelUnavailable(text, retry_after=parse_retry_after(headers))
    return ModelError(text)


def _factory(target: str, config: ProviderConfig, api_key: str | None) -> OpenAICompatProvider:
    return OpenAICompatProvider(config.model_copy(update={"model": target}), api_key=api_key)


register_provider("openai", _factory)
