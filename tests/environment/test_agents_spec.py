"""The hosted agents' specs and harness's side of their ACP sessions, without an engine: which model an
agent can be given, how its command and variables carry the model (escaped), how a batch gives its
models to agents, and how each agent's calls are named, gated and reported as the ACP SDK's own
objects describe them."""

from __future__ import annotations

import json
from typing import Any

import pytest
from acp import schema

from harness.agent.external import ExternalTurns, Report
from harness.agent.hosted import HostedSession, gate_request
from harness.batch.runner import plan
from harness.batch.tasks import Task, TaskDefaults, TasksFile, given_to, known_agent
from harness.config import RunConfig
from harness.environment.agents import AGENTS, agent_for
from harness.errors import UsageError
from harness.policy.decision import Decision
from harness.policy.gate import GateRequest


def test_an_agent_is_given_only_a_model_of_the_protocol_it_speaks() -> None:
    assert agent_for("codex", "openai-responses:gpt-5.2").name == "codex"
    with pytest.raises(UsageError, match="codex speaks OpenAI's Responses API: give it a model as openai-responses"):
        agent_for("codex", "anthropic:claude-sonnet-4-6")
    with pytest.raises(UsageError, match="not an agent harness hosts"):
        agent_for("aider", "openai:gpt-4.1")
    with pytest.raises(UsageError, match="not none"):
        agent_for("claude-code", None)


def test_the_model_reaches_an_agent_escaped_for_where_it_goes() -> None:
    hostile = 'gpt-5"\n[model_providers.evil]'
    argv = AGENTS["codex"].argv(hostile)
    assert argv[-2:] == ["-c", f"model={json.dumps(hostile)}"], "a TOML string, quoted and escaped"
    config = json.loads(AGENTS["opencode"].variables(hostile)["OPENCODE_CONFIG_CONTENT"])
    assert config["model"] == f"anthropic/{hostile}" and hostile in config["provider"]["anthropic"]["models"]
    assert AGENTS["claude-code"].argv(hostile) == list(AGENTS["claude-code"].command), "Claude Code reads a variable"


def test_a_run_config_model_naming_an_agent_is_that_agent_with_that_model() -> None:
    config = RunConfig(model="claude-code@anthropic:claude-sonnet-4-6")
    assert (config.agent, config.model) == ("claude-code", "anthropic:claude-sonnet-4-6")
    with pytest.raises(ValueError, match="names the agent 'codex', and agent is 'gemini'"):
        RunConfig(model="codex@openai-responses:gpt-5.2", agent="gemini")


def test_a_batch_gives_its_models_to_the_agents_its_tasks_name_and_checks_each_pairing(tmp_path) -> None:
    tasks = TasksFile(
        source=tmp_path / "tasks.yaml",
        defaults=TaskDefaults(agent="claude-code"),
        tasks=[
            Task(id="a", repo=tmp_path, task="fix it"),
            Task(id="b", repo=tmp_path, task="fix it", agent="harness"),
        ],
    )
    keys = [key.model for key, _ in plan(tasks, ["anthropic:claude-sonnet-4-6", "codex@openai-responses:gpt-5.2"], 1)]
    assert keys == [
        "claude-code@anthropic:claude-sonnet-4-6", "codex@openai-responses:gpt-5.2",  # task a: the defaults' agent
        "anthropic:claude-sonnet-4-6", "codex@openai-responses:gpt-5.2",  # task b: harness's own loop
    ]  # fmt: skip
    assert given_to("scripted:/tmp/fix.yaml", "codex") == "scripted:/tmp/fix.yaml", "an offline model stays harness's"
    with pytest.raises(UsageError, match="model codex@anthropic:x: the agent codex speaks"):
        plan(tasks, ["codex@anthropic:x"], 1)
    with pytest.raises(ValueError, match="'aider' is not an agent harness hosts"):
        known_agent("aider")


def _session(decide: Any = None) -> tuple[HostedSession, ExternalTurns]:
    turns = ExternalTurns()
    allow = lambda request, name, arguments: (True, "", Decision(action="allow", rule="r", reason="ok"))  # noqa: E731
    return HostedSession([], turns, workdir="/workspace", mcp_url="", session_meta={}, decide=decide or allow), turns


def test_each_agent_s_calls_of_harness_mcp_server_are_known_and_let_through_to_the_loop() -> None:
    session, _ = _session(decide=lambda *a: pytest.fail("a harness tool is gated by the loop, not here"))
    claude = schema.ToolCallUpdate(tool_call_id="toolu_1", title="run", field_meta={"claudeCode": {"toolName": "mcp__harness__run_command"}})  # fmt: skip
    gemini = schema.ToolCallUpdate(tool_call_id="mcp_harness_run_command__mcp_harness_run_command_17_0", title="ls")
    opencode = schema.ToolCallUpdate(tool_call_id="toolu_9", title="harness_run_tests")
    codex_start = schema.ToolCallStart(tool_call_id="call_1", title="Tool: harness/run_command", session_update="tool_call",
                                       raw_input={"server": "harness", "tool": "run_command", "arguments": {}})  # fmt: skip
    session.update(codex_start)
    codex_asks = schema.ToolCallUpdate(tool_call_id="call_1", title="Approve MCP tool call")
    assert all(session.permission(call) for call in (claude, gemini, opencode, codex_asks))


