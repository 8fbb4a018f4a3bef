"""Loopback wire servers of the models hosted agents speak, each scripted to do what a person would ask
of a coding agent on the example (run the tests, read the broken file, fix it, run the tests again,
say so), deciding its next answer from how many tool results the conversation holds. Any other request
an agent makes (a title, a summary) gets a short text."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

RUN_TESTS = "python3 -m pytest -q"
FIX = {"old": "    return a - b\n\n\ndef subtract", "new": "    return a + b\n\n\ndef subtract"}


@dataclass
class Seen:
    """A request the server got: its path, headers and body."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]


@dataclass
class Script:
    """The calls the model makes, one per answer, then its last words."""

    calls: list[tuple[str, dict[str, Any]]]
    last: str = "I fixed add() in calc/ops.py (it subtracted); the tests pass now."
    seen: list[Seen] = field(default_factory=list)


def claude_fix(tool_prefix: str = "mcp__harness__") -> Script:
    """Claude Code fixing the example: harness's run_command, its own Read and Edit."""
    return Script(
        calls=[
            (f"{tool_prefix}run_command", {"command": RUN_TESTS}),
            ("Read", {"file_path": "/workspace/calc/ops.py"}),
            ("Edit", {"file_path": "/workspace/calc/ops.py", "old_string": FIX["old"], "new_string": FIX["new"]}),
            (f"{tool_prefix}run_command", {"command": RUN_TESTS}),
        ]
    )


def _sse(name: str, payload: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(payload)}\n\n".encode()


def anthropic_answer(text: str = "", call: tuple[str, dict[str, Any]] | None = None, ident: str = "toolu_1") -> bytes:
    """One streamed Messages answer: text, or one tool_use block."""
    usage = {"input_tokens": 120, "output_tokens": 1, "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}
    start = {"type": "message", "id": "msg_1", "role": "assistant", "model": "claude-sonnet-4-6", "content": [],
             "stop_reason": None, "stop_sequence": None, "usage": usage}  # fmt: skip
    frames = [_sse("message_start", {"type": "message_start", "message": start})]
    if call is None:
        frames += [
            _sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            _sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
        ]  # fmt: skip
    else:
        name, arguments = call
        block = {"type": "tool_use", "id": ident, "name": name, "input": {}}
        frames += [
            _sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}),
            _sse("content_block_delta", {"type": "content_block_delta", "index": 0,
                                         "delta": {"type": "input_json_delta", "partial_json": json.dumps(arguments)}}),
        ]  # fmt: skip
    frames += [
        _sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        _sse("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use" if call else "end_turn",
                                                                  "stop_sequence": None}, "usage": {"output_tokens": 30}}),
        _sse("message_stop", {"type": "message_stop"}),
    ]  # fmt: skip
    return b"".join(frames)


def tool_results(body: dict[str, Any]) -> int:
    """How many tool results the conversation of a Messages request holds."""
    count = 0
    for message in body.get("messages") or []:
        content = message.get("content")
        if isinstance(content, list):
            count += sum(1 for block in content if isinstance(block, dict) and block.get("type") == "tool_result")
    return count


class AnthropicServer:
    """The Messages API on 127.0.0.1 answering from a Script (see the module)."""

    def __init__(self, script: Script) -> None:
        self.script = script
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    body = {}
                server.script.seen.append(Seen(self.path, dict(self.headers.items()), body))
                tools = [t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)]
                done = tool_results(body)
                calls = server.script.calls
                if not any(name.startswith("mcp__") or name in ("Read", "Edit") for name in tools):
                    out = anthropic_answer("ok")  # a side request (a title, a summary)
                elif done < len(calls):
                    out = anthropic_answer(call=calls[done], ident=f"toolu_{done + 1}")
                else:
                    out = anthropic_answer(server.script.last)
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def do_GET(self) -> None:
                self.send_response(404)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                return None

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> AnthropicServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
