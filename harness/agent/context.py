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
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from harness.errors import LimitReached
from harness.types import SUMMARY_REQUEST, Message, ModelTurn, ToolCall, ToolSchema

if TYPE_CHECKING:
    from harness.config import ContextConfig

_MESSAGE_OVERHEAD_CHARS = 16
HEAD = 2
"""The pinned head: the system prompt and the task."""
SUMMARY_PROMPT = f"""{SUMMARY_REQUEST}
You are summarising the older part of your own work on a coding task, so you can go on with less \
context. Write plain text with exactly these four sections:
Done: what was done and concluded, naming the files read and what was found in each.
Open: what is still open.
Excluded: the directions already tried and ruled out, one per line starting with "- " (or "- none").
Next: the next step.
Be specific (file names, function names, test names); do not invent anything."""


def excluded_directions(text: str) -> list[str]:
    """The bullet lines of a summary's `Excluded:` section (none when it says none)."""
    found, inside = [], False
    for line in text.splitlines():
        stripped = line.strip()
        header = re.match(r"^(done|open|excluded|next)\s*:\s*(.*)$", stripped, re.IGNORECASE)
        if header:
            inside = header.group(1).lower() == "excluded"
            rest = header.group(2).strip()
            if inside and rest and rest.lower().strip(".- ") not in ("none", ""):
                found.append(rest.lstrip("- ").strip())
            continue
        if inside and stripped.startswith(("-", "*")):
            item = stripped.lstrip("-* ").strip()
            if item and item.lower().rstrip(".") != "none":
                found.append(item)
    return found


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
    summaries: int = 0
    summarised_turns: int = 0
    """Model turns the summaries replaced so far (the marker of the summary message says it too)."""
    excluded: list[str] = Field(default_factory=list)
    """Directions tried and excluded, accumulated across summaries."""


