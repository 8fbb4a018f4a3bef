"""`openai:MODEL` — chat completions over the official `openai` SDK, streamed.

Works with api.openai.com and compatible servers (vLLM, llama.cpp server, Ollama) via `base_url`.
Tool-call fragments are assembled by their `index`, so parallel calls never mix arguments.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any

import httpx2
import openai

from harness.errors import (
    ModelAuthError,
    ModelBadResponse,
    ModelContextLengthError,
    ModelError,
    ModelParameterRejected,
    ModelRateLimited,
    ModelServerUnsupported,
    ModelSpendLimitError,
    ModelUnavailable,
)
from harness.providers.arguments import build_tool_call, safe_turn
from harness.providers.config import ProviderConfig, redact
from harness.providers.counting import TokenCounter
from harness.providers.factory import register_provider
from harness.providers.retry import parse_retry_after
from harness.providers.sse import WireItem, is_whole_json, read_body, refuse_unreadable
from harness.providers.stream import drain, sdk_timeout, transport_error
from harness.types import Message, ModelTurn, Reasoning, Rollout, StopReason, ToolCall, ToolSchema, Usage

DEFAULT_BASE_URL = "https://api.openai.com/v1"
REASONING_FAMILIES = ("o1", "o3", "o4", "gpt-5", "codex", "deepseek-reasoner")
"""Model families that reason: they take `max_completion_tokens` (not `max_tokens`) and refuse a
sampling temperature. Matched on the model's name after any `vendor/` routing prefix."""
LIMIT_FIELDS = ("max_tokens", "max_completion_tokens")
MESSAGE_FIELDS = frozenset(
    {"role", "content", "refusal", "tool_calls", "function_call", "audio", "annotations", "name",
     "reasoning_content", "reasoning"}
)  # fmt: skip
"""Fields of an assistant message harness reads; any other a server adds (Gemini's `extra_content`,
`thought_signature`) is kept on the turn and echoed back exactly."""
CALL_FIELDS = frozenset({"index", "id", "type", "function"})
"""Fields of a tool call harness reads; any other is the call's opaque provider data."""
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
        self.echo = reasoning_echo(config)
        self.limit_field = limit_field(config)
        self._client = openai_client(config, api_key, http_client)
        self.local = config.is_local()
        self.counter = TokenCounter(config.base_url, self.local, http_client)

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
        """Send the conversation, assemble the streamed (or whole) answer into a ModelTurn.

        With the limit field left to `auto`, a server that refuses the one chosen by the model's name
        (a new reasoning model) gets the request once more with the other, and keeps it from then on."""
        try:
            return self._complete(messages, tools, max_tokens=max_tokens, timeout_s=timeout_s)
        except ModelParameterRejected as error:
            if self.config.max_tokens_field != "auto" or error.param != self.limit_field:
                raise
            self.limit_field = next(field for field in LIMIT_FIELDS if field != error.param)
            return self._complete(messages, tools, max_tokens=max_tokens, timeout_s=timeout_s)

    def _complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema], *, max_tokens: int, timeout_s: float | None
    ) -> ModelTurn:
        request: dict[str, Any] = {
            "model": self.model,
            "messages": [to_openai_message(m, self.echo, local=self.local) for m in messages],
            "stream": True,
            "stream_options": {"include_usage": True},
            self.limit_field: max_tokens,
        }
        if tools:
            request["tools"] = [local_tool(t) if self.local else t.openai() for t in tools]
        forced = self.config.forced_tool(messages, tools)
        if forced:
            request["tool_choice"] = (
                forced if forced == "required" else {"type": "function", "function": {"name": forced}}
            )
        if self.config.rollout:  # each sampled token's log-probability, and its id where the server gives it
            request["logprobs"] = True
            request["top_logprobs"] = 1  # (llama-cpp-python's server sends none without it)
            if self.config.base_url:  # a compatible server's own field (vLLM, SGLang), never sent to OpenAI's
                request["extra_body"] = {"return_token_ids": True}
        if self.config.reasoning_effort:
            request["reasoning_effort"] = self.config.reasoning_effort
        elif self.config.temperature is not None and not is_reasoning_model(self.model):
            request["temperature"] = self.config.temperature
        assembly = StreamAssembly({t.name for t in tools})
        latency_ms = drain(
            lambda timeout: WireAnswer(self._client.chat.completions.create(**request, timeout=timeout)),
            assembly.add,
            lambda: assembly.usage,
            config=self.config,
            limit_s=timeout_s,
            foreign=(openai.OpenAIError, httpx2.HTTPError),
            translate=self._translate,
        )
        turn = assembly.turn().model_copy(update={"latency_ms": latency_ms})
        if assembly.usage is None:  # the server sent none, even asked: counted, marked estimated
            turn = turn.model_copy(update={"usage": self.counter.usage(messages, tools, turn)})
        return safe_turn(turn)

    def _translate(self, error: BaseException, silence: str) -> ModelError:
        return translate_error(error, self._secret, silence, str(self._client.base_url))


