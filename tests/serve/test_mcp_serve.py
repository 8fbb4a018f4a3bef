"""`harness mcp serve` through the official MCP SDK's client, for real: the CLI started as a client
starts a stdio server (or on 127.0.0.1 over streamable HTTP), every call a fresh container of the
real engine, the session verified when the client goes, `harness show` and `harness apply` on it
afterwards. Hostile inputs: a path outside the workspace, a 10 MB result, control characters, a
missing or wrong token, a client that goes mid-call (the call is recorded, its container gone)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from dulwich import porcelain
from dulwich.repo import Repo

from harness.agent.outcome import RunState
from harness.trajectory import EventRecord, ToolRecord, read_records, read_state
from tests.agent.conftest import EXAMPLE, ROOT, Harness
from tests.agents.hosting import PROBE, assert_own_containers, probes

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]

FIX = {
    "path": "calc/ops.py",
    "old_text": '    """Return the sum of a and b."""\n    return a - b\n',
    "new_text": '    """Return the sum of a and b."""\n    return a + b\n',
}
CLI = [sys.executable, "-c", "from harness.cli import main; main()"]
MENU = {"run_command", "read_file", "write_file", "apply_patch", "search_code", "list_dir", "run_tests", "diff",
        "rollback", "session_info"}  # fmt: skip


def git_repo(tmp_path: Path) -> Path:
    """The example as a repository of one commit (what `harness apply` lands on)."""
    repo = tmp_path / "calc"
    shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    porcelain.init(str(repo))
    porcelain.add(str(repo), paths=[str(p) for p in repo.rglob("*") if p.is_file() and ".git" not in p.parts])
    porcelain.commit(str(repo), message=b"calc", author=b"t <t@example.invalid>", committer=b"t <t@example.invalid>")
    return repo


def ended(state_dir: Path, session: str, timeout: float = 120) -> RunState:
    """The session's state once its run ended (the serving process goes on after the client went)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            state = read_state(state_dir / session, RunState)
        except Exception:  # noqa: BLE001 - not written yet
            state = None
        if state is not None and state.finished and not _running(state_dir / session):
            return state
        time.sleep(0.3)
    raise AssertionError(f"session {session} did not end")


def _running(folder: Path) -> bool:
    import fcntl

    lock = folder / "running"
    if not lock.exists():
        return False
    with open(lock) as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
    return False


def containers_left(docker_client: Any, state_dir: Path, session: str, timeout: float = 30) -> list[str]:
    """The session's containers still there once its serving process had time to end (kind: id)."""
    deadline = time.monotonic() + timeout
    while True:
        found = docker_client.containers.list(  # sparse: a container going away meanwhile is no error
            all=True, sparse=True,
            filters={"label": [f"harness.session={session}", f"harness.state={state_dir.resolve()}"]},
        )  # fmt: skip
        if not found or time.monotonic() > deadline:
            return [f"{(c.attrs.get('Labels') or {}).get('harness.kind')}: {c.id[:12]}" for c in found]
        time.sleep(0.3)


def stdio_params(harness: Harness, *args: str) -> Any:
    from mcp.client.stdio import StdioServerParameters

    return StdioServerParameters(command=CLI[0], args=[*CLI[1:], "mcp", "serve", *args], env=harness.env, cwd=ROOT)


async def call(session: Any, name: str, arguments: dict[str, Any]) -> Any:
    return await session.call_tool(name, arguments, read_timeout_seconds=120)


