"""Tool-call argument text -> ToolCall: strict JSON first, a safe json-repair second, else an error.

"Safe" means: the repaired value is a JSON object, and the text was not cut off at max_tokens
(repairing a truncated `write_file` would silently write half a file).
"""

from __future__ import annotations

import json

import json_repair

from harness.types import ToolCall


def build_tool_call(call_id: str, name: str, raw: str, *, truncated: bool = False) -> ToolCall:
    """A ToolCall from the argument text the model streamed; never raises on bad JSON."""
    text = raw.strip()
    if not text:
        return ToolCall(id=call_id, name=name, arguments={})
    try:
        value = json.loads(text)
    except ValueError:
        value = _repair(text) if not truncated else None
        if not isinstance(value, dict):
            why = "cut off at the output-token limit" if truncated else "not valid JSON"
            return ToolCall(id=call_id, name=name, raw_arguments=raw, parse_error=f"arguments are {why}")
        return ToolCall(id=call_id, name=name, arguments=value, raw_arguments=raw)
    if not isinstance(value, dict):
        return ToolCall(id=call_id, name=name, raw_arguments=raw, parse_error="arguments must be a JSON object")
    return ToolCall(id=call_id, name=name, arguments=value)


def _repair(text: str) -> object:
    try:
        return json_repair.repair_json(text, return_objects=True)
    except Exception:  # noqa: BLE001 - a repair library failing is just "not repairable"
        return None
