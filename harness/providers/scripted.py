"""`scripted:FILE` — canned assistant turns from a YAML file, for the offline demo and tests.

    turns:
      - text: "Let me run the tests first."
        tool_calls:
          - name: run_tests
            arguments: {}
      - tool_calls:
          - {name: read_file, arguments: {path: pkg/calc.py}}
      - text: "Fixed the sign in add(); the tests pass."

What real models get wrong can be scripted too, so a run can replay it through the real loop: a
call's `arguments_text` is sent as raw argument text (invalid or truncated JSON, an array, an empty
string) instead of a mapping, `arguments` may be any YAML value (a non-mapping is sent as its JSON
text), `name` may be empty or unknown, `{}` is an empty turn (no text, no call), `stop_reason:
max_tokens` says the server stopped the turn at the output-token limit (its calls' argument text is
then cut off, as a real server's would be), and `delay_s` makes the model think that long before
answering (batch benchmarks need real think time), `usage: {input_tokens: N, output_tokens: M}` and
`cost_usd` say what the turn cost (budgets and totals are exercised offline).

The turn served is chosen by how many assistant messages the conversation already holds (like the
replay provider), so a resumed run continues at the right turn without any outside bookkeeping (a
script that took over a conversation, in a fork or a resume with another model, counts from there:
its first turn answers first);
when the turns run out the model answers with a final text and no tool call. The file is validated
when the provider is built (before the run), and errors name the line.
Tool-call ids are deterministic: `call_<turn>_<n>` (1-based turn, 0-based call) unless given.

A run with sub-agents (`delegate`) scripts each child's turns under `agents`, by the child's name
(`d1`, `d2` ... in the order the run delegates; a child's own children `d1.d1`):

    turns: [...]
    agents:
      d1:
        turns: [...]

A run of attempts (`harness run --attempts K`) scripts each attempt's turns under `attempts`, the
first entry for attempt a1 and so on (an attempt without an entry answers with `turns`):

    turns: [...]
    attempts:
      - turns: [...]
      - turns: [...]
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from harness.errors import ScriptError
from harness.providers.arguments import build_tool_call, safe_turn
from harness.providers.config import ProviderConfig
from harness.providers.factory import register_provider
from harness.types import Message, ModelTurn, ToolCall, ToolSchema, Usage, is_summary_request, turns_so_far

EXHAUSTED_TEXT = "I have nothing more to do."
_TURN_KEYS = {"text", "tool_calls", "delay_s", "stop_reason", "usage", "cost_usd"}
_USAGE_KEYS = {"input_tokens", "output_tokens"}
_STOPS = ("end_turn", "tool_use", "max_tokens")
_CALL_KEYS = {"name", "arguments", "arguments_text", "id"}


SCRIPT_LIMIT = 64 * 1024**2
"""A model script larger than this is refused before it is read."""


class ScriptedProvider:
    """Answers with the script's turns in order, then with a final text."""

    def __init__(
        self,
        turns: Sequence[ModelTurn],
        *,
        name: str = "scripted",
        delays: Sequence[float] = (),
        sleep: Callable[[float], None] = time.sleep,
        first_turn: int = 0,
        agents: dict[str, ScriptedProvider] | None = None,
        attempts: Sequence[ScriptedProvider] = (),
    ) -> None:
        self.name = name
        self.agents = agents or {}
        """The sub-agents' scripts by name."""
        self.attempts = list(attempts)
        """The attempts' scripts, a1 first."""
        self.first_turn = first_turn
        """Turns the conversation held before this script took it over (a fork with another model)."""
        self.model = "scripted"
        self.turns = list(turns)
        self.delays = list(delays) or [0.0] * len(self.turns)
        self._sleep = sleep

    def __repr__(self) -> str:
        return f"ScriptedProvider({self.name!r}, {len(self.turns)} turns)"

    @classmethod
    def from_file(cls, path: Path, first_turn: int = 0) -> ScriptedProvider:
        """Load and validate a script; ScriptError names the file and line that is wrong."""
        from sandbox.named import NamedFileError, read_named

        try:
            text = read_named(path, what="the model script", limit=SCRIPT_LIMIT).decode("utf-8")
        except NamedFileError as error:
            raise ScriptError(str(error)) from None
        except UnicodeDecodeError:
            raise ScriptError(f"the model script {path} is not UTF-8 text") from None
        turns, delays, agents, attempts = _parse(text, str(path))
        children = {
            agent: cls(agent_turns, name=f"scripted:{path}#{agent}", delays=agent_delays)
            for agent, (agent_turns, agent_delays) in agents.items()
        }
        tries = [
            cls(own, name=f"scripted:{path}#a{n}", delays=own_delays, first_turn=first_turn, agents=children)
            for n, (own, own_delays) in enumerate(attempts, start=1)
        ]
        return cls(
            turns, name=f"scripted:{path}", delays=delays, first_turn=first_turn, agents=children, attempts=tries
        )

    def for_agent(self, agent: str) -> ScriptedProvider:
        """The script of sub-agent `agent` (one that answers with a final text when it has none)."""
        return self.agents.get(agent) or ScriptedProvider([], name=f"{self.name}#{agent}")

    def for_attempt(self, number: int) -> ScriptedProvider:
        """The script of attempt `number` (1 is a1), or this one when the script gives it none."""
        return self.attempts[number - 1] if 0 < number <= len(self.attempts) else self

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
        if is_summary_request(messages):
            return ModelTurn(text=mechanical_summary(messages), stop_reason="end_turn", model=self.model)
        index = turns_so_far(messages) - self.first_turn
        if 0 <= index < len(self.turns):
            delay = self.delays[index] if index < len(self.delays) else 0.0
            if delay > 0:  # think time, never past what the caller has left
                self._sleep(delay if timeout_s is None else min(delay, timeout_s))
            return self.turns[index]
        return ModelTurn(text=EXHAUSTED_TEXT, stop_reason="end_turn", model=self.model)


