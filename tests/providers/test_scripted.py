"""scripted:FILE — the issue's file form, order, exhaustion, ids, and validation with line numbers."""

from __future__ import annotations

import pytest

from harness.errors import ConfigError, ScriptError
from harness.providers.factory import make_provider
from harness.providers.scripted import EXHAUSTED_TEXT, ScriptedProvider, parse_script
from harness.types import Message, ToolCall
from tests.providers.conftest import PROMPT, TOOL

ISSUE_SCRIPT = """\
turns:
  - text: "Let me run the tests first."
    tool_calls:
      - name: run_tests
        arguments: {}
  - tool_calls:
      - {name: read_file, arguments: {path: pkg/calc.py}}
      - {name: search_code, arguments: {pattern: "def add"}}
  - text: "Fixed the sign in add(); the tests pass."
"""


def test_issue_script_turns_in_order_then_final_text(tmp_path):
    path = tmp_path / "demo.yaml"
    path.write_text(ISSUE_SCRIPT)
    provider = make_provider(f"scripted:{path}", api_key=None)
    conversation, turns = list(PROMPT), []
    for _ in range(5):
        turns.append(provider.complete(conversation, [TOOL], max_tokens=10))
        conversation.append(Message(role="assistant", content=turns[-1].text, tool_calls=turns[-1].tool_calls))
    assert turns[0].text == "Let me run the tests first." and turns[0].stop_reason == "tool_use"
    assert turns[0].tool_calls == [ToolCall(id="call_1_0", name="run_tests", arguments={})]
    assert turns[1].text == "" and turns[1].tool_calls == [
        ToolCall(id="call_2_0", name="read_file", arguments={"path": "pkg/calc.py"}),
        ToolCall(id="call_2_1", name="search_code", arguments={"pattern": "def add"}),
    ]
    assert turns[2].text == "Fixed the sign in add(); the tests pass." and turns[2].tool_calls == []
    for exhausted in turns[3:]:
        assert exhausted.text == EXHAUSTED_TEXT and exhausted.tool_calls == [] and exhausted.stop_reason == "end_turn"


def test_ids_are_deterministic_and_can_be_given():
    script = "turns:\n  - tool_calls:\n      - {name: a, id: mine}\n      - {name: b}\n"
    first = ScriptedProvider(parse_script(script)).complete(PROMPT, [], max_tokens=1)
    again = ScriptedProvider(parse_script(script)).complete(PROMPT, [], max_tokens=1)
    assert [c.id for c in first.tool_calls] == ["mine", "call_1_1"] == [c.id for c in again.tool_calls]


def test_empty_turn_list_answers_final_text_at_once():
    provider = ScriptedProvider(parse_script("turns: []\n"))
    assert provider.complete(PROMPT, [], max_tokens=1).text == EXHAUSTED_TEXT


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("turns:\n  - text: ok\n  - tool_calls:\n      - {name: x, argumnts: {}}\n", 4, "unknown key 'argumnts'"),
        ("turns:\n  - text: ok\n   bad: [\n", 3, "invalid YAML"),
        ("turns:\n  - text: 42\n", 2, "'text' must be a string"),
        ("turns:\n  - tool_calls:\n      - arguments: {}\n", 3, "missing name"),
        ("turns:\n  - tool_calls:\n      - {name: x, arguments: {}, arguments_text: '{}'}\n", 3, "not both"),
        ("turns:\n  - {delay_s: -1}\n", 2, "'delay_s' must be a number"),
        ("turns:\n  - tool_calls: {name: x}\n", 2, "'tool_calls' must be a list"),
        ("turns:\n  - text: a\n    text: b\n", 3, "duplicate key 'text'"),
        ("turn:\n  - text: a\n", 1, "unknown key 'turn'"),
        ("turns: hello\n", 1, "'turns' must be a list"),
        ("", 1, "empty script"),
        ("- text: a\n", 1, "must be a mapping"),
        ("turns: []\nagents: [d1]\n", 2, "'agents' must map"),
        ("turns: []\nagents:\n  child:\n    turns: []\n", 3, "'child' is not a sub-agent's name"),
        ("turns: []\nagents:\n  d1: {turn: []}\n", 3, "unknown key 'turn' in d1"),
        ("turns:\n  - usage: {input_tokens: -5}\n", 2, "'input_tokens' must be a finite number"),
        ("turns:\n  - usage: {tokens: 5}\n", 2, "unknown key 'tokens' in 'usage'"),
    ],
)
def test_malformed_scripts_name_the_line(tmp_path, text, line, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ScriptError) as caught:
        make_provider(f"scripted:{path}", api_key=None)
    assert str(caught.value).startswith(f"{path}:{line}: ") and message in str(caught.value)
    assert isinstance(caught.value, ConfigError)


def test_missing_script_file(tmp_path):
    with pytest.raises(ScriptError, match=r"the model script .*nope.yaml: cannot open it"):
        make_provider(f"scripted:{tmp_path / 'nope.yaml'}", api_key=None)


def test_a_script_that_is_a_device_pipe_or_folder_is_refused_before_it_is_read(tmp_path):
    import os

    os.mkfifo(tmp_path / "pipe.yaml")
    for path, says in (("/dev/zero", "character device"), (tmp_path / "pipe.yaml", "named pipe"), (tmp_path, "folder")):
        with pytest.raises(ScriptError, match=f"the model script .*: is a {says}, not a regular file"):
            make_provider(f"scripted:{path}", api_key=None)


