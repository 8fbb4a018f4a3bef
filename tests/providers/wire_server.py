"""A local HTTP server that speaks OpenAI chat completions (SSE) and Anthropic Messages (SSE events).

Reusable by any test: start it, push scripted replies (turns and faults), point a real SDK client
at `server.openai_base_url` / `server.anthropic_base_url`.

    with WireServer() as server:
        server.push(openai_turn(text="hi"), openai_error(429, "slow down", headers={"retry-after": "2"}))
        ...
        server.requests[0].body["messages"]   # what the client sent
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One scripted HTTP answer: a whole body, or SSE frames flushed one by one."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    events: list[bytes] = field(default_factory=list)
    stall_after: int | None = None
    """Send this many frames, then hold the connection open without sending (a stalled stream)."""
    stall_s: float = 30.0
    delay_s: float = 0.0
    """Wait this long before the status line (a server reading a long prompt before its first token)."""


TOKENIZERS = ("/extras/tokenize/count", "/tokenize")
"""The routes a local server counts tokens on (answered 404 unless a test routes them)."""


@dataclass
class Recorded:
    """A request the server received."""

    path: str
    headers: dict[str, str]
    body: Any
    method: str = "POST"


class WireServer:
    """Threaded loopback server on a random port; replies are consumed in order."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        """The POST requests received (model calls, a token refresh, Ollama's /api/show)."""
        self.counts: list[Recorded] = []
        """The token-count requests received (llama.cpp's tokenizer routes, kept apart from model calls)."""
        self.gets: list[Recorded] = []
        """The GET requests received (a client asking what the server is)."""
        self._replies: list[Reply] = []
        self._checks: list[Callable[[Recorded], Reply | None]] = []
        self.routes: dict[str, Reply] = {}
        """Fixed answers by path, for any method, before any scripted reply (a server's info pages);
        a GET of another path is a 404."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    def require(self, check: Callable[[Recorded], Reply | None]) -> None:
        """Answer every request `check` objects to with its reply (as a strict server would), before
        any scripted reply is used."""
        self._checks.append(check)

    def push(self, *replies: Reply) -> None:
        with self._lock:
            self._replies.extend(replies)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._replies)

    def _next(self, recorded: Recorded, method: str = "POST") -> Reply:
        with self._lock:
            if recorded.path in TOKENIZERS:  # a loopback server is asked to count what it reported no usage for
                self.counts.append(recorded)
                return self.routes.get(recorded.path, Reply(status=404, body=b'{"detail": "Not Found"}'))
            (self.gets if method == "GET" else self.requests).append(recorded)
            if recorded.path in self.routes:
                return self.routes[recorded.path]
            if method == "GET":
                return Reply(status=404, body=b'{"error": "not found"}')
            for check in self._checks:
                refusal = check(recorded)
                if refusal is not None:
                    return refusal
            if self._replies:
                return self._replies.pop(0)
        return Reply(status=599, body=b'{"error": {"message": "wire server: no scripted reply left"}}')

    def __enter__(self) -> WireServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._httpd.shutdown()
        self._httpd.server_close()


def _handler_for(server: WireServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"  # the body ends when the connection closes

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length)
            try:
                body: Any = json.loads(raw)
            except ValueError:
                body = raw
            reply = server._next(Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, body))
            try:
                self._send(reply)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (stall tests): expected

        def do_GET(self) -> None:
            reply = server._next(
                Recorded(self.path, {k.lower(): v for k, v in self.headers.items()}, None, "GET"), "GET"
            )
            try:
                self._send(reply)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def _send(self, reply: Reply) -> None:
            if reply.delay_s and server._stop.wait(reply.delay_s):
                return
            self.send_response(reply.status)
            kind = "text/event-stream" if reply.events else "application/json"
            headers = {"content-type": kind, "connection": "close", **reply.headers}
            if not reply.events:
                headers["content-length"] = str(len(reply.body))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            if not reply.events:
                self.wfile.write(reply.body)
                return
            for n, frame in enumerate(reply.events):
                if reply.stall_after is not None and n >= reply.stall_after:
                    server._stop.wait(reply.stall_s)
                    return
                self.wfile.write(frame)
                self.wfile.flush()

    return Handler


# --- OpenAI chat completions --------------------------------------------------------------------


def sse_data(payload: Any) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\n\n"


def openai_chunk(
    delta: dict[str, Any] | None = None,
    finish: str | None = None,
    usage: dict[str, Any] | None = None,
    model: str = "gpt-4.1",
) -> dict[str, Any]:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": model,
        "choices": choices,
        "usage": usage,
    }


def openai_usage(prompt: int = 10, completion: int = 5, cached: int = 0) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def split(text: str, pieces: int) -> list[str]:
    """`text` cut into `pieces` nearly equal fragments (some may be empty when text is short)."""
    size = max(1, -(-len(text) // max(pieces, 1)))
    parts = [text[i : i + size] for i in range(0, len(text), size)]
    return parts or [""]


def openai_turn(
    text: str = "",
    tool_calls: Sequence[tuple[str, str, str]] = (),
    *,
    pieces: int = 1,
    interleave: bool = False,
    finish: str | None = None,
    usage: dict[str, Any] | None = None,
    no_usage: bool = False,
    raw_chunks: Sequence[dict[str, Any]] = (),
    call_fields: Callable[[str], dict[str, Any]] | None = None,
    **reply: Any,
) -> Reply:
    """A streamed turn: text in `pieces` chunks, then each (id, name, argument text) call in `pieces`
    argument fragments; `interleave` alternates fragments of parallel calls; `call_fields(name)` adds
    fields to each call's first fragment (a vendor's extras, such as Gemini's signatures)."""
    chunks = [openai_chunk({"role": "assistant", "content": ""})]
    chunks += [openai_chunk({"content": part}) for part in split(text, pieces) if part]
    streams = []
    for index, (call_id, name, args) in enumerate(tool_calls):
        head = {"index": index, "id": call_id, "type": "function", "function": {"name": name, "arguments": ""}}
        head.update(call_fields(name) if call_fields else {})
        frags = [{"index": index, "function": {"arguments": part}} for part in split(args, pieces)]
        streams.append([head, *frags])
    if interleave:
        order = [frag for group in _zip_longest(streams) for frag in group]
    else:
        order = [frag for stream in streams for frag in stream]
    chunks += [openai_chunk({"tool_calls": [frag]}) for frag in order]
    chunks += list(raw_chunks)
    chunks.append(openai_chunk({}, finish=finish or ("tool_calls" if tool_calls else "stop")))
    if not no_usage:  # llama.cpp's Python server sends none, even asked
        chunks.append(openai_chunk(None, usage=usage or openai_usage()))
    return Reply(events=[sse_data(c) for c in chunks] + [b"data: [DONE]\n\n"], **reply)


def _zip_longest(streams: list[list[Any]]) -> list[list[Any]]:
    longest = max((len(s) for s in streams), default=0)
    return [[s[i] for s in streams if i < len(s)] for i in range(longest)]


def openai_error(
    status: int,
    message: str,
    *,
    type: str = "invalid_request_error",
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> Reply:
    body = {"error": {"message": message, "type": type, "code": code, "param": None}}
    return Reply(status=status, body=json.dumps(body).encode(), headers=headers or {})


# --- Anthropic Messages --------------------------------------------------------------------------


def sse_event(name: str, payload: dict[str, Any]) -> bytes:
    return f"event: {name}\n".encode() + sse_data(payload)


def anthropic_events(
    text: str = "",
    tool_calls: Sequence[tuple[str, str, str]] = (),
    *,
    pieces: int = 1,
    stop_reason: str | None = None,
    input_tokens: int = 10,
    output_tokens: int = 5,
    cache_read: int = 0,
    cache_write: int = 0,
    model: str = "claude-sonnet-4-6",
    thinking: Sequence[dict[str, str]] = (),
) -> list[bytes]:
    """The SSE frames of one Messages stream (thinking blocks first, then the text block, then one
    block per tool call). A thinking entry is {"thinking": text, "signature": sig} or {"redacted": data}."""
    usage = {
        "input_tokens": input_tokens,
        "output_tokens": 1,
        "cache_read_input_tokens": cache_read,
        "cache_creation_input_tokens": cache_write,
    }
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    frames = [
        sse_event("message_start", {"type": "message_start", "message": message}),
        sse_event("ping", {"type": "ping"}),
    ]
    index = 0
    for block in thinking:
        if "redacted" in block:
            frames.append(_block_start(index, {"type": "redacted_thinking", "data": block["redacted"]}))
        else:
            frames.append(_block_start(index, {"type": "thinking", "thinking": "", "signature": ""}))
            frames += [
                _block_delta(index, {"type": "thinking_delta", "thinking": p}) for p in split(block["thinking"], 2)
            ]
            frames.append(_block_delta(index, {"type": "signature_delta", "signature": block["signature"]}))
        frames.append(sse_event("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    if text:
        frames.append(_block_start(index, {"type": "text", "text": ""}))
        frames += [_block_delta(index, {"type": "text_delta", "text": p}) for p in split(text, pieces)]
        frames.append(sse_event("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    for call_id, name, args in tool_calls:
        frames.append(_block_start(index, {"type": "tool_use", "id": call_id, "name": name, "input": {}}))
        frames += [_block_delta(index, {"type": "input_json_delta", "partial_json": p}) for p in split(args, pieces)]
        frames.append(sse_event("content_block_stop", {"type": "content_block_stop", "index": index}))
        index += 1
    reason = stop_reason or ("tool_use" if tool_calls else "end_turn")
    frames.append(
        sse_event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": reason, "stop_sequence": None},
                "usage": {"output_tokens": output_tokens},
            },
        )
    )
    frames.append(sse_event("message_stop", {"type": "message_stop"}))
    return frames


def anthropic_turn(text: str = "", tool_calls: Sequence[tuple[str, str, str]] = (), **kwargs: Any) -> Reply:
    reply = {k: kwargs.pop(k) for k in ("stall_after", "stall_s", "headers", "delay_s") if k in kwargs}
    return Reply(events=anthropic_events(text, tool_calls, **kwargs), **reply)


def anthropic_error_event(
    kind: str = "overloaded_error", message: str = "Overloaded", *, after: Sequence[bytes] = ()
) -> Reply:
    """HTTP 200, some frames, then an `error` event (what Anthropic sends when overloaded mid-stream)."""
    error = sse_event("error", {"type": "error", "error": {"type": kind, "message": message}})
    return Reply(events=[*after, error])


def anthropic_error(status: int, kind: str, message: str, *, headers: dict[str, str] | None = None) -> Reply:
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return Reply(status=status, body=json.dumps(body).encode(), headers=headers or {})


def _block_start(index: int, block: dict[str, Any]) -> bytes:
    return sse_event("content_block_start", {"type": "content_block_start", "index": index, "content_block": block})


def _block_delta(index: int, delta: dict[str, Any]) -> bytes:
    return sse_event("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})


# --- strict servers -------------------------------------------------------------------------------


def deepseek_thinking_check(recorded: Recorded) -> Reply | None:
    """DeepSeek's thinking mode: an assistant message that made tool calls must carry its
    reasoning_content back (an empty one will do), else HTTP 400."""
    for message in recorded.body.get("messages", []) if isinstance(recorded.body, dict) else []:
        if message.get("role") == "assistant" and message.get("tool_calls") and "reasoning_content" not in message:
            return openai_error(400, "The reasoning_content in the thinking mode must be passed back to the API.")
    return None


def anthropic_thinking_check(recorded: Recorded) -> Reply | None:
    """Extended thinking: with thinking on, the last assistant turn must start with its thinking or
    redacted_thinking blocks, unchanged (the signature is checked), else HTTP 400."""
    body = recorded.body if isinstance(recorded.body, dict) else {}
    if not body.get("thinking"):
        return None
    assistants = [m for m in body.get("messages", []) if m.get("role") == "assistant"]
    if not assistants:
        return None
    first = (assistants[-1].get("content") or [{}])[0]
    if first.get("type") not in ("thinking", "redacted_thinking") or (
        first.get("type") == "thinking" and not str(first.get("signature", "")).startswith("sig-")
    ):
        message = "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`."
        body_out = {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
        return Reply(status=400, body=json.dumps(body_out).encode())
    return None


def gemini_signature(name: str) -> dict[str, Any]:
    """The per-call extra Gemini 3 attaches (a fake's signature: `sig-` + the tool's name)."""
    return {"extra_content": {"google": {"thought_signature": f"sig-{name}"}}}


def gemini_signature_check(recorded: Recorded) -> Reply | None:
    """Gemini 3 through its OpenAI-compatible endpoint (a fake: no recording of it exists): every tool
    call of an earlier assistant turn must come back with the thought signature it was sent with
    (`extra_content.google.thought_signature`, `sig-` + the call's name here), else HTTP 400."""
    for message in recorded.body.get("messages", []) if isinstance(recorded.body, dict) else []:
        for call in message.get("tool_calls") or ():
            signature = ((call.get("extra_content") or {}).get("google") or {}).get("thought_signature")
            if signature != f"sig-{call['function']['name']}":
                return openai_error(400, "Function call is missing a thought_signature in functionCall parts.")
    return None


# --- OpenAI Responses API -------------------------------------------------------------------------


def responses_events(
    text: str = "",
    tool_calls: Sequence[tuple[str, str, str]] = (),
    *,
    reasoning: str | None = None,
    pieces: int = 2,
    status: str = "completed",
    model: str = "gpt-5.5",
    usage: dict[str, Any] | None = None,
) -> list[bytes]:
    """The SSE frames of one Responses stream (a fake in the recorded streams' shape): an optional
    reasoning item (`reasoning` is its encrypted content), the message, then one function_call item
    per (call_id, name, argument text), each item at its own output_index."""
    frames = [_responses_event("response.created", response=_response(model, "in_progress", []))]
    items: list[dict[str, Any]] = []
    if reasoning is not None:
        item = {"id": f"rs_{len(items)}", "type": "reasoning", "encrypted_content": reasoning, "summary": []}
        frames += _item_frames(len(items), item)
        items.append(item)
    if text:
        index = len(items)
        frames.append(_responses_event("response.output_item.added", output_index=index, item={"id": f"msg_{index}", "type": "message", "role": "assistant", "content": []}))  # fmt: skip
        frames += [
            _responses_event("response.output_text.delta", output_index=index, content_index=0, delta=part)
            for part in split(text, pieces)
        ]
        item = {"id": f"msg_{index}", "type": "message", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}]}  # fmt: skip
        frames.append(_responses_event("response.output_item.done", output_index=index, item=item))
        items.append(item)
    for call_id, name, args in tool_calls:
        index = len(items)
        head = {"id": f"fc_{index}", "type": "function_call", "call_id": call_id, "name": name, "arguments": ""}
        frames.append(_responses_event("response.output_item.added", output_index=index, item=head))
        frames += [
            _responses_event("response.function_call_arguments.delta", output_index=index, delta=part)
            for part in split(args, pieces)
        ]
        item = {**head, "arguments": args, "status": "completed"}
        frames.append(_responses_event("response.output_item.done", output_index=index, item=item))
        items.append(item)
    final = _response(model, status, items, usage or {"input_tokens": 50, "output_tokens": 20})
    if status == "incomplete":
        final["incomplete_details"] = {"reason": "max_output_tokens"}
    frames.append(_responses_event(f"response.{status}", response=final))
    return frames


def responses_turn(text: str = "", tool_calls: Sequence[tuple[str, str, str]] = (), **kwargs: Any) -> Reply:
    return Reply(events=responses_events(text, tool_calls, **kwargs))


def responses_reasoning_check(recorded: Recorded) -> Reply | None:
    """Responses with `store: false` (a strict fake): every reasoning item an earlier turn produced
    must come back whole (its encrypted content) right before the function call it led to."""
    body = recorded.body if isinstance(recorded.body, dict) else {}
    items = body.get("input") or []
    for n, item in enumerate(items):
        if item.get("type") == "function_call":
            before = items[n - 1] if n else {}
            if before.get("type") != "reasoning" or not before.get("encrypted_content"):
                message = f"Item '{item.get('call_id')}' of type 'function_call' was provided without its required 'reasoning' item."
                return openai_error(400, message)
    return None


def _response(
    model: str, status: str, output: list[dict[str, Any]], usage: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "model": model, "status": status, "output": output,
            "usage": usage, "incomplete_details": None, "error": None}  # fmt: skip


def _responses_event(kind: str, **fields: Any) -> bytes:
    return sse_event(kind, {"type": kind, **fields})


def _item_frames(index: int, item: dict[str, Any]) -> list[bytes]:
    return [
        _responses_event("response.output_item.added", output_index=index, item=item),
        _responses_event("response.output_item.done", output_index=index, item=item),
    ]


# --- AWS event-stream framing (Bedrock's InvokeModelWithResponseStream) -------------------------


def aws_event_frame(payload: bytes, headers: dict[str, str]) -> bytes:
    """One message of the AWS event-stream binary framing: prelude (total and header lengths, CRC),
    string headers, payload, message CRC."""
    import struct
    import zlib

    encoded = b"".join(
        bytes([len(name)]) + name.encode() + b"\x07" + struct.pack(">H", len(value)) + value.encode()
        for name, value in headers.items()
    )
    total = 12 + len(encoded) + len(payload) + 4
    prelude = struct.pack(">II", total, len(encoded))
    head = prelude + struct.pack(">I", zlib.crc32(prelude)) + encoded + payload
    return head + struct.pack(">I", zlib.crc32(head))


def bedrock_stream(sse_frames: Sequence[bytes]) -> Reply:
    """A Messages stream as Bedrock sends it (a fake: no recording of the streamed form exists): each
    SSE event's JSON, base64 in a `chunk` event of the AWS event-stream framing."""
    import base64

    frames = []
    for frame in sse_frames:
        data = next(line[6:] for line in frame.decode().splitlines() if line.startswith("data: "))
        if json.loads(data).get("type") == "ping":
            continue
        payload = json.dumps({"bytes": base64.b64encode(data.encode()).decode()}).encode()
        frames.append(aws_event_frame(payload, {":event-type": "chunk", ":content-type": "application/json", ":message-type": "event"}))  # fmt: skip
    return Reply(events=frames, headers={"content-type": "application/vnd.amazon.eventstream"})


def anthropic_adaptive_check(recorded: Recorded) -> Reply | None:
    """The newest Claude models (a strict fake): a budget form of thinking is refused with HTTP 400."""
    body = recorded.body if isinstance(recorded.body, dict) else {}
    if (body.get("thinking") or {}).get("type") == "enabled":
        message = "thinking.type.enabled is not supported for this model. Use thinking.type.adaptive and output_config.effort."
        return anthropic_error(400, "invalid_request_error", message)
    return None
