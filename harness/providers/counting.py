"""Tokens of a turn whose server reported none, so a budget, the context tiers and a report never
see a silent zero.

Some servers send no usage in a stream even when asked (`stream_options.include_usage`): llama.cpp's
Python server is one. Such a turn is counted: by the server's own tokenizer where it has one
(llama.cpp's `POST /tokenize`, llama-cpp-python's `POST /extras/tokenize/count`; asked only of a local
endpoint, with a short timeout), else by harness's estimate (characters / 4). The prompt is counted
as its text (messages, tool calls, tool schemas), not as the server's chat template renders it, so
either way the figures are marked `estimated`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from harness.providers.local import server_root
from harness.types import Message, ModelTurn, ToolSchema, Usage

CHARS_PER_TOKEN = 4.0
"""harness's own estimate where the server cannot count (the context manager starts from it too)."""
_ASK_TIMEOUT_S = 5.0


def prompt_text(messages: Sequence[Message], tools: Sequence[ToolSchema]) -> str:
    """The text a request carries: every message's role and content, its tool calls, and the tools."""
    parts = [json.dumps(tool.openai()) for tool in tools]
    for message in messages:
        parts.append(f"{message.role}: {message.content}")
        parts += [f"{call.name} {json.dumps(call.arguments)}" for call in message.tool_calls]
        if message.reasoning and message.reasoning.text:
            parts.append(message.reasoning.text)
    return "\n".join(parts)


def answer_text(turn: ModelTurn) -> str:
    """The text the model generated: its reasoning, its message and its tool calls."""
    parts = [turn.reasoning.text] if turn.reasoning and turn.reasoning.text else []
    parts.append(turn.text)
    parts += [f"{call.name} {call.raw_arguments or json.dumps(call.arguments)}" for call in turn.tool_calls]
    return "\n".join(part for part in parts if part)


def estimate(text: str) -> int:
    """harness's own count: characters / CHARS_PER_TOKEN (at least 1 for any text)."""
    return 0 if not text else max(1, round(len(text) / CHARS_PER_TOKEN))


class TokenCounter:
    """Counts what a server did not: through its tokenizer when it is local and has one (found out
    once, then remembered), else by estimate."""

    def __init__(self, base_url: str | None, local: bool, client: Any = None) -> None:
        self.root = server_root(base_url or "")
        self._client = client
        self._route: str | None = "" if local and self.root else None
        """"" until asked; None: the server cannot count (or is not asked); else the path that counts."""

    def usage(self, messages: Sequence[Message], tools: Sequence[ToolSchema], turn: ModelTurn) -> Usage:
        """Estimated usage of one turn whose server reported none."""
        return Usage(
            input_tokens=self.count(prompt_text(messages, tools)),
            output_tokens=self.count(answer_text(turn)),
            estimated=True,
        )

    def count(self, text: str) -> int:
        """The server's count of text, else the estimate."""
        counted = self._count(text)
        return estimate(text) if counted is None else counted

    def _count(self, text: str) -> int | None:
        if self._route is None:
            return None
        if not text:
            return 0
        routes = [self._route] if self._route else ["/extras/tokenize/count", "/tokenize"]
        for route in routes:
            count = self._ask(route, text)
            if count is not None:
                self._route = route
                return count
        self._route = None
        return None

    def _ask(self, route: str, text: str) -> int | None:
        import httpx2

        body = {"input": text} if route.startswith("/extras") else {"content": text}
        try:
            client = self._client or httpx2
            answer = client.post(f"{self.root}{route}", json=body, timeout=_ASK_TIMEOUT_S)
            found = answer.json() if answer.status_code == 200 else None
        except (httpx2.HTTPError, ValueError):
            return None
        if not isinstance(found, dict):
            return None
        if isinstance(found.get("count"), int):
            return int(found["count"])
        tokens = found.get("tokens")
        return len(tokens) if isinstance(tokens, list) else None
