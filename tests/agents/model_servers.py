"""Loopback wire servers of the models hosted agents speak, each scripted to do what a person would ask
of a coding agent on the example (run the tests, read the broken file, fix it, run the tests again,
say so), deciding its next answer from how many tool results the conversation holds. Which script
answers is chosen from the request itself: the task its conversation is about, and whose tools it
offers (Claude Code's, Codex's, harness's own loop's), so one server serves a whole batch. Any other
request an agent makes (a title, a summary) gets a short text."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal

RUN_TESTS = "python3 -m pytest -q"


@dataclass(frozen=True)
class Fix:
    """A change to one file of the example, as whole lines (old before, new after)."""

    path: str
    old: tuple[str, ...]
    new: tuple[str, ...]
    said: str


ADD = Fix(
    "calc/ops.py",
    ('    """Return the sum of a and b."""', "    return a - b"),
    ('    """Return the sum of a and b."""', "    return a + b"),
    "I fixed add() in calc/ops.py (it subtracted); the tests pass now.",
)
SUBTRACT = Fix(
    "calc/ops.py",
    ('    """Return a minus b."""', "    return a + b"),
    ('    """Return a minus b."""', "    return a - b"),
    "I fixed subtract() in calc/ops.py (it added); the tests pass now.",
)
CHEAT = Fix(
    "tests/test_ops.py",
    ("def test_add():", "    assert add(2, 3) == 5"),
    ("def test_add():", "    assert add(2, 3) == -1"),
    "I changed the test to match the code; done.",
)
"""An edit of a test to match the broken code: the gate refuses it (tests are read-only)."""

Style = Literal["claude", "codex", "gemini", "opencode", "harness"]


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
    last: str = ADD.said


def _joined(lines: tuple[str, ...]) -> str:
    return "\n".join(lines)


def fix_script(style: Style, fix: Fix = ADD) -> Script:
    """A model fixing the example its way: run the tests, read the file, edit it, run the tests again.
    claude: harness's run_command over MCP, its own Read and Edit; gemini: likewise, its own read_file
    and replace; opencode: likewise (harness_run_command), its own read and edit; codex: harness's run_command and
    read_file over MCP, its own apply_patch; harness: harness's own loop's tools."""
    test = {"command": RUN_TESTS}
    if style == "claude":
        where = f"/workspace/{fix.path}"
        edit = {"file_path": where, "old_string": _joined(fix.old), "new_string": _joined(fix.new)}
        calls = [("mcp__harness__run_command", test), ("Read", {"file_path": where}), ("Edit", edit),
                 ("mcp__harness__run_command", test)]  # fmt: skip
    elif style == "gemini":
        where = f"/workspace/{fix.path}"
        edit = {"file_path": where, "old_string": _joined(fix.old), "new_string": _joined(fix.new),
                "instruction": "Make the function do what its docstring says."}  # fmt: skip
        calls = [("mcp_harness_run_command", test), ("read_file", {"file_path": where}), ("replace", edit),
                 ("mcp_harness_run_command", test)]  # fmt: skip
    elif style == "opencode":
        where = f"/workspace/{fix.path}"
        edit = {"filePath": where, "oldString": _joined(fix.old), "newString": _joined(fix.new)}
        calls = [("harness_run_command", test), ("read", {"filePath": where}), ("edit", edit),
                 ("harness_run_command", test)]  # fmt: skip
    elif style == "codex":
        lines = "".join(f"-{line}\n" for line in fix.old) + "".join(f"+{line}\n" for line in fix.new)
        patch = f"*** Begin Patch\n*** Update File: {fix.path}\n@@\n{lines}*** End Patch\n"
        calls = [("run_command", test), ("read_file", {"path": fix.path}), ("apply_patch", {"input": patch}),
                 ("run_command", test)]  # fmt: skip
    else:
        edit = {"path": fix.path, "old_text": _joined(fix.old), "new_text": _joined(fix.new)}
        calls = [("run_command", test), ("read_file", {"path": fix.path}), ("apply_patch", edit),
                 ("run_command", test)]  # fmt: skip
    return Script(calls=calls, last=fix.said)


def claude_fix() -> Script:
    return fix_script("claude")


def codex_fix() -> Script:
    """Codex fixing the example, first editing a test (refused: tests are read-only)."""
    script = fix_script("codex")
    script.calls.insert(2, fix_script("codex", CHEAT).calls[2])
    return script


def style_of(body: dict[str, Any]) -> Style | None:
    """Whose tools a request offers (None: none, a side request such as a title)."""
    names = set()
    for tool in body.get("tools") or []:
        if isinstance(tool, dict):
            names.add(str(tool.get("name") or ""))
            inner = [*(tool.get("tools") or []), *(tool.get("functionDeclarations") or [])]
            names.update(str(item.get("name") or "") for item in inner if isinstance(item, dict))
    if "replace" in names and "read_file" in names:
        return "gemini"
    if "harness_run_command" in names:
        return "opencode"
    if "Read" in names and "Edit" in names:
        return "claude"
    if "mcp__harness" in names:
        return "codex"
    if {"run_command", "apply_patch", "read_file"} <= names:
        return "harness"
    return None


def by_task(scripts: dict[str, Fix]) -> Callable[[dict[str, Any]], Script | None]:
    """A chooser: the script of whose tools the request offers, for the first task key (a word in the
    task's text) its conversation holds."""

    def choose(body: dict[str, Any]) -> Script | None:
        style = style_of(body)
        if style is None:
            return None
        text = json.dumps(body.get("messages") or body.get("input") or [])
        for key, fix in scripts.items():
            if key in text:
                return fix_script(style, fix)
        return None

    return choose


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


class ModelServer:
    """A model API on 127.0.0.1 answering each POST from the script `choose` picks for it (None: a
    side request, answered with a short text); every request is kept in `seen`."""

    content_type = "application/json"
    per_answer = (0, 0)
    """The tokens in and out each answer's usage says."""

    def __init__(self, choose: Script | Callable[[dict[str, Any]], Script | None]) -> None:
        self.choose = choose if callable(choose) else self._only(choose)
        self.seen: list[Seen] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except ValueError:
                    body = {}
                server.seen.append(Seen(self.path, dict(self.headers.items()), body))
                out = server.answer(body, server.choose(body))
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

    def billed(self) -> dict[str, int]:
        """The run's tokens when every answer it got was billed to it, the last one's too."""
        (tokens_in, tokens_out), answered = self.per_answer, sum(map(self.bills, self.seen))
        return {"input": tokens_in * answered, "output": tokens_out * answered, "cached": 0}

    def bills(self, seen: Seen) -> bool:
        """The answer to this request carried a usage."""
        return True

    @staticmethod
    def _only(script: Script) -> Callable[[dict[str, Any]], Script | None]:
        return lambda body: script if style_of(body) is not None else None

    def answer(self, body: dict[str, Any], script: Script | None) -> bytes:
        raise NotImplementedError

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def __enter__(self) -> ModelServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class AnthropicServer(ModelServer):
    """Anthropic's Messages API (streamed)."""

    per_answer = (120, 30)

    def answer(self, body: dict[str, Any], script: Script | None) -> bytes:
        if script is None:
            return anthropic_answer("ok")
        done = tool_results(body)
        if done < len(script.calls):
            return anthropic_answer(call=script.calls[done], ident=f"toolu_{done + 1}")
        return anthropic_answer(script.last)


def responses_outputs(body: dict[str, Any]) -> int:
    """How many tool results the input of a Responses request holds."""
    kinds = ("function_call_output", "custom_tool_call_output")
    return sum(1 for item in body.get("input") or [] if isinstance(item, dict) and item.get("type") in kinds)


def _tool_named(body: dict[str, Any], wanted: str) -> dict[str, Any] | None:
    """The request's tool a script's name stands for: a tool of that name, else one of a namespace's
    (an MCP server's tools), then with the namespace's name beside it."""
    for tool in body.get("tools") or []:
        if isinstance(tool, dict) and tool.get("name") == wanted:
            return tool
    for tool in body.get("tools") or []:
        for inner in tool.get("tools") or [] if isinstance(tool, dict) and tool.get("type") == "namespace" else []:
            if isinstance(inner, dict) and inner.get("name") == wanted:
                return {**inner, "namespace": tool.get("name")}
    return None


class ResponsesServer(ModelServer):
    """OpenAI's Responses API (streamed)."""

    per_answer = (150, 30)

    def answer(self, body: dict[str, Any], script: Script | None) -> bytes:
        script = script or Script(calls=[], last="ok")
        done = responses_outputs(body)
        item: dict[str, Any]
        if done < len(script.calls):
            wanted, arguments = script.calls[done]
            tool = _tool_named(body, wanted) or {"name": wanted, "type": "function"}
            if tool.get("type") == "custom":
                item = {"type": "custom_tool_call", "id": f"ctc_{done}", "call_id": f"call_{done}",
                        "name": tool["name"], "input": arguments.get("input", ""), "status": "completed"}  # fmt: skip
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
                                         "response": {**response, "status": "completed", "output": [item],
                                                      "usage": usage}}),
        ]  # fmt: skip
        return b"".join(frames)


