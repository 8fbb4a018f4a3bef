"""A model for the benches that host an agent: Anthropic's Messages API (streamed) on 127.0.0.1, whose
answers are a list of tool calls, one per answer by how many tool results the conversation holds, then
a last text; a request offering no tools (a title, a summary) gets a short text. It notes when each
request arrived, and how many tool results it held, so a bench can time the calls between them."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

USAGE = {"input_tokens": 120, "output_tokens": 1, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}


@dataclass(frozen=True)
class Arrival:
    """A request with tools: when it came (monotonic seconds) and how many tool results it held."""

    at: float
    results: int


def _sse(name: str, payload: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode()


def anthropic_answer(text: str = "", call: tuple[str, dict[str, Any]] | None = None, ident: str = "toolu_1") -> bytes:
    """One streamed Messages answer: text, or one tool_use block."""
    start: dict[str, Any] = {"type": "message", "id": "msg_1", "role": "assistant", "model": "claude-sonnet-4-6", "content": [],
             "stop_reason": None, "stop_sequence": None, "usage": USAGE}  # fmt: skip
    frames = [_sse("message_start", {"type": "message_start", "message": start})]
    if call is None:
        block: dict[str, Any] = {"type": "text", "text": ""}
        delta: dict[str, Any] = {"type": "text_delta", "text": text}
    else:
        block = {"type": "tool_use", "id": ident, "name": call[0], "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(call[1])}
    stop = "tool_use" if call else "end_turn"
    frames += [
        _sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}),
        _sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
        _sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        _sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                               "usage": {"output_tokens": 30}}),
        _sse("message_stop", {"type": "message_stop"}),
    ]  # fmt: skip
    return b"".join(frames)


def tool_results(body: dict[str, Any]) -> int:
    """How many tool results the conversation of a Messages request holds."""
    return sum(
        1
        for message in body.get("messages") or []
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "tool_result"
    )


class MessagesServer:
    """The server (see the module): `calls` then `last`; `arrivals` as they came."""

    def __init__(self, calls: list[tuple[str, dict[str, Any]]], last: str = "Done.") -> None:
        self.calls, self.last = calls, last
        self.arrivals: list[Arrival] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
                out = server.answer(body if isinstance(body, dict) else {})
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args: object) -> None:
                return None

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="bench-model", daemon=True)

    def answer(self, body: dict[str, Any]) -> bytes:
        if not body.get("tools"):
            return anthropic_answer("ok")
        done = tool_results(body)
        self.arrivals.append(Arrival(time.monotonic(), done))
        if done < len(self.calls):
            return anthropic_answer(call=self.calls[done], ident=f"toolu_{done + 1}")
        return anthropic_answer(self.last)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def gaps_ms(self) -> list[float]:
        """The time between the request holding k tool results and the one holding k+1 (each call, as the
        agent made it: its tool, the agent's own handling, the next request)."""
        first: dict[int, float] = {}
        for arrival in self.arrivals:
            first.setdefault(arrival.results, arrival.at)
        return [(first[k + 1] - first[k]) * 1000 for k in sorted(first) if k + 1 in first]

    def __enter__(self) -> MessagesServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