GRAMMAR_LENGTH_BOUND = 1000
"""The longest string bound a local server's schema grammar is sent (see `local_tool`)."""


def local_tool(tool: ToolSchema) -> dict[str, Any]:
    """A tool entry for a local server, its string length bounds above GRAMMAR_LENGTH_BOUND left out:
    llama.cpp compiles a schema into a grammar with a rule per allowed character, a bound of thousands
    fails to compile (and has taken llama-cpp-python's server down with it). harness still enforces
    every bound when the call arrives."""

    def bounded(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                key: bounded(value)
                for key, value in node.items()
                if not (key in ("maxLength", "minLength") and isinstance(value, int) and value > GRAMMAR_LENGTH_BOUND)
            }
        if isinstance(node, list):
            return [bounded(item) for item in node]
        return node

    entry = tool.openai()
    entry["function"]["parameters"] = bounded(tool.parameters)
    return entry


def openai_client(config: ProviderConfig, api_key: str | None, http_client: httpx2.Client | None) -> openai.OpenAI:
    """The SDK client of both OpenAI protocols: explicit key and base_url so the SDK never consults
    the environment; max_retries=0 so the retry layer is the only retry policy."""
    return openai.OpenAI(
        api_key=api_key or "not-needed",
        organization=None,
        project=None,
        base_url=config.base_url or DEFAULT_BASE_URL,
        timeout=sdk_timeout(config),
        max_retries=0,
        http_client=http_client,
    )


