"""The Claude Code recipe, for real: the published Claude Code (its native binary, taken from the agent
image harness builds from the npm registry) run headless on this machine with `harness mcp recipe
claude-code`'s two files, against a loopback Anthropic Messages server scripted to try its own Bash, probe
harness's sandbox, run the tests, fix the example and run them again. Its Bash never ran here (the
marker it would touch is absent); every command ran in a fresh harness container; the session verified
when Claude Code ended, and `harness apply` lands the fix."""

from __future__ import annotations

import json
import subprocess
import tarfile
from pathlib import Path
from typing import Any

import pytest

from harness.trajectory import ToolRecord, read_records
from tests.agent.conftest import Harness
from tests.agents.hosting import PROBE, assert_own_containers, probes
from tests.agents.model_servers import AnthropicServer, Script
from tests.serve.test_mcp_serve import FIX, containers_left, ended, git_repo

pytestmark = [pytest.mark.docker, pytest.mark.timeout(400)]

CLAUDE = "node_modules/@anthropic-ai/claude-code-linux-x64/claude"


@pytest.fixture(scope="session")
def claude_binary(tmp_path_factory, run_label, docker_client) -> Path:
    """Claude Code's executable as its npm package installs it (from the agent image: no second download)."""
    from harness.assembly import engine
    from harness.environment.agents import AGENT_ROOT

    image = engine.agent_image(None, "claude-code", "py311")
    folder = tmp_path_factory.mktemp("claude")
    container = docker_client.containers.create(image, command="true", labels={"harness.run": run_label})
    try:
        stream, _ = container.get_archive(f"{AGENT_ROOT}/{CLAUDE}")
        archive = folder / "claude.tar"
        with archive.open("wb") as out:
            for chunk in stream:
                out.write(chunk)
        with tarfile.open(archive) as tar:
            tar.extract("claude", folder, filter="data")
        archive.unlink()
    finally:
        container.remove(force=True)
    return folder / "claude"


def harness_tools(body: dict[str, Any]) -> bool:
    return any(str(t.get("name", "")).startswith("mcp__harness__") for t in body.get("tools") or [])


def test_claude_code_with_the_recipe_runs_every_command_in_harness(tmp_path, run_label, docker_client, claude_binary):
    repo = git_repo(tmp_path)
    marker = tmp_path / "host-marker"
    state = tmp_path / "sessions"
    harness = Harness(state, run_label)
    written = harness("mcp", "recipe", "claude-code", "--repo", str(repo), "--write", str(tmp_path / "recipe"))
    assert written.code == 0, written.stderr
    script = Script(
        calls=[
            ("Bash", {"command": f"touch {marker}", "description": "mark"}),
            ("mcp__harness__run_command", {"command": PROBE}),
            ("mcp__harness__run_command", {"command": PROBE}),
            ("mcp__harness__run_command", {"command": "python3 -m pytest -q"}),
            ("mcp__harness__apply_patch", FIX),
            ("mcp__harness__run_tests", {}),
        ],
        last="add() returned a - b; it returns a + b now and the tests pass.",
    )
    home = tmp_path / "home"
    home.mkdir()
    with AnthropicServer(lambda body: script if harness_tools(body) else None) as server:
        env = {
            **harness.env,
            "HOME": str(home),
            "CLAUDE_CONFIG_DIR": str(home / ".claude"),
            "ANTHROPIC_BASE_URL": server.url,
            "ANTHROPIC_API_KEY": "sk-ant-test-recipe",
            "DISABLE_TELEMETRY": "1",
            "DISABLE_AUTOUPDATER": "1",
            "DISABLE_ERROR_REPORTING": "1",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "HTTPS_PROXY": "http://proxy.invalid:9",
            "HTTP_PROXY": "http://proxy.invalid:9",
            "NO_PROXY": "127.0.0.1,localhost",
            "MCP_TIMEOUT": "120000",
        }
        ran = subprocess.run(
            [str(claude_binary), "-p", "Fix the failing tests in calc.", "--output-format", "json",
             "--mcp-config", str(tmp_path / "recipe" / "harness-mcp.json"), "--strict-mcp-config",
             "--settings", str(tmp_path / "recipe" / "harness-settings.json")],
            cwd=repo, env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    assert json.loads(ran.stdout)["result"] == script.last, json.dumps(
        [[t.get("name") for t in s.body.get("tools") or []] for s in server.seen]
    )
    assert not marker.exists(), "Claude Code's own Bash ran on this machine"
    bash = [c for s in server.seen for c in _tool_results(s.body) if c["tool_use_id"] == "toolu_1"]
    assert bash and bash[0].get("is_error"), bash

    (session,) = [p.name for p in state.iterdir() if p.is_dir() and (p / "trajectory.jsonl").exists()]
    result = ended(state, session).result
    assert result is not None and result.outcome == "verified", result
    folder = harness.session_dir(session)
    assert_own_containers(probes(folder), 2)
    tools = [r.name for r in read_records(folder) if isinstance(r, ToolRecord)]
    assert tools == ["run_command", "run_command", "run_command", "apply_patch", "run_tests"], tools
    assert containers_left(docker_client, state, session) == []
    landed = harness("apply", session, "--json")
    assert landed.code == 0 and json.loads(landed.stdout.splitlines()[0])["branch"], landed.stdout + landed.stderr


def _tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        block
        for message in body.get("messages") or []
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "tool_result"
    ]
