"""opencode hosted, for real: the published `opencode-ai` (`opencode acp`) in an agent image built from the
npm registry, its config given in its environment (a repository's opencode.json is not read), pointed
at a loopback Anthropic Messages server through harness's gateway, scripted to probe its sandbox, run
the tests, read the broken file, edit a test (refused: tests are read-only), fix the code and say so.
Its shell and web tools are off, so every command is harness's `run_command` in a fresh container; its
own edits ask harness first, and its writes come to harness's `write_file` (ACP's fs/write_text_file),
each in a fresh container. The run ends verified; its container is confined; the key is in no
container and no record; kill -9 mid-run, then `resume`, ends verified."""

from __future__ import annotations

import pytest

from harness.trajectory import ToolRecord, read_records
from tests.agent.conftest import EXAMPLE, Harness
from tests.agents.hosting import PROBE, AgentWatch, assert_confined, assert_key_nowhere, assert_own_containers, probes
from tests.agents.model_servers import CHEAT, RUN_TESTS, AnthropicServer, fix_script
from tests.telemetry.test_run_spans import spans_in

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

KEY = "sk-ant-canary-opencode-0123456789-never-in-a-container"


def _run(harness: Harness, url: str, session: str, *extra: str, env: dict[str, str] | None = None):
    return harness(
        "run", "--agent", "opencode", "--model", "anthropic:claude-sonnet-4-6", "--base-url", url,
        "--image", "py311", str(EXAMPLE), "--task", "Fix the failing tests in calc.", "--verify", RUN_TESTS,
        "--session", session, "--json", *extra, env={"ANTHROPIC_API_KEY": KEY, **(env or {})}, timeout=500,
    )  # fmt: skip


def test_opencode_fixes_the_example_its_commands_in_their_own_containers_its_edits_gated(
    tmp_path, run_label, docker_client
):
    script = fix_script("opencode")
    script.calls[:0] = [("harness_run_command", {"command": PROBE})] * 2
    script.calls.insert(4, fix_script("opencode", CHEAT).calls[2])
    harness = Harness(tmp_path / "sessions", run_label)
    with AgentWatch(docker_client, run_label) as watch, AnthropicServer(script) as server:
        ran = _run(harness, server.url, "opencode", "--otel-file", str(tmp_path / "spans.jsonl"))
    assert ran.code == 0 and ran.json()["outcome"] == "verified", ran.stdout + ran.stderr
    assert ran.json()["tokens"] == server.billed() and ran.json()["cost_usd"] > 0, "the gateway's usage is the run's"
    runs = [s for s in spans_in(tmp_path / "spans.jsonl") if s["name"].startswith("invoke_agent")]
    assert [(s["name"], s["attributes"]["gen_ai.agent.name"]) for s in runs] == [("invoke_agent opencode", "opencode")]
    tools = [r for r in read_records(harness.session_dir("opencode")) if isinstance(r, ToolRecord)]
    names = [t.name for t in tools]
    assert names[:6] == ["run_command"] * 3 + ["agent.read", "agent.edit", "write_file"], names
    # its own edit is reported over ACP, the test run after it comes over MCP: either may be recorded first
    assert sorted(names[6:]) == ["agent.edit", "run_command"], names
    assert_own_containers(probes(harness.session_dir("opencode")), 2)
    refused, written = tools[4], tools[5]
    fixed = next(t for t in tools[6:] if t.name == "agent.edit")
    assert refused.is_error and refused.decision is not None and refused.decision.action == "deny"
    assert fixed.decision is not None and fixed.decision.action == "allow"
    # its write came to harness (ACP fs/write_text_file): harness's write_file, in a fresh container
    assert written.wrote and written.envelope is not None and written.decision is not None
    patch = (harness.session_dir("opencode") / "change.patch").read_text()
    assert "return a + b" in patch and "test_ops" not in patch, "the refused edit never landed"
    assert_confined(watch.seen, KEY, "ANTHROPIC_API_KEY")
    assert {s.headers.get("x-api-key") for s in server.seen} == {KEY}, "the gateway put the key in"
    assert_key_nowhere(tmp_path / "sessions", KEY)
    assert watch.left() == []


def test_opencode_killed_mid_run_resumes_verified(tmp_path, run_label, docker_client):
    harness = Harness(tmp_path / "sessions", run_label)
    with AgentWatch(docker_client, run_label) as watch, AnthropicServer(fix_script("opencode")) as server:
        # killed while the edit's step is recorded: opencode made the edit; its next call (harness's, over MCP)
        # is cut short, and after session/load it sees that call's error and goes on
        crashed = _run(harness, server.url, "killed", env={"HARNESS_CRASH_AT": "mid_tool:3"})
        assert crashed.code == -9, crashed.stdout + crashed.stderr
        resumed = harness("resume", "killed", "--base-url", server.url, "--json", env={"ANTHROPIC_API_KEY": KEY},
                          timeout=500)  # fmt: skip
    assert resumed.code == 0 and resumed.json()["outcome"] == "verified", (
        resumed.stdout + resumed.stderr + harness("show", "killed").stdout
    )
    records = read_records(harness.session_dir("killed"))
    said = [r.detail for r in records if r.kind == "event" and r.event == "agent_session"]
    assert said and "went on from its session" in said[0], said
    assert "return a + b" in (harness.session_dir("killed") / "change.patch").read_text()
    assert watch.left() == [], "no agent container outlives the run"