class WireAnswer:
    """The SDK made the request (and raised for an HTTP error status); the body is read here."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.response = stream.response

    def __enter__(self) -> Iterator[WireItem]:
        kind = self.response.headers.get("content-type", "")
        refuse_unreadable(kind, self.response)
        whole = self.response.read() if is_whole_json(kind) else None
        return read_body(self.response.iter_lines(), whole)

    def __exit__(self, *exc: object) -> None:
        self._stream.close()


class StreamAssembly:
    """Accumulates chat-completion chunks (wire JSON); tool calls keyed by their index (parallel-safe)."""

    def __init__(self, tool_names: set[str] | None = None) -> None:
        self.text: list[str] = []
        self.refusal: list[str] = []
        self.reasoning: list[str] = []
        self.calls: list[list[str]] = []  # [id, name, argument text] per call, in order of first sight
        self.slot_of_index: dict[int, int] = {}
        self.finish_reason: str | None = None
        self.done = False
        self.usage: Usage | None = None
        self.model = ""
        self.tool_names = tool_names or set()
        self.failed_call: ToolCall | None = None
        self.extra: dict[str, Any] = {}  # fields of the message harness does not read, echoed back
        self.tokens: list[str] = []  # `logprobs`: each sampled token's text and log-probability, ids if given
        self.logprobs: list[float] = []
        self.token_ids: list[int] | None = None
        self.prompt_ids: list[int] | None = None
        self.call_data: dict[int, dict[str, Any]] = {}  # slot -> a call's fields harness does not read

    def add(self, item: WireItem) -> None:
        """Fold one item of the answer into the turn."""
        if item.kind == "done":
            self.done = True
        elif item.kind == "whole":
            self._add_completion(item.payload)
        elif isinstance(item.payload, dict) and ("error" in item.payload or item.event == "error"):
            self._add_usage(item.payload.get("usage"))
            self.failed_call = stream_error(item.payload)  # raises unless the server could not parse a call
            self.done = True
        elif isinstance(item.payload, dict):
            self.add_chunk(item.payload)

    def add_chunk(self, chunk: dict[str, Any]) -> None:
        """Fold one ChatCompletionChunk (as sent on the wire)."""
        self.model = chunk.get("model") or self.model
        self._add_usage(chunk.get("usage"))
        self._add_prompt_ids(chunk)
        for choice in chunk.get("choices") or ():
            delta = choice.get("delta") or {}
            self._add_message(delta)
            self._add_tokens(choice)
            self.finish_reason = choice.get("finish_reason") or self.finish_reason

    def _add_completion(self, body: Any) -> None:
        """A whole ChatCompletion from a server that ignored `stream: true`."""
        if not isinstance(body, dict) or "choices" not in body:
            if isinstance(body, dict) and "error" in body:
                self.failed_call = stream_error(body)
                self.done = True
                return
            raise ModelBadResponse(f"the model endpoint answered with JSON that is no completion: {str(body)[:200]}")
        self.model = body.get("model") or self.model
        self._add_usage(body.get("usage"))
        self._add_prompt_ids(body)
        for choice in body["choices"][:1]:
            message = dict(choice.get("message") or {})
            message["tool_calls"] = [{"index": n, **call} for n, call in enumerate(message.get("tool_calls") or [])]
            self._add_message(message)
            self._add_tokens(choice)
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
        self.done = True

    def _add_message(self, delta: dict[str, Any]) -> None:
        if delta.get("content"):
            self.text.append(delta["content"])
        if delta.get("refusal"):
            self.refusal.append(delta["refusal"])
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            self.reasoning.append(reasoning)
        for fragment in delta.get("tool_calls") or ():
            self._add_fragment(fragment)
        self.extra.update({k: v for k, v in delta.items() if k not in MESSAGE_FIELDS and v is not None})

    def _add_tokens(self, choice: dict[str, Any]) -> None:
        """A choice's sampled tokens (`logprobs.content`) and their ids (`token_ids`), as the server
        sends them; anything not shaped so is left out, never guessed."""
        content = (choice.get("logprobs") or {}).get("content") if isinstance(choice.get("logprobs"), dict) else None
        for entry in content or ():
            token, logprob = (entry.get("token"), entry.get("logprob")) if isinstance(entry, dict) else (None, None)
            if isinstance(token, str) and isinstance(logprob, int | float) and not isinstance(logprob, bool):
                self.tokens.append(token)
                self.logprobs.append(float(logprob))
        ids = choice.get("token_ids")
        if isinstance(ids, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            self.token_ids = [*(self.token_ids or []), *ids]

    def _add_prompt_ids(self, body: dict[str, Any]) -> None:
        ids = body.get("prompt_token_ids")
        if isinstance(ids, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            self.prompt_ids = ids

    def _add_usage(self, usage: Any) -> None:
        if not isinstance(usage, dict):
            return
        prompt = usage.get("prompt_tokens_details") or {}
        completion = usage.get("completion_tokens_details") or {}
        self.usage = Usage(
            input_tokens=usage.get("prompt_tokens") or 0,
            output_tokens=usage.get("completion_tokens") or 0,
            cached_input_tokens=prompt.get("cached_tokens") or 0,
            reasoning_tokens=completion.get("reasoning_tokens") or 0,
        )

    def _add_fragment(self, fragment: dict[str, Any]) -> None:
        index = fragment.get("index", len(self.calls))
        slot = self.slot_of_index.get(index)
        fragment_id = fragment.get("id") or ""
        # A new id at a known index means a server that reuses index 0 for every call.
        if slot is None or (fragment_id and self.calls[slot][0] and fragment_id != self.calls[slot][0]):
            slot = len(self.calls)
            self.slot_of_index[index] = slot
            self.calls.append(["", "", ""])
        call = self.calls[slot]
        if fragment_id:
            call[0] = fragment_id
        function = fragment.get("function") or {}
        if function.get("name"):
            call[1] = self._name(call[1], function["name"])
        if function.get("arguments"):
            call[2] += function["arguments"]
        extra = {k: v for k, v in fragment.items() if k not in CALL_FIELDS and v is not None}
        if extra:
            self.call_data.setdefault(slot, {}).update(extra)

    def _name(self, so_far: str, piece: str) -> str:
        """The spec sends a call's name once; some servers send the whole name in every fragment, and
        some send it in pieces. A piece equal to (or extending) what is there replaces it; a piece that
        is a whole tool name on its own, where appending would make none, replaces it too."""
        if not so_far or piece == so_far or piece.startswith(so_far):
            return piece
        joined = so_far + piece
        if piece in self.tool_names and not any(name.startswith(joined) for name in self.tool_names):
            return piece
        if (
            so_far in self.tool_names
            and joined not in self.tool_names
            and not any(name.startswith(joined) for name in self.tool_names)
        ):
            return so_far  # the whole name again, but differently cased or spaced: keep the known one
        return joined

    def turn(self) -> ModelTurn:
        """The finished ModelTurn. A stream that reached `[DONE]` ended even without a finish reason
        (inferred: tool calls present means tool use); one cut off before either is retryable."""
        if self.finish_reason is None and not self.done:
            raise ModelUnavailable("the model's stream ended before it finished (connection dropped)", usage=self.usage)
        truncated = self.finish_reason == "length"
        calls = [
            build_tool_call(call_id or f"call_{n}", name, args, truncated=truncated).model_copy(
                update={"provider_data": self.call_data.get(n, {})}
            )
            for n, (call_id, name, args) in enumerate(self.calls)
        ]
        if self.failed_call is not None:
            calls.append(self.failed_call)
        refusal = "".join(self.refusal)
        if refusal:
            stop: StopReason = "refusal"
        elif self.finish_reason is None:
            stop = "tool_use" if calls else "end_turn"
        else:
            stop = _STOP_REASONS.get(self.finish_reason, "other")
        if calls and stop == "end_turn":
            stop = "tool_use"  # some compatible servers say "stop" after tool calls
        text = "".join(self.text) or refusal
        reasoning = Reasoning(text="".join(self.reasoning), extra=self.extra) if self.reasoning or self.extra else None
        sampled = self.tokens or self.token_ids is not None or self.prompt_ids is not None
        rollout = (
            Rollout(
                tokens=self.tokens, logprobs=self.logprobs, completion_ids=self.token_ids, prompt_ids=self.prompt_ids
            )
            if sampled
            else None
        )
        return ModelTurn(
            text=text,
            tool_calls=calls,
            stop_reason=stop,
            usage=self.usage or Usage(),
            model=self.model,
            refusal=refusal,
            reasoning=reasoning,
            rollout=rollout,
        )


def stream_error(payload: dict[str, Any]) -> ToolCall:
    """An error object sent inside a stream after a 200 (OpenRouter's data chunk, Groq's `event: error`):
    classified by the code inside it, as an HTTP status would be. A `tool_use_failed` (the server could
    not parse the tool call the model wrote) is not an error of the call: it comes back as a tool call
    that failed to parse, so the model is told exactly like for invalid JSON and can try again."""
    nested = payload.get("error")
    error: dict[str, Any] = nested if isinstance(nested, dict) else payload
    if isinstance(nested, str) and nested:  # `{"error": "tool_use_failed"}`: the string is its code
        error = {**payload, "code": nested, "message": payload.get("message") or nested}
    message = str(error.get("message") or "an error occurred during streaming")
    code, kind = error.get("code"), str(error.get("type") or "")
    if code == "tool_use_failed" or kind == "tool_use_failed":
        raw = str(error.get("failed_generation") or "")
        return ToolCall(
            id="call_tool_use_failed",
            name=_called_name(raw),
            raw_arguments=raw,
            parse_error=f"the server could not parse this tool call ({message})",
        )
    status = _status_of(code, error, payload)
    text = f"model API error in the stream{f' {status}' if status else ''}: {message}"
    lowered = f"{code} {kind} {message}".lower()
    if any(marker in lowered for marker in _CONTEXT_MARKERS):
        raise ModelContextLengthError(text)
    if code in _SPEND_CODES or kind in _SPEND_CODES:
        raise ModelSpendLimitError(text)
    if status in (401, 403):
        raise ModelAuthError(text)
    if status == 429:
        raise ModelRateLimited(text)
    if status is None or status in (408, 409) or status >= 500:
        raise ModelUnavailable(text)
    raise ModelError(text)


def _status_of(code: Any, error: dict[str, Any], payload: dict[str, Any]) -> int | None:
    """The HTTP status an in-band error stands for: a number it carries, else what its type or code
    names (`invalid_request_error` is a 400 whatever else it says: never retried, each retry billed)."""
    for value in (code, error.get("status"), error.get("status_code"), payload.get("status_code")):
        if isinstance(value, int) and not isinstance(value, bool) and 100 <= value <= 599:
            return value
        if isinstance(value, str) and value.isdigit() and 100 <= int(value) <= 599:
            return int(value)
    for value in (error.get("type"), code, error.get("status"), payload.get("type")):
        if isinstance(value, str):
            for names, status in _NAMED_STATUS:
                if any(name in value.lower() for name in names):
                    return status
    return None


_NAMED_STATUS: tuple[tuple[tuple[str, ...], int], ...] = (
    (("rate_limit", "too_many_requests", "resource_exhausted"), 429),
    (("authentication", "unauthenticated", "invalid_api_key", "unauthorized"), 401),
    (("permission", "forbidden"), 403),
    (("not_found",), 404),
    (("server_error", "internal", "overloaded", "unavailable", "api_error", "timeout", "bad_gateway"), 503),
    (("invalid_request", "bad_request", "invalid_argument", "unprocessable", "validation", "tool_use_failed"), 400),
)
"""What an error's type or code names, as the status it stands for (OpenAI's, Groq's, OpenRouter's,
Gemini's and vLLM's names), the first match deciding."""


def _called_name(raw: str) -> str:
    """The tool name a failed generation mentions (`{"name": "read_file", ...}`), else a marker."""
    try:
        value = json.loads(raw)
    except ValueError:
        return "unparsed_tool_call"
    name = value.get("name") if isinstance(value, dict) else None
    return name if isinstance(name, str) and name else "unparsed_tool_call"


def is_reasoning_model(model: str) -> bool:
    """True for the reasoning families (o-series, GPT-5, Codex, DeepSeek's reasoner), by name."""
    return model.lower().rsplit("/", 1)[-1].startswith(REASONING_FAMILIES)


def limit_field(config: ProviderConfig) -> str:
    """The request field that carries the output limit: the config's, or with `auto` the one the model
    family takes (`max_completion_tokens` for reasoning models and on OpenAI's own endpoint, which
    deprecates `max_tokens`; `max_tokens` for every other compatible server)."""
    if config.max_tokens_field != "auto":
        return config.max_tokens_field
    official = "api.openai.com" in (config.base_url or DEFAULT_BASE_URL).lower()
    return "max_completion_tokens" if official or is_reasoning_model(config.model) else "max_tokens"


def reasoning_echo(config: ProviderConfig) -> str:
    """The reasoning_echo setting with `auto` resolved for the endpoint and model."""
    if config.reasoning_echo != "auto":
        return config.reasoning_echo
    endpoint = (config.base_url or DEFAULT_BASE_URL).lower()
    if "api.openai.com" in endpoint:
        return "never"
    if "deepseek" in endpoint or config.model.lower().startswith("deepseek"):
        return "tool_turns"
    return "with_reasoning"


def to_openai_message(message: Message, echo: str = "never", *, local: bool = False) -> dict[str, Any]:
    """Provider-neutral Message -> chat-completions message (with its reasoning when `echo` says). A
    tool-call turn without text says so with null content, or with "" to a local server
    (llama-cpp-python's server refuses null there)."""
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": message.content}
    if message.role != "assistant":
        return {"role": message.role, "content": message.content}
    wire: dict[str, Any] = {"role": "assistant", "content": message.content or ("" if local else None)}
    if message.tool_calls:
        wire["tool_calls"] = [
            {
                **c.provider_data,
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": arguments_text(c)},
            }
            for c in message.tool_calls
        ]
    else:
        wire["content"] = message.content
    if message.reasoning:
        wire.update({k: v for k, v in message.reasoning.extra.items() if k not in MESSAGE_FIELDS})
    reasoning = message.reasoning.text if message.reasoning else ""
    if (echo == "with_reasoning" and reasoning) or (echo == "tool_turns" and (message.tool_calls or reasoning)):
        wire["reasoning_content"] = reasoning
    return wire


def arguments_text(call: ToolCall) -> str:
    """What the model sent: its own text when it was not valid JSON (so the echo is faithful)."""
    return (
        call.raw_arguments
        if call.parse_error is not None and call.raw_arguments is not None
        else json.dumps(call.arguments)
    )


def _error_fields(error: openai.APIError) -> tuple[str, str]:
    body = error.body if isinstance(error.body, dict) else {}
    nested = body.get("error")
    inner: dict[str, Any] = nested if isinstance(nested, dict) else body
    code = str(inner.get("code") or error.code or "")
    kind = str(inner.get("type") or error.type or "")
    return code, kind


SERVER_CANNOT_DO_TOOLS = "tools param requires --jinja flag"
"""What a llama.cpp server started without --jinja answers to any request with tools (HTTP 500)."""
MODEL_CANNOT_DO_TOOLS = "does not support tools"
"""What Ollama answers (HTTP 400) when the model's template has no tool calling."""


def _error_param(error: openai.APIError) -> str:
    body = error.body if isinstance(error.body, dict) else {}
    nested = body.get("error")
    inner: dict[str, Any] = nested if isinstance(nested, dict) else body
    return str(inner.get("param") or getattr(error, "param", None) or "")


def not_found_text(error: openai.APIError, endpoint: str, text: str) -> str:
    """A 404 that names the path asked, and the base URL that was likely meant (most servers serve
    the OpenAI protocol under /v1)."""
    url = str(error.request.url) if getattr(error, "request", None) is not None else endpoint
    hint = ""
    base = endpoint.rstrip("/")
    if base and not base.endswith("/v1"):
        hint = f"; the base URL may lack /v1: try --base-url {base}/v1"
    return f"{text} (asked POST {url}{hint})"


def translate_error(error: BaseException, secret: str | None, silence: str = "", endpoint: str = "") -> ModelError:
    """The one place OpenAI SDK / httpx errors become harness.errors (keys redacted)."""
    transport = transport_error(
        error,
        timeouts=(openai.APITimeoutError,),
        unreachable=(openai.APIConnectionError,),
        secret=secret,
        silence=silence,
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
    if status == 404 and code != "model_not_found":
        return ModelError(redact(not_found_text(error, endpoint, text), secret))
    if code == "unsupported_parameter":
        return ModelParameterRejected(text, param=_error_param(error))
    if SERVER_CANNOT_DO_TOOLS in lowered:
        return ModelServerUnsupported(redact(f"{text} (a llama.cpp server: start it with --jinja)", secret))
    if MODEL_CANNOT_DO_TOOLS in lowered:
        fix = "harness needs tool calls: pick a model that has them (Ollama's library tags them `tools`)"
        return ModelServerUnsupported(redact(f"{text} ({fix})", secret))
    if code in _SPEND_CODES or kind in _SPEND_CODES:
        return ModelSpendLimitError(text)
    if any(marker in lowered for marker in _CONTEXT_MARKERS):
        return ModelContextLengthError(text)
    headers = error.response.headers if isinstance(error, openai.APIStatusError) else {}
    if status == 429 or "rate_limit" in lowered:
        return ModelRateLimited(text, retry_after=parse_retry_after(headers))
    if status is not None and status >= 500 and "validation error" in lowered and "'loc'" in lowered:
        # a server that answers 500 for a request it refused by its shape (llama-cpp-python's pydantic
        # models): the same request would be refused again, so it is not retried
        return ModelError(f"{text[:800]}{' …' if len(text) > 800 else ''} (the server refused the request's shape)")
    if status is None or status in (408, 409) or status >= 500:
        return ModelUnavailable(text, retry_after=parse_retry_after(headers))
    return ModelError(text)


def _factory(target: str, config: ProviderConfig, api_key: str | None) -> OpenAICompatProvider:
    return OpenAICompatProvider(config.model_copy(update={"model": target}), api_key=api_key)


register_provider("openai", _factory)