@pytest.mark.parametrize("spec", ["gpt-4.1", "nosuch:model", "openai:", ":x"])
def test_bad_specs_are_config_errors(spec):
    with pytest.raises(ConfigError):
        make_provider(spec, api_key=None)


def test_the_turn_follows_the_conversation_not_a_call_counter():
    """A resumed run hands a fresh provider a conversation that already holds answered turns."""
    provider = ScriptedProvider(parse_script("turns:\n  - text: one\n  - text: two\n  - text: three\n"))
    answered = [*PROMPT, Message(role="assistant", content="one"), Message(role="user", content="go on")]
    assert provider.complete(answered, [], max_tokens=1).text == "two"
    assert provider.complete(answered, [], max_tokens=1).text == "two"  # asking again changes nothing
    assert provider.complete(PROMPT, [], max_tokens=1).text == "one"


MALFORMED = """
turns:
  - tool_calls:
      - {name: read_file, arguments_text: '{"path": "calc/ops.py",}'}
      - {name: read_file, arguments_text: 'path equals calc'}
      - {name: read_file, arguments: [1, 2]}
      - {name: read_file, arguments_text: ''}
      - {name: '', arguments: {}}
      - {name: no_such_tool, arguments: {x: 1}}
  - {}
  - {text: late, delay_s: 0.25}
"""
CUT_OFF = """
turns:
  - tool_calls:
      - {name: apply_patch, arguments_text: '{"path": "pkg/calc.py", "old_text": "# A", "new_text": "# TRUNC'}
      - {name: write_file, arguments_text: '{"path": "a.py", "content": "x"'}
      - {name: read_file, arguments_text: '```json\n{"path": "a.py"}\n```'}
  - stop_reason: max_tokens
    tool_calls:
      - {name: read_file, arguments_text: '{"path": "a.py"'}
"""


def test_arguments_the_model_never_closed_are_never_completed():
    """Cut off mid-string or mid-object (the server said nothing) or at the token limit (it said so):
    refused either way; only what is unambiguous (a code fence) is repaired."""
    provider = ScriptedProvider(*_turns_and_delays(CUT_OFF)[0])
    patch, write, fenced = provider.complete(PROMPT, [], max_tokens=1).tool_calls
    assert patch.parse_error is not None and "a string was never closed" in patch.parse_error and patch.arguments == {}
    assert write.parse_error is not None and "an object was never closed" in write.parse_error
    assert fenced.arguments == {"path": "a.py"} and fenced.parse_error is None
    limited = provider.complete([*PROMPT, Message(role="assistant", content="")], [], max_tokens=1)
    assert limited.stop_reason == "max_tokens"
    assert limited.tool_calls[0].parse_error == "arguments are cut off at the output-token limit"


def test_a_script_can_say_what_real_models_get_wrong():
    waits: list[float] = []
    args, kwargs = _turns_and_delays(MALFORMED)
    provider = ScriptedProvider(*args, **kwargs, sleep=waits.append)
    first = provider.complete(PROMPT, [], max_tokens=1)
    repaired, broken, array, empty, nameless, unknown = first.tool_calls
    assert repaired.arguments == {"path": "calc/ops.py"} and repaired.parse_error is None  # safely repaired
    assert broken.parse_error == "arguments are not valid JSON" and broken.raw_arguments == "path equals calc"
    assert array.parse_error == "arguments must be a JSON object"
    assert empty.arguments == {} and empty.parse_error is None
    assert nameless.name == "" and unknown.name == "no_such_tool"
    empty_turn = provider.complete([*PROMPT, Message(role="assistant", content="")], [], max_tokens=1)
    assert (empty_turn.text, empty_turn.tool_calls, empty_turn.stop_reason) == ("", [], "end_turn")
    late = provider.complete([*PROMPT, *[Message(role="assistant", content="")] * 2], [], max_tokens=1, timeout_s=0.1)
    assert late.text == "late" and waits == [0.1], "think time never outlasts what the caller has left"


def _turns_and_delays(text: str):
    from harness.providers.scripted import parse_script_with_delays

    turns, delays = parse_script_with_delays(text)
    return (turns,), {"delays": delays}


def test_a_script_serves_its_sub_agents_by_name_and_says_what_turns_cost(tmp_path):
    path = tmp_path / "tree.yaml"
    path.write_text(
        "turns:\n  - {text: parent, usage: {input_tokens: 100, output_tokens: 7}, cost_usd: 0.25}\n"
        "agents:\n  d1:\n    turns: [{text: child}]\n  d1.d1:\n    turns: [{text: grandchild}]\n"
    )
    provider = ScriptedProvider.from_file(path)
    first = provider.complete(PROMPT, [TOOL], max_tokens=100)
    assert (first.text, first.usage.input_tokens, first.usage.output_tokens, first.cost_usd) == ("parent", 100, 7, 0.25)
    assert provider.for_agent("d1").complete(PROMPT, [TOOL], max_tokens=100).text == "child"
    assert provider.for_agent("d1.d1").complete(PROMPT, [TOOL], max_tokens=100).text == "grandchild"
    assert provider.for_agent("d2").complete(PROMPT, [TOOL], max_tokens=100).text == EXHAUSTED_TEXT
