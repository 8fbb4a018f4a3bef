"""The conversation sent to the model: a token budget, slimming, and folding of old tool results.

Layout is cache-friendly: the head (system prompt + task) is pinned and never rewritten, messages
are only appended, and folding happens in one batch when the estimate passes `fold_at` of the
budget, folding down to half the budget so the (new) prefix then stays stable for many calls.
Only tool results are ever folded; the assistant's own text and tool calls stay verbatim.

There is no tokenizer offline, so tokens are estimated from characters with a ratio calibrated by
the input tokens the provider reports for each call.
"""

from __future__ import annotations

import json
import re

from pydantic import BaseModel, ConfigDict, Field

from harness.config import ContextConfig
from harness.errors import LimitReached
from harness.types import Message, ModelTurn, ToolCall, ToolSchema

_MESSAGE_OVERHEAD_CHARS = 16
_LABEL_ARGS = ("path", "pattern", "command", "selector", "glob")


class Entry(BaseModel):
    """One message plus what is needed to fold it later."""

    model_config = ConfigDict(extra="forbid")

    message: Message
    label: str = ""
    """`read_file utils/cache.py` — the tool and its main argument (tool results only)."""
    lines: int = 0
    folded: bool = False


class ContextState(BaseModel):
    """Everything needed to rebuild the context after a crash (persisted with the session state)."""

    model_config = ConfigDict(extra="forbid")

    entries: list[Entry] = Field(default_factory=list)
    chars_per_token: float = 4.0
    folds: int = 0


_VOLATILE = re.compile(r" duration=\d+ms")


def stable(text: str) -> str:
    """A tool result as the model reads it: without what changes between two identical calls (a call's
    duration), so a re-read of an unchanged file looks unchanged. The envelope on disk keeps it."""
    return _VOLATILE.sub("", text)


def slim(text: str, max_chars: int) -> str:
    """Keep the head and tail of an over-long text with an explicit marker in between."""
    if len(text) <= max_chars:
        return text
    head = max_chars * 2 // 3
    tail = max_chars - head
    omitted = len(text) - head - tail
    return f"{text[:head]}\n[... {omitted} characters omitted ...]\n{text[-tail:]}"


def call_label(call: ToolCall) -> str:
    """Tool name plus its most telling argument, for stubs and logs."""
    for key in _LABEL_ARGS:
        value = call.arguments.get(key)
        if isinstance(value, str) and value:
            return f"{call.name} {value if len(value) <= 80 else value[:77] + '...'}"
    return call.name


class TokenEstimator:
    """chars / ratio, with the ratio moved toward what the provider reports."""

    def __init__(self, chars_per_token: float = 4.0) -> None:
        self.chars_per_token = chars_per_token

    @staticmethod
    def chars(messages: list[Message], tools: list[ToolSchema]) -> int:
        total = sum(len(t.name) + len(t.description) + len(json.dumps(t.parameters)) for t in tools)
        for message in messages:
            total += len(message.content) + _MESSAGE_OVERHEAD_CHARS
            for call in message.tool_calls:
                total += len(call.name) + len(json.dumps(call.arguments)) + len(call.raw_arguments or "")
            if message.reasoning:  # sent back with the turn, so it counts against the budget
                total += len(message.reasoning.text) + sum(len(json.dumps(b)) for b in message.reasoning.blocks)
        return total

    def estimate(self, chars: int) -> int:
        return int(chars / self.chars_per_token) + 1

    def calibrate(self, chars: int, reported_tokens: int) -> None:
        """Blend in the observed ratio (ignores calls with no usage, e.g. scripted models)."""
        if reported_tokens <= 0 or chars <= 0:
            return
        observed = min(8.0, max(1.0, chars / reported_tokens))
        self.chars_per_token = 0.5 * self.chars_per_token + 0.5 * observed


class Context:
    """The running conversation with a pinned head."""

    def __init__(self, config: ContextConfig, system: str, task: str, state: ContextState | None = None) -> None:
        self.config = config
        if state is None:
            state = ContextState(
                entries=[
                    Entry(message=Message(role="system", content=system)),
                    Entry(message=Message(role="user", content=task)),
                ]
            )
        self._entries = [entry.model_copy() for entry in state.entries]
        self._folds = state.folds
        self.estimator = TokenEstimator(state.chars_per_token)
        self._last_chars = 0
        self.last_fold = ""
        """What the last prepare() folded, for the trajectory ("" when it folded nothing)."""

    def state(self) -> ContextState:
        return ContextState(
            entries=list(self._entries), chars_per_token=self.estimator.chars_per_token, folds=self._folds
        )

    def add_turn(self, turn: ModelTurn) -> None:
        message = Message(role="assistant", content=turn.text, tool_calls=turn.tool_calls, reasoning=turn.reasoning)
        self._entries.append(Entry(message=message))

    def add_tool_result(self, call: ToolCall, text: str, is_error: bool) -> None:
        text = slim(stable(text), self.config.tool_result_chars)
        message = Message(role="tool", content=text, tool_call_id=call.id, name=call.name, is_error=is_error)
        self._entries.append(Entry(message=message, label=call_label(call), lines=text.count("\n") + 1))

    def add_user(self, text: str) -> None:
        self._entries.append(Entry(message=Message(role="user", content=text)))

    def messages(self) -> list[Message]:
        return [entry.message for entry in self._entries]

    def prepare(self, tools: list[ToolSchema]) -> list[Message]:
        """The messages for the next call, folding old tool results if the budget asks for it."""
        budget = self.config.budget_tokens
        chars = self.estimator.chars(self.messages(), tools)
        self.last_fold = ""
        if self.estimator.estimate(chars) > self.config.fold_at * budget:
            before, folded = self.estimator.estimate(chars), sum(e.folded for e in self._entries)
            chars = self._fold(tools, target=budget // 2)
            self.last_fold = (
                f"folded {sum(e.folded for e in self._entries) - folded} old tool result(s): "
                f"~{before} -> ~{self.estimator.estimate(chars)} tokens (budget {budget})"
            )
            if self.estimator.estimate(chars) > budget:
                raise LimitReached(
                    "context", f"~{self.estimator.estimate(chars)} tokens after folding, budget {budget}"
                )
        self._last_chars = chars
        return self.messages()

    def observe_usage(self, input_tokens: int) -> None:
        """Calibrate the estimate with the input tokens the provider reported for the last call."""
        self.estimator.calibrate(self._last_chars, input_tokens)

    def estimate_tokens(self, tools: list[ToolSchema]) -> int:
        return self.estimator.estimate(self.estimator.chars(self.messages(), tools))

    def _fold(self, tools: list[ToolSchema], target: int) -> int:
        tool_indices = [i for i, e in enumerate(self._entries) if e.message.role == "tool"]
        recent = set(tool_indices[-self.config.keep_recent :]) if self.config.keep_recent else set()
        chars = self.estimator.chars(self.messages(), tools)
        for index in tool_indices:
            if self.estimator.estimate(chars) <= target:
                break
            entry = self._entries[index]
            if entry.folded or index in recent:
                continue
            stub = f"[folded: {entry.label}, {entry.lines} lines]"
            chars -= len(entry.message.content) - len(stub)
            self._entries[index] = entry.model_copy(
                update={"message": entry.message.model_copy(update={"content": stub}), "folded": True}
            )
        self._folds += 1
        return chars
