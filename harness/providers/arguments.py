"""What a model sends, made safe at the adapter boundary.

Tool-call argument text -> ToolCall: strict JSON first, a safe json-repair second, else an error.
"Safe" means: only what is unambiguous is repaired (a code fence around the object, single quotes,
trailing commas), the repaired value is a JSON object, and nothing the model did not close is ever
completed: a string, array or object left open (text cut off mid-value, whether or not the server
said it stopped at max_tokens) is an error, because completing a cut-off `write_file` or `apply_patch`
would silently write half a change. Strings that are valid JSON
but not valid text (a lone UTF-16 surrogate such as `"\ud800"`) are replaced with U+FFFD wherever
they occur, in the text and in arguments, and the replacement is recorded on the turn.
"""

from __future__ import annotations

import json
import re
from typing import Any

from harness.types import ModelTurn, ToolCall

_SURROGATE = re.compile("[\ud800-\udfff]")


def build_tool_call(call_id: str, name: str, raw: str, *, truncated: bool = False) -> ToolCall:
    """A ToolCall from the argument text the model streamed; never raises on bad JSON."""
    text = raw.strip()
    if not text:
        return ToolCall(id=call_id, name=name, arguments={})
    try:
        value = json.loads(text)
    except ValueError:
        inner = _unfenced(text)
        open_part = _left_open(inner)
        value = _repair(inner) if not truncated and open_part is None else None
        if not isinstance(value, dict):
            if truncated:
                why = "cut off at the output-token limit"
            elif open_part is not None:
                why = f"cut off: {open_part} was never closed (nothing is completed for the model)"
            else:
                why = "not valid JSON"
            return ToolCall(id=call_id, name=name, raw_arguments=raw, parse_error=f"arguments are {why}")
        return ToolCall(id=call_id, name=name, arguments=value, raw_arguments=raw)
    if not isinstance(value, dict):
        return ToolCall(id=call_id, name=name, raw_arguments=raw, parse_error="arguments must be a JSON object")
    return ToolCall(id=call_id, name=name, arguments=value)


_FENCE = re.compile(r"^```[\w-]*\s*\n?(.*?)\n?\s*```$", re.DOTALL)


def _unfenced(text: str) -> str:
    """The object inside a Markdown code fence (```json ... ```), or the text as it is."""
    found = _FENCE.match(text.strip())
    return found.group(1).strip() if found else text


def _left_open(text: str) -> str | None:
    """What the text leaves open at its end (`a string`, `an object`, `an array`), or None when every
    string, object and array it starts is closed. Strings in single or double quotes, escapes kept."""
    stack: list[str] = []
    quote = ""
    escaped = False
    for char in text:
        if quote:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == quote:
                quote = ""
        elif char in "\"'":
            quote = char
        elif char in "{[":
            stack.append(char)
        elif char in "}]" and stack and stack[-1] == ("{" if char == "}" else "["):
            stack.pop()
    if quote:
        return "a string"
    if stack:
        return "an object" if stack[-1] == "{" else "an array"
    return None


def _repair(text: str) -> object:
    import json_repair  # here: only arguments that are not JSON as sent need it

    try:
        return json_repair.repair_json(text, return_objects=True)
    except Exception:  # noqa: BLE001 - a repair library failing is just "not repairable"
        return None


def safe_text(text: str) -> tuple[str, int]:
    """text with every lone surrogate replaced by U+FFFD, and how many were."""
    return _SURROGATE.subn("\ufffd", text)


def safe_value(value: Any) -> tuple[Any, int]:
    """A JSON value with lone surrogates replaced in every string (keys included), and how many were."""
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, list):
        items = [safe_value(item) for item in value]
        return [item for item, _ in items], sum(count for _, count in items)
    if isinstance(value, dict):
        total, out = 0, {}
        for key, item in value.items():
            (safe_key, a), (safe_item, b) = safe_text(str(key)), safe_value(item)
            out[safe_key] = safe_item
            total += a + b
        return out, total
    return value, 0


def safe_turn(turn: ModelTurn) -> ModelTurn:
    """The turn with every string the model sent made valid text; what was replaced is recorded."""
    repairs: list[str] = []
    text, count = safe_text(turn.text)
    if count:
        repairs.append(f"text: {count} lone surrogate(s) replaced with U+FFFD")
    calls = []
    for call in turn.tool_calls:
        name, n_name = safe_text(call.name)
        arguments, n_args = safe_value(call.arguments)
        raw, n_raw = safe_text(call.raw_arguments) if call.raw_arguments is not None else (None, 0)
        if n_name + n_args + n_raw:
            repairs.append(f"tool call {call.id}: {n_name + n_args + n_raw} lone surrogate(s) replaced with U+FFFD")
            call = call.model_copy(update={"name": name, "arguments": arguments, "raw_arguments": raw})
        calls.append(call)
    if not repairs:
        return turn
    refusal, _ = safe_text(turn.refusal)
    return turn.model_copy(
        update={"text": text, "tool_calls": calls, "refusal": refusal, "repairs": [*turn.repairs, *repairs]}
    )