def test_an_edit_is_gated_on_every_path_it_names_and_a_refusal_is_a_step_at_once() -> None:
    asked: list[GateRequest] = []

    def deny(request: GateRequest, name: str, arguments: dict[str, Any]) -> tuple[bool, str, Decision]:
        asked.append(request)
        return False, "tests/ is read-only", Decision(action="deny", rule="read-only-path", reason="read-only")

    session, turns = _session(decide=deny)
    patch = schema.ToolCallUpdate(
        tool_call_id="call_2", title="Edit /workspace/tests/test_ops.py", kind="edit",
        raw_input={"call_id": "call_2", "changes": {"/workspace/tests/test_ops.py": {}, "/workspace/calc/ops.py": {}}},
        locations=[schema.ToolCallLocation(path="/workspace/README.md")],
    )  # fmt: skip
    assert session.permission(patch) is False
    assert asked == [
        GateRequest(tool="apply_patch", tier="write", paths=("tests/test_ops.py", "calc/ops.py", "README.md"))
    ]
    turn = turns.complete([], [], max_tokens=1, timeout_s=1)
    assert [c.name for c in turn.tool_calls] == ["agent.Edit"] and "call_id" not in turn.tool_calls[0].arguments
    assert "harness refused Edit tests/test_ops.py" in turns.reports[turn.tool_calls[0].id].text
    session.update(schema.ToolCallProgress(tool_call_id="call_2", status="failed", session_update="tool_call_update"))
    assert turns.reports.keys() == {turn.tool_calls[0].id}, "its later update adds no second step"
    # the next prompt says why (an agent may end its turn on a refusal without hearing it)
    assert session.refusals == ["harness refused Edit tests/test_ops.py, calc/ops.py, README.md: tests/ is read-only"]


def test_a_call_no_harness_tool_stands_for_is_refused() -> None:
    session, _ = _session()
    assert (
        gate_request(session._remember(schema.ToolCallUpdate(tool_call_id="x", title="KillShell")), "/workspace")
        is None
    )
    assert (
        session.permission(schema.ToolCallUpdate(tool_call_id="y", title="WebFetch https://example.invalid")) is False
    )


def test_an_agent_call_reported_done_is_a_step_named_from_its_id_with_its_paths() -> None:
    session, turns = _session()
    session.update(schema.ToolCallStart(tool_call_id="read_file__read_file_1_0", title="calc/ops.py", kind="read",
                                        session_update="tool_call",
                                        locations=[schema.ToolCallLocation(path="/workspace/calc/ops.py")]))  # fmt: skip
    session.update(schema.ToolCallProgress(tool_call_id="read_file__read_file_1_0", status="completed",
                                           session_update="tool_call_update"))  # fmt: skip
    turn = turns.complete([], [], max_tokens=1, timeout_s=1)
    assert [(c.name, c.arguments) for c in turn.tool_calls] == [("agent.read_file", {"paths": ["calc/ops.py"]})]


def test_a_loaded_session_s_history_is_no_new_step_even_when_it_comes_after_the_load_answer() -> None:
    """Gemini CLI answers session/load, then replays its history; an update of a call the record already
    holds (the call a crash left open, closed on the next prompt) is history too."""
    turns = ExternalTurns()
    session = HostedSession([], turns, workdir="/workspace", mcp_url="", session_meta={},
                            decide=lambda *a: (True, "", None), resumed=True,
                            recorded=frozenset({"read_file__read_file_1_0"}))  # fmt: skip
    session.loaded = session._replaying = True  # as _open leaves it after a load that succeeded
    replayed = schema.ToolCallStart(tool_call_id="replace__replace_2_0", title="calc/ops.py", kind="edit",
                                    session_update="tool_call", status="completed")  # fmt: skip
    session.update(replayed)
    session.update(schema.AgentMessageChunk(session_update="agent_message_chunk",
                                            content=schema.TextContentBlock(type="text", text="said before")))  # fmt: skip
    session._replaying = False  # the first prompt went out
    session.update(schema.ToolCallProgress(tool_call_id="replace__replace_2_0", status="completed",
                                           session_update="tool_call_update"))  # fmt: skip
    session.update(schema.ToolCallProgress(tool_call_id="read_file__read_file_1_0", status="completed",
                                           session_update="tool_call_update"))  # fmt: skip
    session.update(schema.ToolCallProgress(tool_call_id="read_file__read_file_3_0", status="completed",
                                           session_update="tool_call_update"))  # fmt: skip
    turn = turns.complete([], [], max_tokens=1, timeout_s=1)
    assert [c.id.rsplit(".", 1)[0] for c in turn.tool_calls] == ["read_file__read_file_3_0"], "only the new call"
    assert turn.text == "", "the replayed words are not the new turn's"