def test_a_stdio_client_fixes_the_example_each_call_a_container_then_it_verifies_and_lands(
    tmp_path, run_label, docker_client
):
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    repo = git_repo(tmp_path)
    harness = Harness(tmp_path / "sessions", run_label)
    seen: dict[str, Any] = {}

    async def client() -> None:
        params = stdio_params(harness, str(repo), "--image", "py311", "--session", "mcp", "--verify",
                              "python3 -m pytest -q")  # fmt: skip
        log = open(tmp_path / "server.log", "w")  # noqa: SIM115 - the client writes the server's stderr there
        async with stdio_client(params, errlog=log) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            seen["tools"] = {t.name for t in (await session.list_tools()).tools}
            for _ in range(2):
                await call(session, "run_command", {"command": PROBE})
            seen["failing"] = await call(session, "run_command", {"command": "python3 -m pytest -q"})
            seen["outside"] = await call(session, "read_file", {"path": "../../etc/passwd"})
            seen["huge"] = await call(session, "run_command", {"command": "python3 -c \"print('x' * 10_000_000)\""})
            seen["control"] = await call(
                session, "run_command", {"command": "python3 -c \"print('\\x1b]0;owned\\x07\\x1b[2Jred\\r')\""}
            )
            source = (await call(session, "read_file", {"path": "calc/ops.py"})).content[0].text
            seen["patched"] = await call(session, "apply_patch", FIX)
            seen["diff"] = (await call(session, "diff", {})).content[0].text
            seen["back"] = await call(session, "rollback", {"to": 0})
            seen["undone"] = (await call(session, "diff", {})).content[0].text
            seen["no_step"] = await call(session, "rollback", {"to": 99})
            await call(session, "apply_patch", FIX)
            seen["tests"] = await call(session, "run_tests", {})
            seen["info"] = json.loads((await call(session, "session_info", {})).content[0].text)
            seen["source"] = source

    anyio.run(client)
    assert seen["tools"] == MENU
    failing = seen["failing"]
    assert failing.structured_content["exit_code"] == 1 and failing.content[0].text.startswith("exit_code=1")
    assert seen["outside"].is_error and "outside /workspace" in seen["outside"].content[0].text
    huge = seen["huge"].structured_content
    assert huge["exit_code"] == 0 and huge["stdout_bytes"] >= 10_000_000 and huge["stdout_dropped"] > 0
    assert len(seen["huge"].content[0].text) < 200_000, "a 10 MB output comes back capped"
    assert seen["control"].structured_content is not None, seen["control"].content[0].text
    assert seen["control"].structured_content["exit_code"] == 0
    assert "return a - b" in seen["source"] and not seen["patched"].is_error
    assert "+    return a + b" in seen["diff"] and "no change" in seen["undone"]
    assert not seen["back"].is_error and seen["no_step"].is_error and "no step 99" in seen["no_step"].content[0].text
    assert not seen["tests"].is_error and seen["info"]["session"] == "mcp" and seen["info"]["verify"]

    state = ended(harness.state_dir, "mcp")
    assert state.result is not None and state.result.outcome == "verified", state.result
    folder = harness.session_dir("mcp")
    assert_own_containers(probes(folder), 2)
    tools = [r for r in read_records(folder) if isinstance(r, ToolRecord)]
    assert [t.name for t in tools][:3] == ["run_command"] * 3 and len(tools) == 10
    assert any(isinstance(r, EventRecord) and r.event == "rolled_back" for r in read_records(folder))
    shown = harness("show", "mcp")
    assert shown.code == 0 and "verified" in shown.stdout and "\x1b]0;owned" not in shown.stdout, shown.stdout
    assert containers_left(docker_client, harness.state_dir, "mcp") == []

    landed = harness("apply", "mcp", "--json")
    assert landed.code == 0, landed.stdout + landed.stderr
    branch = json.loads(landed.stdout.splitlines()[0])["branch"]
    with Repo(str(repo)) as opened:
        tree = opened[opened.refs[f"refs/heads/{branch}".encode()]].tree
        ops = opened.object_store[opened.object_store[tree][b"calc"][1]][b"ops.py"][1]
        assert b"return a + b" in opened.object_store[ops].data
    assert (repo / "calc" / "ops.py").read_text() == (EXAMPLE / "calc" / "ops.py").read_text(), "the tree untouched"


def test_a_client_that_cancels_mid_call_and_goes_stops_the_call_recorded_so_and_leaves_no_container(
    tmp_path, run_label, docker_client
):
    """The client gives up on a call (its SDK sends `notifications/cancelled`) and leaves: the call's
    container is killed at once rather than left to finish (sandbox.stopping), its record says so."""
    from mcp import ClientSession
    from mcp.client.stdio import stdio_client

    harness = Harness(tmp_path / "sessions", run_label)

    async def client() -> None:
        params = stdio_params(harness, str(EXAMPLE), "--image", "py311", "--session", "gone", "--no-verify")
        log = open(tmp_path / "server.log", "w")  # noqa: SIM115 - the client writes the server's stderr there
        async with stdio_client(params, errlog=log) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            with anyio.move_on_after(1.5):
                await call(session, "run_command", {"command": 'python3 -c "import time; time.sleep(60)"'})

    started = time.monotonic()
    anyio.run(client)
    state = ended(harness.state_dir, "gone")
    assert time.monotonic() - started < 30, "the call did not run its minute"
    assert state.result is not None and state.result.outcome == "unverified", state.result
    tools = [r for r in read_records(harness.session_dir("gone")) if isinstance(r, ToolRecord)]
    assert [(t.name, t.envelope.exit_code if t.envelope else None) for t in tools] == [("run_command", 137)]
    assert "stopped by its caller before it ended (the MCP client cancelled the call)" in tools[0].envelope.stderr
    assert containers_left(docker_client, harness.state_dir, "gone") == []


def test_over_http_a_token_is_needed_and_a_stop_verifies(tmp_path, run_label):
    from mcp import ClientSession
    from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

    harness = Harness(tmp_path / "sessions", run_label)
    server = harness.start(
        "mcp", "serve", str(EXAMPLE), "--image", "py311", "--session", "web", "--http", "127.0.0.1:0",
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        told = json.loads(server.stdout.readline())
        assert told["session"] == "web" and told["url"].startswith("http://127.0.0.1:") and len(told["token"]) >= 32
        hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
        accept = {"accept": "application/json, text/event-stream"}
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": told["token"]}):
            refused = httpx.post(told["url"], json=hello, headers={**accept, **headers}, timeout=10)
            assert refused.status_code == 401, (headers, refused.status_code)
        results: dict[str, Any] = {}

        async def client() -> None:
            http = create_mcp_http_client(headers={"Authorization": f"Bearer {told['token']}"})
            async with (
                http,
                streamable_http_client(told["url"], http_client=http) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                results["before"] = await call(session, "run_command", {"command": "python3 -m pytest -q"})
                results["fix"] = await call(session, "apply_patch", FIX)

        anyio.run(client)
        assert results["before"].structured_content["exit_code"] == 1 and not results["fix"].is_error
        server.send_signal(signal.SIGTERM)
        code = server.wait(120)
    finally:
        if server.poll() is None:
            os.kill(server.pid, signal.SIGKILL)
    state = ended(harness.state_dir, "web")
    assert state.result is not None and (state.result.outcome, code) == ("verified", 0), (state.result, code)