def gemini_results(body: dict[str, Any]) -> int:
    """How many tool results the contents of a Gemini request hold, each once: a conversation Gemini CLI
    loaded (session/load) repeats its earlier results."""
    return len({
        json.dumps([part["functionResponse"].get("name"), part["functionResponse"].get("id")])
        for content in body.get("contents") or []
        for part in (content.get("parts") or [] if isinstance(content, dict) else [])
        if isinstance(part, dict) and isinstance(part.get("functionResponse"), dict)
    })  # fmt: skip


def _counts(body: dict[str, Any]) -> bool:
    """A `:countTokens` request (answered with a count, no usage)."""
    return "contents" in body and not {"generationConfig", "tools", "systemInstruction"} & body.keys()


class GeminiServer(ModelServer):
    """Gemini's API: `:streamGenerateContent?alt=sse` answered from the script, `:countTokens` with a
    count, `:generateContent` (a side request) with a short JSON text."""

    per_answer = (140, 25)

    def bills(self, seen: Seen) -> bool:
        return not _counts(seen.body)

    def answer(self, body: dict[str, Any], script: Script | None) -> bytes:
        usage = {"promptTokenCount": 140, "candidatesTokenCount": 25, "totalTokenCount": 165}
        if _counts(body):
            return json.dumps({"totalTokens": 140}).encode()
        if script is None:
            part: dict[str, Any] = {"text": json.dumps({"reasoning": "done", "next_speaker": "user"})}
        else:
            done = gemini_results(body)
            if done < len(script.calls):
                name, arguments = script.calls[done]
                part = {"functionCall": {"name": name, "args": arguments}}
            else:
                part = {"text": script.last}
        chunk = {"candidates": [{"content": {"role": "model", "parts": [part]}, "finishReason": "STOP", "index": 0}],
                 "usageMetadata": usage, "modelVersion": "gemini-2.5-pro"}  # fmt: skip
        return f"data: {json.dumps(chunk)}\r\n\r\n".encode()
