"""Claude Code hosted, for real: the published `@zed-industries/claude-agent-acp` with `@anthropic-ai/claude-code`
in an agent image built from the npm registry, driven by a loopback Anthropic Messages server scripted to
probe its sandbox, run the tests, read the broken file, fix it and say so. The run ends verified; every
shell command ran in a fresh container of its own (no network, not root, a read-only root); the agent's
container reached nothing but harness's endpoint (the model behind the gateway); the real key is in no
container and no record; a repository's `.claude/settings.json` hook never runs on this machine; kill -9
mid-run, then `resume`, ends verified."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.batch.records import BatchDir
from harness.trajectory import ToolRecord, read_records
from tests.agent.conftest import EXAMPLE, Harness
from tests.agents.hosting import (
    PROBE,
    AgentWatch,
    assert_confined,
    assert_key_nowhere,
    assert_own_containers,
    probes,
    trapped_repo,
)
from tests.agents.model_servers import RUN_TESTS, AnthropicServer, claude_fix

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

KEY = "sk-ant-canary-0123456789abcdef-never-in-a-container"


def test_claude_code_fixes_the_example_with_every_command_in_its_own_container(tmp_path, run_label, docker_client):
    marker = tmp_path / "host-marker"
    repo = trapped_repo(tmp_path, marker)
    script = claude_fix()
    script.calls[:0] = [("mcp__harness__run_command", {"command": PROBE})] * 2
    todos = [{"content": "Run the tests", "status": "completed", "activeForm": "Running the tests"},
             {"content": "Fix add()", "status": "in_progress", "activeForm": "Fixing add()"}]  # fmt: skip
    script.calls.insert(2, ("TodoWrite", {"todos": todos}))  # its plan: the next turn's reasoning
    harness = Harness(tmp_path / "sessions", run_label)
    with AgentWatch(docker_client, run_label) as watch, AnthropicServer(script) as server:
        ran = harness(
            "run", "--agent", "claude-code", "--model", "anthropic:claude-sonnet-4-6", "--base-url", server.url,
            "--image", "py311", str(repo), "--task", "Fix the failing tests in calc.", "--verify", RUN_TESTS,
            "--session", "claude", "--json", env={"ANTHROPIC_API_KEY": KEY}, timeout=500,
        )  # fmt: skip
    assert ran.code == 0 and ran.json()["outcome"] == "verified", ran.stdout + ran.stderr
    assert ran.json()["tokens"] == server.billed() and ran.json()["cost_usd"] > 0, "the gateway's usage is the run's"
    tools = [r for r in read_records(harness.session_dir("claude")) if isinstance(r, ToolRecord)]
    assert [t.name for t in tools] == ["run_command", "run_command", "run_command", "agent.Read", "agent.Edit",
                                       "run_command"], [t.name for t in tools]  # fmt: skip
    assert_own_containers(probes(harness.session_dir("claude")), 2)
    assert tools[4].wrote and "return a + b" in (harness.session_dir("claude") / "change.patch").read_text()
    assert all(t.envelope is not None and t.envelope.exit_code in (0, 1) for t in tools if t.name == "run_command")
    assert_confined(watch.seen, KEY, "ANTHROPIC_API_KEY")
    assert {s.headers.get("x-api-key") for s in server.seen} == {KEY}, "the gateway put the key in"
    assert_key_nowhere(tmp_path / "sessions", KEY)
    assert not marker.exists(), "the repository's .claude hook ran on this machine"
    shown = harness("show", "claude")
    assert (
        shown.code == 0
        and "agent.Edit" in shown.stdout
        and "hosted agent claude-code: its own container" in shown.stdout
    )
    turns = [r for r in read_records(harness.session_dir("claude")) if r.kind == "turn"]
    assert any(
        t.turn.reasoning and "Plan:\n- [completed] Run the tests\n- [in_progress] Fix add()" in t.turn.reasoning.text
        for t in turns
    )
    exported = harness("export", "claude", "--format", "atif", "-o", str(tmp_path / "claude.json"))
    atif = json.loads((tmp_path / "claude.json").read_text())
    assert exported.code == 0 and atif["agent"]["name"] == "claude-code" and atif["extra"]["hosted_by"] == "harness"
    assert any("Fix add()" in step.get("reasoning_content", "") for step in atif["steps"])
    assert watch.left() == []


def test_kill_9_mid_run_then_resume_ends_verified(tmp_path, run_label, docker_client):
    harness = Harness(tmp_path / "sessions", run_label)
    script = claude_fix()
    with AgentWatch(docker_client, run_label) as watch, AnthropicServer(script) as server:
        args = ["run", "--agent", "claude-code", "--model", "anthropic:claude-sonnet-4-6", "--base-url", server.url,
                "--image", "py311", str(EXAMPLE), "--task", "Fix the failing tests in calc.", "--verify", RUN_TESTS,
                "--session", "killed", "--json"]  # fmt: skip
        crashed = harness(*args, env={"ANTHROPIC_API_KEY": KEY, "HARNESS_CRASH_AT": "mid_tool:3"}, timeout=500)
        assert crashed.code == -9, crashed.stdout + crashed.stderr
        resumed = harness(
            "resume", "killed", "--base-url", server.url, "--json", env={"ANTHROPIC_API_KEY": KEY}, timeout=500
        )
    assert resumed.code == 0 and resumed.json()["outcome"] == "verified", (
        resumed.stdout + resumed.stderr + harness("show", "killed").stdout
    )
    records = read_records(harness.session_dir("killed"))
    assert any(r.kind == "event" and r.event == "resumed" for r in records)
    said = [r.detail for r in records if r.kind == "event" and r.event == "agent_session"]
    assert said and "went on from its session" in said[0], said
    assert "return a + b" in (harness.session_dir("killed") / "change.patch").read_text()
    assert watch.left() == [], "no agent container outlives the run"


def test_the_run_s_cost_limit_holds_the_agent_s_model_traffic(tmp_path, run_label, docker_client):
    """The gateway bills each answer; once the limit is spent it refuses the next request (never sent on)
    and cancels the agent's prompt; the run ends at its limit and the agent's container is stopped."""
    harness = Harness(tmp_path / "sessions", run_label)
    with AgentWatch(docker_client, run_label) as watch, AnthropicServer(claude_fix()) as server:
        ran = harness(
            "run", "--agent", "claude-code", "--model", "anthropic:claude-sonnet-4-6", "--base-url", server.url,
            "--image", "py311", str(EXAMPLE), "--task", "Fix the failing tests in calc.", "--verify", RUN_TESTS,
            "--max-cost", "0.002", "--json", env={"ANTHROPIC_API_KEY": KEY}, timeout=500,
        )  # fmt: skip
    assert ran.code == 13 and ran.json()["outcome"] == "limit:cost", ran.stdout + ran.stderr
    answered = [s for s in server.seen if s.body.get("tools")]
    assert len(answered) == 3, "each answer cost $0.00081: the fourth request was refused at the gateway"
    assert ran.json()["cost_usd"] == pytest.approx(0.00243)
    assert watch.left() == []


def test_a_fork_of_a_hosted_run_starts_a_new_agent_session_on_its_step_told_the_task(
    tmp_path, run_label, docker_client
):
    """An agent's own session cannot be cut at a step: a fork's agent starts anew on the workspace of the
    step (its snapshot), told the task and that the work was begun before; the record says so."""
    harness = Harness(tmp_path / "sessions", run_label)
    with AgentWatch(docker_client, run_label) as watch, AnthropicServer(claude_fix()) as server:
        parent = harness(
            "run", "--agent", "claude-code", "--model", "anthropic:claude-sonnet-4-6", "--base-url", server.url,
            "--image", "py311", str(EXAMPLE), "--task", "Fix the failing tests in calc.", "--verify", RUN_TESTS,
            "--session", "parent", "--json", env={"ANTHROPIC_API_KEY": KEY}, timeout=500,
        )  # fmt: skip
        assert parent.code == 0, parent.stdout + parent.stderr
        asked = len(server.seen)
        forked = harness("fork", "parent", "--at", "2", "--out", str(tmp_path / "forks"), "--json",
                         env={"ANTHROPIC_API_KEY": KEY}, timeout=500)  # fmt: skip
    assert forked.code == 0, forked.stdout + forked.stderr
    records = {r.key.model: r for r in BatchDir(tmp_path / "forks").records()}
    assert set(records) == {
        "claude-code@anthropic:claude-sonnet-4-6",
        "claude-code@anthropic:claude-sonnet-4-6 (parent)",
    }
    child = records["claude-code@anthropic:claude-sonnet-4-6"]
    assert child.outcome == "verified", child
    said = [r.detail for r in read_records(Path(child.session_dir)) if r.kind == "event" and r.event == "agent_session"]
    assert said and "a fork starts anew at its step" in said[0], said
    first = next(s for s in server.seen[asked:] if s.body.get("tools"))
    prompt = json.dumps(first.body["messages"][0])
    assert "This task was begun in an earlier session" in prompt and "Fix the failing tests in calc." in prompt
    assert watch.left() == []


def test_with_its_own_shell_each_command_runs_in_its_container_gated_and_recorded(tmp_path, run_label, docker_client):
    """`--agent-shell own`: Claude Code's Bash runs in its own container (confined: loopback only, not
    root, a read-only root, the read-only paths read-only), each command asked of the gate first (shell
    operators refused, as for run_command) and recorded as a step with its snapshot."""
    script = claude_fix()
    script.calls = [("Bash", {"command": PROBE}), ("Bash", {"command": PROBE}), ("Bash", {"command": "rm -rf /workspace/tests"}),
                    ("Bash", {"command": "python3 -m pytest -q && echo passed"}), *script.calls[1:3],
                    ("Bash", {"command": RUN_TESTS})]  # fmt: skip
    harness = Harness(tmp_path / "sessions", run_label)
    with AgentWatch(docker_client, run_label) as watch, AnthropicServer(script) as server:
        ran = harness(
            "run", "--agent", "claude-code", "--agent-shell", "own", "--model", "anthropic:claude-sonnet-4-6",
            "--base-url", server.url, "--image", "py311", str(EXAMPLE), "--task", "Fix the failing tests in calc.",
            "--verify", RUN_TESTS, "--session", "own", "--json", env={"ANTHROPIC_API_KEY": KEY}, timeout=500,
        )  # fmt: skip
    assert ran.code == 0 and ran.json()["outcome"] == "verified", ran.stdout + ran.stderr
    tools = [r for r in read_records(harness.session_dir("own")) if isinstance(r, ToolRecord)]
    assert [t.name for t in tools] == ["agent.Bash"] * 4 + ["agent.Read", "agent.Edit", "agent.Bash"]
    probed = [t.text for t in tools[:2]]
    assert all("probe" in text and "['lo']" in text and "False" in text for text in probed), probed
    assert probed[0].split()[1] == probed[1].split()[1], "both ran in the agent's one container"
    assert tools[2].is_error, "the read-only tests could not be removed"
    assert tools[3].decision is not None and tools[3].decision.action == "deny" and "operators" in tools[3].text
    assert all(t.wrote for t in tools if t.name == "agent.Bash" and not t.is_error)
    assert (harness.session_dir("own") / "change.patch").read_text().count("diff --git") == 1
    assert_confined(watch.seen, KEY, "ANTHROPIC_API_KEY")
    shown = harness("show", "own")
    assert "its own shell runs each command in that container" in shown.stdout
