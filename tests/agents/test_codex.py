"""Codex hosted, for real: the published `@zed-industries/codex-acp` (Codex's own core, built in) in an
agent image built from the npm registry, driven by a loopback OpenAI Responses server scripted to probe
its sandbox, run the tests, read the broken file, edit a test (refused: tests are read-only), fix the
code and say so. Its shell is off, so every command is harness's `run_command`, each in a fresh
container; its own apply_patch asks harness first. The run ends verified; the agent's container is
confined as Claude Code's is; the key is in no container and no record; kill -9 mid-run, then `resume`,
ends verified."""

from __future__ import annotations

import pytest

from harness.trajectory import ToolRecord, read_records
from tests.agent.conftest import EXAMPLE, Harness
from tests.agents.hosting import PROBE, AgentWatch, assert_confined, assert_key_nowhere, assert_own_containers, probes
from tests.agents.model_servers import RUN_TESTS, ResponsesServer, codex_fix

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

KEY = "sk-proj-canary-codex-0123456789-never-in-a-container"


def _run(harness: Harness, url: str, session: str, *extra: str, env: dict[str, str] | None = None):
    return harness(
        "run", "--agent", "codex", "--model", "openai-responses:gpt-5.2", "--base-url", f"{url}/v1",
        "--image", "py311", str(EXAMPLE), "--task", "Fix the failing tests in calc.", "--verify", RUN_TESTS,
        "--session", session, "--json", *extra, env={"OPENAI_API_KEY": KEY, **(env or {})}, timeout=500,
    )  # fmt: skip


def test_codex_fixes_the_example_its_commands_in_their_own_containers_its_edits_gated(
    tmp_path, run_label, docker_client
):
    script = codex_fix()
    script.calls[:0] = [("run_command", {"command": PROBE})] * 2
    harness = Harness(tmp_path / "sessions", run_label)
    with AgentWatch(docker_client, run_label) as watch, ResponsesServer(script) as server:
        ran = _run(harness, server.url, "codex")
    assert ran.code == 0 and ran.json()["outcome"] == "verified", ran.stdout + ran.stderr
    assert ran.json()["tokens"] == server.billed() and ran.json()["cost_usd"] > 0, "the gateway's usage is the run's"
    tools = [r for r in read_records(harness.session_dir("codex")) if isinstance(r, ToolRecord)]
    assert [t.name for t in tools] == ["run_command"] * 3 + ["read_file", "agent.Edit", "agent.Edit", "run_command"]
    assert_own_containers(probes(harness.session_dir("codex")), 2)
    refused, fixed = tools[4], tools[5]
    assert refused.is_error and refused.decision is not None and refused.decision.action == "deny"
    assert "tests/test_ops.py" in refused.text and not refused.wrote
    assert fixed.decision is not None and fixed.decision.action == "allow" and fixed.wrote
    patch = (harness.session_dir("codex") / "change.patch").read_text()
    assert "return a + b" in patch and "test_ops" not in patch, "the refused edit never landed"
    assert any("harness refused Edit tests/test_ops.py" in str(s.body.get("input")) for s in server.seen), (
        "the agent heard why"
    )
    assert_confined(watch.seen, KEY, "OPENAI_API_KEY")
    assert {s.headers.get("authorization") for s in server.seen} == {f"Bearer {KEY}"}, "the gateway put the key in"
    assert_key_nowhere(tmp_path / "sessions", KEY)
    shown = harness("show", "codex")
    assert shown.code == 0 and "harness refused Edit tests/test_ops.py" in shown.stdout
    assert watch.left() == []


def test_codex_killed_mid_run_resumes_verified(tmp_path, run_label, docker_client):
    harness = Harness(tmp_path / "sessions", run_label)
    with AgentWatch(docker_client, run_label) as watch, ResponsesServer(codex_fix()) as server:
        crashed = _run(harness, server.url, "killed", env={"HARNESS_CRASH_AT": "mid_tool:2"})
        assert crashed.code == -9, crashed.stdout + crashed.stderr
        resumed = harness("resume", "killed", "--base-url", f"{server.url}/v1", "--json", env={"OPENAI_API_KEY": KEY},
                          timeout=500)  # fmt: skip
    assert resumed.code == 0 and resumed.json()["outcome"] == "verified", (
        resumed.stdout + resumed.stderr + harness("show", "killed").stdout
    )
    records = read_records(harness.session_dir("killed"))
    assert any(r.kind == "event" and r.event == "resumed" for r in records)
    said = [r.detail for r in records if r.kind == "event" and r.event == "agent_session"]
    assert said and "went on from its session" in said[0], said
    assert "return a + b" in (harness.session_dir("killed") / "change.patch").read_text()
    assert watch.left() == [], "no agent container outlives the run"
