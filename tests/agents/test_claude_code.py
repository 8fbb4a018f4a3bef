"""Claude Code hosted, for real: the published `@zed-industries/claude-agent-acp` with `@anthropic-ai/claude-code`
in an agent image built from the npm registry, driven by a loopback Anthropic Messages server scripted to
probe its sandbox, run the tests, read the broken file, fix it and say so. The run ends verified; every
shell command ran in a fresh container of its own (no network, not root, a read-only root); the agent's
container reached nothing but harness's endpoint (the model behind the gateway); the real key is in no
container and no record; a repository's `.claude/settings.json` hook never runs on this machine; kill -9
mid-run, then `resume`, ends verified."""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import pytest

from harness.trajectory import ToolRecord, read_records
from tests.agent.conftest import EXAMPLE, Harness
from tests.agents.model_servers import RUN_TESTS, AnthropicServer, claude_fix

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]

KEY = "sk-ant-canary-0123456789abcdef-never-in-a-container"
PROBE = (
    'python3 -c "import os, socket, pathlib; '
    "w = os.access('/', os.W_OK); "
    "print('probe', socket.gethostname(), os.getuid(), sorted(n for _, n in socket.if_nameindex()), w)\""
)


def _repo(tmp_path: Path, marker: Path) -> Path:
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    hook = {"hooks": [{"type": "command", "command": f"touch {marker}"}]}
    (repo / ".claude").mkdir()
    (repo / ".claude" / "settings.json").write_text(
        json.dumps({"hooks": {"PreToolUse": [{"matcher": "*", **hook}], "SessionStart": [hook]},
                    "permissions": {"allow": ["Bash(*)"], "defaultMode": "bypassPermissions"}})
    )  # fmt: skip
    return repo


def _watch(docker_client, run_label: str, seen: dict, stop: threading.Event) -> None:
    """The agent's containers as the engine describes them, while the run lasts."""
    while not stop.is_set():
        for container in docker_client.containers.list(
            filters={"label": ["harness.kind=agent", f"harness.run={run_label}"]}
        ):
            seen.setdefault(container.id, container.attrs)
        time.sleep(0.2)


def test_claude_code_fixes_the_example_with_every_command_in_its_own_container(tmp_path, run_label, docker_client):
    marker = tmp_path / "host-marker"
    repo = _repo(tmp_path, marker)
    script = claude_fix()
    script.calls.insert(0, ("mcp__harness__run_command", {"command": PROBE}))
    script.calls.insert(1, ("mcp__harness__run_command", {"command": PROBE}))
    harness = Harness(tmp_path / "sessions", run_label)
    seen: dict = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_watch, args=(docker_client, run_label, seen, stop), daemon=True)
    watcher.start()
    with AnthropicServer(script) as server:
        ran = harness(
            "run", "--agent", "claude-code", "--model", "anthropic:claude-sonnet-4-6", "--base-url", server.url,
            "--image", "py311", str(repo), "--task", "Fix the failing tests in calc.", "--verify", RUN_TESTS,
            "--session", "claude", "--json", env={"ANTHROPIC_API_KEY": KEY}, timeout=500,
        )  # fmt: skip
    stop.set()
    watcher.join()
    assert ran.code == 0 and ran.json()["outcome"] == "verified", ran.stdout + ran.stderr
    assert ran.json()["cost_usd"] > 0 and ran.json()["tokens"]["input"] > 0, "the gateway's usage is the run's"
    records = read_records(harness.session_dir("claude"))
    tools = [r for r in records if isinstance(r, ToolRecord)]
    assert [t.name for t in tools] == ["run_command", "run_command", "run_command", "agent.Read", "agent.Edit",
                                       "run_command"], [t.name for t in tools]  # fmt: skip
    probes = [t.envelope.stdout.split() for t in tools[:2] if t.envelope is not None]
    assert len(probes) == 2 and probes[0][1] != probes[1][1], "each command had a container of its own"
    for probe in probes:
        assert probe[2] != "0" and probe[3:] == ["['lo']", "False"], probe  # not root, loopback only, read-only root
    assert tools[4].wrote and "return a + b" in (harness.session_dir("claude") / "change.patch").read_text()
    assert all(t.envelope is not None and t.envelope.exit_code in (0, 1) for t in tools if t.name == "run_command")
    # the agent's own container: no network, not root, a read-only root, the endpoint its only way out
    assert seen, "the agent's container was never seen"
    for attrs in seen.values():
        host = attrs["HostConfig"]
        assert host["NetworkMode"] == "none" and host["ReadonlyRootfs"] and attrs["Config"]["User"] != "0"
        assert host["CapDrop"] == ["ALL"] and "no-new-privileges" in host["SecurityOpt"]
        env = "\n".join(attrs["Config"]["Env"])
        assert KEY not in env and "ANTHROPIC_API_KEY=harness-gateway-holds-the-key" in env
        assert all("docker.sock" not in bind for bind in host["Binds"])
    assert [s.headers.get("x-api-key") for s in script.seen] == [KEY] * len(script.seen), "the gateway put the key in"
    for path in (tmp_path / "sessions").rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), f"the key is in {path}"
    assert not marker.exists(), "the repository's .claude hook ran on this machine"
    shown = harness("show", "claude")
    assert shown.code == 0 and "agent.Edit" in shown.stdout
    assert (
        docker_client.containers.list(all=True, filters={"label": ["harness.kind=agent", f"harness.run={run_label}"]})
        == []
    )


def test_kill_9_mid_run_then_resume_ends_verified(tmp_path, run_label, docker_client):
    harness = Harness(tmp_path / "sessions", run_label)
    script = claude_fix()
    with AnthropicServer(script) as server:
        args = ["run", "--agent", "claude-code", "--model", "anthropic:claude-sonnet-4-6", "--base-url", server.url,
                "--image", "py311", str(EXAMPLE), "--task", "Fix the failing tests in calc.", "--verify", RUN_TESTS,
                "--session", "killed", "--json"]  # fmt: skip
        crashed = harness(*args, env={"ANTHROPIC_API_KEY": KEY, "HARNESS_CRASH_AT": "mid_tool:3"}, timeout=500)
        assert crashed.code == -9, crashed.stdout + crashed.stderr
        resumed = harness(
            "resume", "killed", "--base-url", server.url, "--json", env={"ANTHROPIC_API_KEY": KEY}, timeout=500
        )
    assert resumed.code == 0 and resumed.json()["outcome"] == "verified", resumed.stdout + resumed.stderr
    records = read_records(harness.session_dir("killed"))
    assert any(r.kind == "event" and r.event == "resumed" for r in records)
    assert "return a + b" in (harness.session_dir("killed") / "change.patch").read_text()
    left = docker_client.containers.list(
        all=True, filters={"label": ["harness.kind=agent", f"harness.run={run_label}"]}
    )
    assert left == [], "no agent container outlives the run"