_VOLATILE = re.compile(r" duration=\d+ms")
COMMAND_TOOLS = frozenset({"run_command", "run_tests"})
"""Tools whose result is a command's output (not a file's content): its volatile parts are masked."""
_OUTPUT_VOLATILE = (
    # ISO 8601 date-times (2026-12-01T13:45:01.123Z, 2026-12-01 13:45:01,123 +0000)
    (re.compile(r"\b\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|\s?[+-]\d{2}:?\d{2})?"), "<time>"),
    # random UUIDs (request ids, temporary names)
    (re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b"), "<uuid>"),
    # pytest's numbered temporary folders and tempfile's random suffixes under /tmp
    (re.compile(r"(/pytest-of-[^/\s]+/pytest-)\d+"), r"\1<n>"),
    (re.compile(r"(/tmp/tmp)[a-z0-9_]{8}\b"), r"\1<random>"),
)


def stable(text: str, tool: str | None = None) -> str:
    """A tool result as the model reads it: without what changes between two identical calls (a call's
    duration; in a command's output also date-times, UUIDs and random temporary names), so a repeat of
    an unchanged call looks unchanged. File contents are never masked; the envelope on disk keeps all."""
    text = _VOLATILE.sub("", text)
    if tool in COMMAND_TOOLS:
        for pattern, mask in _OUTPUT_VOLATILE:
            text = pattern.sub(mask, text)
    return text


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
                total += len(json.dumps(call.provider_data)) if call.provider_data else 0
            if message.reasoning:  # sent back with the turn, so it counts against the budget
                reasoning = message.reasoning
                total += len(reasoning.text) + sum(len(json.dumps(b)) for b in reasoning.blocks)
                total += len(json.dumps(reasoning.extra)) if reasoning.extra else 0
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
        self._summaries, self._summarised, self._excluded = (
            state.summaries,
            state.summarised_turns,
            list(state.excluded),
        )
        self.needs_summary = False
        """Set by prepare(): folding was not enough; the loop asks the model for a summary, then
        calls apply_summary() and prepare() again."""
        self.estimator = TokenEstimator(state.chars_per_token)
        self._last_chars = 0
        self.last_fold = ""
        """What the last prepare() folded, for the trajectory ("" when it folded nothing)."""

    def state(self) -> ContextState:
        return ContextState(
            entries=list(self._entries),
            chars_per_token=self.estimator.chars_per_token,
            folds=self._folds,
            summaries=self._summaries,
            summarised_turns=self._summarised,
            excluded=list(self._excluded),
        )

    def add_turn(self, turn: ModelTurn) -> None:
        message = Message(role="assistant", content=turn.text, tool_calls=turn.tool_calls, reasoning=turn.reasoning)
        self._entries.append(Entry(message=message))

    def add_tool_result(self, call: ToolCall, text: str, is_error: bool) -> None:
        text = slim(stable(text, call.name), self.config.tool_result_chars)
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
        self.last_fold, self.needs_summary = "", False
        if self.config.fold and self.estimator.estimate(chars) > self.config.fold_at * budget:
            before, folded = self.estimator.estimate(chars), sum(e.folded for e in self._entries)
            chars = self._fold(tools, target=budget // 2)
            self.last_fold = (
                f"folded {sum(e.folded for e in self._entries) - folded} old tool result(s): "
                f"~{before} -> ~{self.estimator.estimate(chars)} tokens (budget {budget})"
            )
        estimate = self.estimator.estimate(chars)
        if self.config.summaries and estimate > self.config.summarize_at * budget and self._middle() is not None:
            self.needs_summary = True
        elif estimate > budget:
            what = "after folding" if self.config.fold else "(folding off)"
            raise LimitReached("context", f"~{estimate} tokens {what}, budget {budget}")
        self._last_chars = chars
        return self.messages()

    # --- the third tier: a summary of the older middle --------------------------------------

    def _middle(self) -> tuple[int, int] | None:
        """[start, end) of the entries a summary replaces: after the pinned head (and any earlier
        summary is inside it), up to the last `keep_recent_turns` model turns; None when there is
        no model turn to summarise."""
        turns = [i for i, e in enumerate(self._entries) if e.message.role == "assistant" and i >= HEAD]
        if len(turns) <= self.config.keep_recent_turns:
            return None
        end = turns[-self.config.keep_recent_turns]
        return (HEAD, end) if any(i < end for i in turns) else None

    def summary_request(self) -> list[Message]:
        """The messages of the summary call: what the model is to write, and the middle to summarise."""
        middle = self._middle()
        if middle is None:
            raise LimitReached("context", "nothing left to summarise")
        start, end = middle
        through = self._summarised + sum(1 for e in self._entries[start:end] if e.message.role == "assistant")
        lines = [f"Model turns 1-{through} to summarise:"]
        for entry in self._entries[start:end]:
            message = entry.message
            if message.role == "assistant":
                if message.content.strip():
                    lines.append(f"assistant: {slim(message.content, 4000)}")
                lines += [f"call: {call_label(call)}" for call in message.tool_calls]
            elif message.role == "tool":
                lines.append(f"result of {entry.label or message.name}: {slim(message.content, 1500)}")
            else:
                lines.append(f"{message.role}: {slim(message.content, 6000)}")
        if self._excluded:
            lines.append("Directions already excluded earlier: " + "; ".join(self._excluded))
        return [
            Message(role="system", content=SUMMARY_PROMPT),
            Message(role="user", content="\n".join(lines)),
        ]

    def apply_summary(self, text: str) -> tuple[int, list[str]]:
        """Replace the middle with the summary; (model turns now summarised, excluded directions)."""
        middle = self._middle()
        if middle is None:
            raise LimitReached("context", "nothing left to summarise")
        start, end = middle
        self._summarised += sum(1 for e in self._entries[start:end] if e.message.role == "assistant")
        for direction in excluded_directions(text):
            if direction.lower() not in {d.lower() for d in self._excluded}:
                self._excluded.append(direction)
        body = text.strip()
        if self._excluded:
            body += "\n\nExcluded directions so far (do not go back to them):\n" + "\n".join(
                f"- {d}" for d in self._excluded
            )
        content = f"[harness summary of model turns 1-{self._summarised}]\n{body}"
        self._entries[start:end] = [Entry(message=Message(role="user", content=content), label="summary")]
        self._summaries += 1
        return self._summarised, list(self._excluded)

    def observe_usage(self, input_tokens: int) -> None:
        """Calibrate the estimate with the input tokens the provider reported for the last call."""
        self.estimator.calibrate(self._last_chars, input_tokens)

    def estimate_tokens(self, tools: list[ToolSchema]) -> int:
        return self.estimator.estimate(self.estimator.chars(self.messages(), tools))

    def _fold(self, tools: list[ToolSchema], target: int) -> int:
        """Fold tool results, oldest first, until the estimate is at most target. Results the model
        has not answered yet are never folded; the last `keep_recent` only when folding the older ones
        cannot reach the target (large results), so that one fold makes room for several steps and the
        prompt's prefix (the provider's cache) stays the same between folds."""
        tool_indices = [i for i, e in enumerate(self._entries) if e.message.role == "tool"]
        recent = set(tool_indices[-self.config.keep_recent :]) if self.config.keep_recent else set()
        last_turn = max((i for i, e in enumerate(self._entries) if e.message.role == "assistant"), default=-1)
        unseen = {i for i in tool_indices if i > last_turn}
        chars = self.estimator.chars(self.messages(), tools)
        for kept in (recent | unseen, unseen):
            for index in tool_indices:
                if self.estimator.estimate(chars) <= target:
                    break
                entry = self._entries[index]
                if entry.folded or index in kept:
                    continue
                stub = f"[folded: {entry.label}, {entry.lines} lines]"
                chars -= len(entry.message.content) - len(stub)
                self._entries[index] = entry.model_copy(
                    update={"message": entry.message.model_copy(update={"content": stub}), "folded": True}
                )
        self._folds += 1
        return chars
