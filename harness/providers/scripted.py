"""`scripted:FILE` — canned assistant turns from a YAML file, for the offline demo and tests.

    turns:
      - text: "Let me run the tests first."
        tool_calls:
          - name: run_tests
            arguments: {}
      - tool_calls:
          - {name: read_file, arguments: {path: pkg/calc.py}}
      - text: "Fixed the sign in add(); the tests pass."

The turn served is chosen by how many assistant messages the conversation already holds (like the
replay provider), so a resumed run continues at the right turn without any outside bookkeeping;
when the turns run out the model answers with a final text and no tool call. The file is validated
when the provider is built (before the run), and errors name the line.
Tool-call ids are deterministic: `call_<turn>_<n>` (1-based turn, 0-based call) unless given.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from harness.errors import ScriptError
from harness.providers.config import ProviderConfig
from harness.providers.factory import register_provider
from harness.types import Message, ModelTurn, ToolCall, ToolSchema

EXHAUSTED_TEXT = "I have nothing more to do."
_TURN_KEYS = {"text", "tool_calls"}
_CALL_KEYS = {"name", "arguments", "id"}


class ScriptedProvider:
    """Answers with the script's turns in order, then with a final text."""

    def __init__(self, turns: Sequence[ModelTurn], *, name: str = "scripted") -> None:
        self.name = name
        self.model = "scripted"
        self.turns = list(turns)

    def __repr__(self) -> str:
        return f"ScriptedProvider({self.name!r}, {len(self.turns)} turns)"

    @classmethod
    def from_file(cls, path: Path) -> ScriptedProvider:
        """Load and validate a script; ScriptError names the file and line that is wrong."""
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise ScriptError(f"cannot read model script {path}: {error.strerror}") from error
        return cls(parse_script(text, str(path)), name=f"scripted:{path}")

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema],
        *,
        max_tokens: int,
        timeout_s: float | None = None,
    ) -> ModelTurn:
        """The turn after the ones the conversation already holds (a final text-only turn once the
        script is used up)."""
        index = sum(1 for message in messages if message.role == "assistant")
        if index < len(self.turns):
            return self.turns[index]
        return ModelTurn(text=EXHAUSTED_TEXT, stop_reason="end_turn", model=self.model)


def parse_script(text: str, source: str = "<script>") -> list[ModelTurn]:
    """Validate the YAML structure node by node (for line numbers), then build the turns."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ScriptError(f"{source}{line}: invalid YAML: {problem}") from None
    if root is None:
        raise ScriptError(f"{source}:1: empty script: expected a mapping with a 'turns' list")
    fields = _mapping(root, source, "the script", required={"turns"}, allowed={"turns"})
    turns_node = fields["turns"]
    if not isinstance(turns_node, SequenceNode):
        raise _error(source, turns_node, "'turns' must be a list of turns")
    return [_turn(node, source, number) for number, node in enumerate(turns_node.value, start=1)]


def _turn(node: Node, source: str, number: int) -> ModelTurn:
    fields = _mapping(node, source, f"turn {number}", required=set(), allowed=_TURN_KEYS)
    if not fields:
        raise _error(source, node, f"turn {number} needs 'text' and/or 'tool_calls'")
    text = _string(fields["text"], source, "'text'") if "text" in fields else ""
    calls: list[ToolCall] = []
    if "tool_calls" in fields:
        calls_node = fields["tool_calls"]
        if not isinstance(calls_node, SequenceNode):
            raise _error(source, calls_node, "'tool_calls' must be a list")
        for index, call_node in enumerate(calls_node.value):
            calls.append(_call(call_node, source, f"call_{number}_{index}"))
    return ModelTurn(text=text, tool_calls=calls, stop_reason="tool_use" if calls else "end_turn", model="scripted")


def _call(node: Node, source: str, default_id: str) -> ToolCall:
    fields = _mapping(node, source, "a tool call", required={"name"}, allowed=_CALL_KEYS)
    name = _string(fields["name"], source, "'name'")
    if not name:
        raise _error(source, fields["name"], "'name' must not be empty")
    arguments: dict[str, Any] = {}
    if "arguments" in fields:
        args_node = fields["arguments"]
        if not isinstance(args_node, MappingNode):
            raise _error(source, args_node, "'arguments' must be a mapping (use {} for none)")
        arguments = yaml.SafeLoader("").construct_document(args_node)
    call_id = _string(fields["id"], source, "'id'") if "id" in fields else default_id
    return ToolCall(id=call_id, name=name, arguments=arguments)


def _mapping(node: Node, source: str, what: str, *, required: set[str], allowed: set[str]) -> dict[str, Node]:
    if not isinstance(node, MappingNode):
        raise _error(source, node, f"{what} must be a mapping")
    fields: dict[str, Node] = {}
    for key_node, value_node in node.value:
        key = key_node.value if isinstance(key_node, ScalarNode) else None
        if key not in allowed:
            raise _error(source, key_node, f"unknown key {key!r} in {what} (allowed: {', '.join(sorted(allowed))})")
        if key in fields:
            raise _error(source, key_node, f"duplicate key {key!r} in {what}")
        fields[key] = value_node
    missing = required - fields.keys()
    if missing:
        raise _error(source, node, f"{what} is missing {', '.join(sorted(missing))!s}")
    return fields


def _string(node: Node, source: str, what: str) -> str:
    if not isinstance(node, ScalarNode) or node.tag != "tag:yaml.org,2002:str":
        raise _error(source, node, f"{what} must be a string")
    return node.value


def _error(source: str, node: Node, message: str) -> ScriptError:
    return ScriptError(f"{source}:{node.start_mark.line + 1}: {message}")


def _factory(target: str, config: ProviderConfig, api_key: str | None) -> ScriptedProvider:
    return ScriptedProvider.from_file(Path(target).expanduser())


register_provider("scripted", _factory)
