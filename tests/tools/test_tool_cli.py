"""`harness tools list` and `harness tool SESSION NAME --args` end to end (real CLI, real engine)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.errors import ExitCode
from sandbox.session.session import Session
from sandbox.spec import SandboxSpec
from tests.cli_process import run_cli

HARNESS = [str(Path(sys.executable).with_name("harness"))]


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli(args, timeout=120, env={**os.environ, **(env or {})}, console=True)


def test_tools_list_plain_and_json() -> None:
    plain = cli("tools", "list")
    assert plain.returncode == 0 and "read_file" in plain.stdout and "Do NOT use" in plain.stdout
    openai = json.loads(cli("tools", "list", "--json").stdout)
    anthropic = json.loads(cli("tools", "list", "--json", "--format", "anthropic").stdout)
    assert {t["function"]["name"] for t in openai} == {t["name"] for t in anthropic}
    assert all(t["input_schema"]["additionalProperties"] is False for t in anthropic)


@pytest.mark.docker
@pytest.mark.timeout(240)
def test_tool_runs_inside_a_session_and_commits_writes(
    repo_ws: Path, tmp_path: Path, run_label: str, tools_image: str
) -> None:
    state = tmp_path / "state"
    session = Session.create(repo_ws, state, spec=SandboxSpec(image=tools_image, timeout_s=30))
    session.close()
    env = {"HARNESS_RUN_ID": run_label}
    read = cli("tool", session.id, "read_file", "--args", '{"path": "calc/ops.py"}', "--state-dir", str(state), env=env)
    assert read.returncode == 0, read.stderr
    assert read.stdout.startswith("OK read_file calc/ops.py: lines 1-6 of 6")
    # a session no run made still finds its test command from the layout (pytest here)
    tested = cli("tool", session.id, "run_tests", "--args", "{}", "--state-dir", str(state), env=env)
    assert "test command: `python3 -m pytest -q` (detected: Python tests" in tested.stderr, tested.stderr
    assert "exit_code=1" in tested.stdout and "FAILED tests/test_ops.py::test_add" in tested.stdout
    wrote = cli(
        "tool",
        session.id,
        "write_file",
        "--args",
        '{"path": "calc/new.py", "content": "X = 1\\n"}',
        "--state-dir",
        str(state),
        env=env,
    )
    assert wrote.returncode == 0 and "committed step 1" in wrote.stderr
    with Session.open(state, session.id) as reopened:
        assert reopened.step == 1
        assert (reopened.workspace / "calc" / "new.py").read_text() == "X = 1\n"
    denied = cli(
        "tool", session.id, "read_file", "--args", '{"path": "../../etc/passwd"}', "--state-dir", str(state), env=env
    )
    assert (
        denied.returncode == ExitCode.TOOL_DENIED
        and denied.stdout.startswith("ERROR[denied]")
        and "denied" in denied.stderr
    )
    bad = cli("tool", session.id, "read_file", "--args", "{not json", "--state-dir", str(state), env=env)
    assert bad.returncode == ExitCode.TOOL_INVALID and bad.stdout.startswith("ERROR[invalid_json]")
    missing = cli("tool", "no-such-session", "read_file", "--args", "{}", "--state-dir", str(state), env=env)
    assert missing.returncode == 66
    surrogate = cli(
        "tool", session.id, "read_file", "--args", '{"path": "calc/\\ud800.py"}', "--state-dir", str(state), env=env
    )
    assert surrogate.returncode != 0 and "Traceback" not in surrogate.stderr and "\ufffd" in surrogate.stdout
    nul = cli(
        "tool",
        session.id,
        "run_command",
        "--args",
        '{"command": "ls \\u0000 calc"}',
        "--state-dir",
        str(state),
        env=env,
    )
    assert (
        nul.returncode == ExitCode.TOOL_INVALID
        and nul.stdout.startswith("ERROR[invalid_arguments]")
        and "NUL" in nul.stdout
    )


@pytest.mark.docker
@pytest.mark.timeout(240)
def test_writable_root_session_commits_the_image_and_rollback_restores_it(
    repo_ws: Path, tmp_path: Path, run_label: str, tools_image: str
) -> None:
    from sandbox.session.session import SessionConfig

    state = tmp_path / "state"
    session = Session.create(
        repo_ws, state, spec=SandboxSpec(image=tools_image, timeout_s=30), config=SessionConfig(writable_root=True)
    )
    session.close()
    env, sd = {"HARNESS_RUN_ID": run_label}, ["--state-dir", str(state)]

    def run_command(command: str) -> subprocess.CompletedProcess[str]:
        return cli("tool", session.id, "run_command", "--args", json.dumps({"command": command}), *sd, env=env)

    touched = run_command("touch /var/tmp/x")
    assert touched.returncode == 0 and "committed step 1 (image sha256:" in touched.stderr, (
        touched.stdout + touched.stderr
    )
    with Session.open(state, session.id) as reopened:
        assert reopened.image != reopened.records[0].image, "the root filesystem change became the step's image"
    seen = run_command("test -e /var/tmp/x")
    assert seen.returncode == 0 and seen.stdout.startswith("exit_code=0"), seen.stdout + seen.stderr
    assert cli("rollback", session.id, "--to", "0", *sd, env=env).returncode == 0
    gone = run_command("test -e /var/tmp/x")
    assert gone.stdout.startswith("exit_code=1"), "rollback restores the image of step 0: " + gone.stdout + gone.stderr
