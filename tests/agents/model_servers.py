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


def codex_fix() -> Script:
    """Codex fixing the example: harness's run_command and read_file, its own apply_patch (first on a
    test file, which the gate refuses: tests are read-only)."""
    cheat = (
        "*** Begin Patch\n*** Update File: tests/test_ops.py\n@@\n-    assert add(2, 3) == 5\n+    assert add(2, 3) == -1\n"
        "*** End Patch\n"
    )
    fix = (
        "*** Begin Patch\n*** Update File: calc/ops.py\n@@ def add(a: float, b: float) -> float:\n"
        '     """Return the sum of a and b."""\n-    return a - b\n+    return a + b\n*** End Patch\n'
    )
    return Script(
        calls=[
            ("run_command", {"command": RUN_TESTS}),
            ("read_file", {"path": "calc/ops.py"}),
            ("apply_patch", {"input": cheat}),
            ("apply_patch", {"input": fix}),
            ("run_command", {"command": RUN_TESTS}),
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
                out = server.answer(body)
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

    def answer(self, body: dict[str, Any]) -> bytes:
        tools = [t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)]
        done = tool_results(body)
        calls = self.script.calls
        if not any(name.startswith("mcp__") or name in ("Read", "Edit") for name in tools):
            return anthropic_answer("ok")  # a side request (a title, a summary)
        if done < len(calls):
            return anthropic_answer(call=calls[done], ident=f"toolu_{done + 1}")
        return anthropic_answer(self.script.last)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> AnthropicServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def responses_outputs(body: dict[str, Any]) -> int:
    """How many tool results the input of a Responses request holds."""
    kinds = ("function_call_output", "custom_tool_call_output")
    return sum(1 for item in body.get("input") or [] if isinstance(item, dict) and item.get("type") in kinds)


def _tool_named(body: dict[str, Any], wanted: str) -> dict[str, Any] | None:
    """The request's tool a script's name stands for: a tool of that name, or of a namespace (an MCP
    server's tools; only there when the name is `mcp:NAME`), then with the namespace's name beside it."""
    namespaced = wanted.startswith("mcp:")
    wanted = wanted.removeprefix("mcp:")
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        if tool.get("name") == wanted and not namespaced:
            return tool
        for inner in tool.get("tools") or [] if tool.get("type") == "namespace" else []:
            if isinstance(inner, dict) and inner.get("name") == wanted:
                return {**inner, "namespace": tool.get("name")}
    return None


def responses_answer(body: dict[str, Any], script: Script) -> bytes:
    """One streamed Responses answer from the script: its next call, else its last words."""
    done = responses_outputs(body)
    item: dict[str, Any]
    if done < len(script.calls):
        wanted, arguments = script.calls[done]
        tool = _tool_named(body, wanted) or {"name": wanted, "type": "function"}
        if tool.get("type") == "custom":
            item = {"type": "custom_tool_call", "id": f"ctc_{done}", "call_id": f"call_{done}", "name": tool["name"],
                    "input": arguments.get("input", ""), "status": "completed"}  # fmt: skip
        else:
            item = {"type": "function_call", "id": f"fc_{done}", "call_id": f"call_{done}", "name": tool["name"],
                    "arguments": json.dumps(arguments), "status": "completed"}  # fmt: skip
            if tool.get("namespace"):
                item["namespace"] = tool["namespace"]
    else:
        item = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": script.last, "annotations": []}]}  # fmt: skip
    usage = {"input_tokens": 150, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 30,
             "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 180}  # fmt: skip
    response = {"id": "resp_1", "object": "response", "created_at": 1, "model": body.get("model") or "gpt-5.2",
                "status": "in_progress", "output": []}  # fmt: skip
    frames = [
        _sse("response.created", {"type": "response.created", "sequence_number": 0, "response": response}),
        _sse("response.output_item.added", {"type": "response.output_item.added", "sequence_number": 1,
                                             "output_index": 0, "item": item}),
        _sse("response.output_item.done", {"type": "response.output_item.done", "sequence_number": 2,
                                            "output_index": 0, "item": item}),
        _sse("response.completed", {"type": "response.completed", "sequence_number": 3,
                                     "response": {**response, "status": "completed", "output": [item], "usage": usage}}),
    ]  # fmt: skip
    return b"".join(frames)


class ResponsesServer(AnthropicServer):
    """The Responses API on 127.0.0.1 answering from a Script; a request without tools (a title, a
    summary) gets a short text."""

    def answer(self, body: dict[str, Any]) -> bytes:
        if not body.get("tools"):
            return responses_answer(body, Script(calls=[], last="ok"))
        return responses_answer(body, self.script)