def mechanical_summary(messages: Sequence[Message]) -> str:
    """A canned model's answer to a summary request: the calls of the summarised turns, as the
    request lists them (nothing invented, nothing concluded)."""
    lines = messages[-1].content.splitlines() if messages else []
    calls = [line.removeprefix("call: ") for line in lines if line.startswith("call: ")]
    first = lines[0] if lines else "Model turns to summarise:"
    done = ", ".join(calls[:40]) + (f" and {len(calls) - 40} more" if len(calls) > 40 else "")
    return (
        f"Done: {first.removesuffix(' to summarise:').lower()} made these calls: {done or 'none'}.\n"
        "Open: the task is not finished.\nExcluded:\n- none\nNext: continue with the task."
    )


def parse_script(text: str, source: str = "<script>") -> list[ModelTurn]:
    """Validate the YAML structure node by node (for line numbers), then build the turns."""
    return parse_script_with_delays(text, source)[0]


def parse_script_with_delays(text: str, source: str = "<script>") -> tuple[list[ModelTurn], list[float]]:
    """The turns and each turn's think time (`delay_s`, 0 when not given)."""
    turns, delays, _, _ = _parse(text, source)
    return turns, delays


Script = tuple[list[ModelTurn], list[float]]


def _parse(text: str, source: str) -> tuple[list[ModelTurn], list[float], dict[str, Script], list[Script]]:
    """The turns, their think times, the sub-agents' own (by name) and the attempts' (a1 first)."""
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ScriptError(f"{source}{line}: invalid YAML: {problem}") from None
    if root is None:
        raise ScriptError(f"{source}:1: empty script: expected a mapping with a 'turns' list")
    fields = _mapping(root, source, "the script", required={"turns"}, allowed={"turns", "agents", "attempts"})
    turns, delays = _turns(fields["turns"], source)
    agents: dict[str, Script] = {}
    if "agents" in fields:
        node = fields["agents"]
        if not isinstance(node, MappingNode):
            raise _error(source, node, "'agents' must map a sub-agent's name (d1, d1.d2 ...) to its turns")
        _mapping(node, source, "'agents'", required=set(), allowed=None)  # keys are strings, none twice
        for key_node, script in node.value:
            name = key_node.value
            if not AGENT_NAME.fullmatch(name):
                raise _error(source, key_node, f"{name!r} is not a sub-agent's name (d1, d2, d1.d1 ...)")
            agents[name] = _turns(
                _mapping(script, source, name, required={"turns"}, allowed={"turns"})["turns"], source
            )
    attempts: list[Script] = []
    if "attempts" in fields:
        node = fields["attempts"]
        if not isinstance(node, SequenceNode):
            raise _error(source, node, "'attempts' must be a list of scripts, attempt a1's first")
        for number, script in enumerate(node.value, start=1):
            own = _mapping(script, source, f"attempt a{number}", required={"turns"}, allowed={"turns"})
            attempts.append(_turns(own["turns"], source))
    return turns, delays, agents, attempts