def test_the_gateway_s_refusal_counts_a_turn_s_traffic_while_it_moves_to_the_budget() -> None:
    """The loop takes a turn's usage from the provider, then charges its budget: a request the agent
    sends in between is refused all the same once the limit is spent, and nothing is counted twice."""
    from harness.agent.budget import Budget
    from harness.assembly.hosted import Hosted
    from harness.config import LimitsConfig
    from harness.types import Usage

    session, turns = _session()
    budget = Budget(LimitsConfig(max_cost_usd=0.002))
    hosted = Hosted("claude-code", turns, session, gateway=None, started_ms=0)  # type: ignore[arg-type]
    refusal = hosted._spent_out(budget)
    for _ in range(2):
        turns.charge(Usage(input_tokens=120, output_tokens=30), 0.00081)
        turns.reported("c", "Read", {}, Report(text="ok"))
        budget.charge_turn(turns.complete([], [], max_tokens=1, timeout_s=1))
    assert refusal() is None, "$0.00162 of $0.002: not spent (nothing counted twice)"
    turns.charge(Usage(input_tokens=120, output_tokens=30), 0.00081)
    turns.reported("c", "Edit", {}, Report(text="ok"))
    taken = turns.complete([], [], max_tokens=1, timeout_s=1)  # taken from the provider, not yet charged
    assert "cost budget is spent ($0.0024 of $0.0020)" in (refusal() or "")
    budget.charge_turn(taken)
    assert "($0.0024 of $0.0020)" in (refusal() or ""), "once charged, counted once"


def test_a_terminal_the_agent_opens_is_the_loop_s_run_command_and_its_exit_is_the_record_s() -> None:
    from harness.trajectory import ToolRecord
    from tests.agent.test_verify import envelope

    session, turns = _session()
    ident = session.create_terminal("python3", ["-c", "print('hi there')"])
    assert session.terminal_result(ident, wait=False) == ("", None, False), "nothing before the loop ran it"
    turn = turns.complete([], [], max_tokens=1, timeout_s=5)
    (call,) = turn.tool_calls
    assert (call.name, call.arguments) == ("run_command", {"command": "python3 -c 'print('\"'\"'hi there'\"'\"')'"})
    turns.observe(ToolRecord(step=1, call_id=call.id, name=call.name, arguments=call.arguments,
                             envelope=envelope(3, "hi there\n"), text="exit_code=3 ...\nhi there", is_error=False))  # fmt: skip
    assert session.terminal_result(ident, wait=True) == ("exit_code=3 ...\nhi there", 3, True)


def test_a_terminal_the_agent_kills_or_releases_while_it_runs_stops_its_call_and_ends_by_sigkill() -> None:
    """`terminal/kill` (and `terminal/release` of a command still running) stops the loop's call by the
    id the terminal gave it: the sandbox running it kills its container (sandbox.stopping); the
    agent then reads an exit by SIGKILL. A terminal whose command ended is left as it is."""
    import asyncio
    import threading

    from harness.agent.hosted import _Client
    from harness.trajectory import ToolRecord
    from sandbox import stopping
    from tests.agent.test_verify import envelope

    session, turns = _session()
    client = _Client(session)
    idents, calls = [], []
    for _ in range(3):  # three at once, each taken by the loop (its turn) before the next is opened
        idents.append(session.create_terminal("sleep", ["60"]))
        calls += turns.complete([], [], max_tokens=1, timeout_s=5).tool_calls
    killed, released, ended = idents
    assert [c.id.split("_")[:2] for c in calls] == [["term", "1"], ["term", "2"], ["term", "3"]]
    assert len({c.id for c in calls}) == 3, "each terminal's call has an id of its own"
    stopped = {call.id: threading.Event() for call in calls}
    for ident, call in zip((killed, released), calls, strict=False):
        with stopping.running(call.id):  # as the loop runs it: the sandbox attaches its kill
            stopping.on_stop(stopped[call.id].set)
            asyncio.run((client.kill_terminal if ident == killed else client.release_terminal)("s", ident))
            assert stopped[call.id].wait(5), f"{ident}'s call was stopped"
    for call, code in zip(calls, (137, 137, 0), strict=True):
        turns.observe(ToolRecord(step=1, call_id=call.id, name=call.name, arguments=call.arguments,
                                 envelope=envelope(code, ""), text=f"exit_code={code}", is_error=False))  # fmt: skip
    assert session.terminal_result(ended, wait=True)[1:] == (0, True)
    with stopping.running(calls[2].id):
        stopping.on_stop(stopped[calls[2].id].set)
        asyncio.run(client.kill_terminal("s", ended))
        assert not stopped[calls[2].id].wait(0.3), "an ended terminal's kill stops nothing"
    status = asyncio.run(client.terminal_output("s", killed)).exit_status
    assert (status.exit_code, status.signal) == (None, "SIGKILL")
    assert asyncio.run(client.wait_for_terminal_exit("s", ended)).exit_code == 0