AGENT_NAME = re.compile(r"d[1-9][0-9]*(\.d[1-9][0-9]*)*")


def _turns(node: Node, source: str) -> Script:
    if not isinstance(node, SequenceNode):
        raise _error(source, node, "'turns' must be a list of turns")
    parsed = [_turn(turn, source, number) for number, turn in enumerate(node.value, start=1)]
    return [turn for turn, _ in parsed], [delay for _, delay in parsed]


def _turn(node: Node, source: str, number: int) -> tuple[ModelTurn, float]:
    fields = _mapping(node, source, f"turn {number}", required=set(), allowed=_TURN_KEYS)
    text = _string(fields["text"], source, "'text'") if "text" in fields else ""
    delay = _seconds(fields["delay_s"], source) if "delay_s" in fields else 0.0
    stop = _string(fields["stop_reason"], source, "'stop_reason'") if "stop_reason" in fields else ""
    if stop and stop not in _STOPS:
        raise _error(source, fields["stop_reason"], f"'stop_reason' must be one of {', '.join(_STOPS)}")
    calls: list[ToolCall] = []
    if "tool_calls" in fields:
        calls_node = fields["tool_calls"]
        if not isinstance(calls_node, SequenceNode):
            raise _error(source, calls_node, "'tool_calls' must be a list")
        for index, call_node in enumerate(calls_node.value):
            calls.append(_call(call_node, source, f"call_{number}_{index}", truncated=stop == "max_tokens"))
    stop = stop or ("tool_use" if calls else "end_turn")
    usage = Usage()
    if "usage" in fields:
        counts = _mapping(fields["usage"], source, "'usage'", required=set(), allowed=_USAGE_KEYS)
        usage = Usage(**{key: _count(node, source, key) for key, node in counts.items()})
    cost = _count(fields["cost_usd"], source, "cost_usd", number=float) if "cost_usd" in fields else 0.0
    turn = ModelTurn(text=text, tool_calls=calls, stop_reason=stop, model="scripted", usage=usage, cost_usd=cost)
    return safe_turn(turn), delay


def _call(node: Node, source: str, default_id: str, *, truncated: bool = False) -> ToolCall:
    fields = _mapping(node, source, "a tool call", required={"name"}, allowed=_CALL_KEYS)
    name = _string(fields["name"], source, "'name'")
    call_id = _string(fields["id"], source, "'id'") if "id" in fields else default_id
    if "arguments" in fields and "arguments_text" in fields:
        raise _error(source, fields["arguments_text"], "give 'arguments' or 'arguments_text', not both")
    if "arguments_text" in fields:  # exactly what a model would stream: parsed as a model's text is
        text = _string(fields["arguments_text"], source, "'arguments_text'")
        return build_tool_call(call_id, name, text, truncated=truncated)
    if "arguments" not in fields:
        return ToolCall(id=call_id, name=name, arguments={})
    value = yaml.SafeLoader("").construct_document(fields["arguments"])
    if isinstance(value, dict):
        return ToolCall(id=call_id, name=name, arguments=value)
    return build_tool_call(call_id, name, json.dumps(value, default=str))


def _count(node: Node, source: str, what: str, number: type = int) -> Any:
    try:
        value = number(node.value) if isinstance(node, ScalarNode) else -1
    except ValueError:
        value = -1
    if not 0 <= value < float("inf"):  # NaN and infinity too: a cost nobody can add up
        raise _error(source, node, f"{what!r} must be a finite number, 0 or more")
    return value


def _seconds(node: Node, source: str) -> float:
    try:
        value = float(node.value) if isinstance(node, ScalarNode) else -1.0
    except ValueError:
        value = -1.0
    if not 0 <= value <= 3600:
        raise _error(source, node, "'delay_s' must be a number of seconds between 0 and 3600")
    return value


def _mapping(node: Node, source: str, what: str, *, required: set[str], allowed: set[str] | None) -> dict[str, Node]:
    if not isinstance(node, MappingNode):
        raise _error(source, node, f"{what} must be a mapping")
    fields: dict[str, Node] = {}
    for key_node, value_node in node.value:
        key = key_node.value if isinstance(key_node, ScalarNode) else None
        if key is None or (allowed is not None and key not in allowed):
            known = f" (allowed: {', '.join(sorted(allowed))})" if allowed is not None else ""
            raise _error(source, key_node, f"unknown key {key!r} in {what}{known}")
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
    return ScriptedProvider.from_file(Path(target).expanduser(), config.first_turn)


register_provider("scripted", _factory)
