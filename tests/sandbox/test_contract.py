"""The Sandbox contract, run against DockerSandbox (real engine) and FakeSandbox alike."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sandbox.errors import SpecError, WorkspaceError
from sandbox.spec import SandboxSpec

pytestmark = pytest.mark.timeout(120)


def test_exit_code_and_streams_come_back_exactly(any_sandbox, workspace: Path, spec: SandboxSpec) -> None:
    env = any_sandbox.run(
        ["sh", "-c", "printf 'out\\n'; printf 'bad thing\\n' >&2; exit 42"], workspace=workspace, spec=spec
    )
    assert (env.exit_code, env.status, env.stdout, env.stderr) == (42, "exit_nonzero", "out\n", "bad thing\n")
    assert env.headline().startswith("exit_code=42 status=exit_nonzero")
    assert not env.truncated


def test_success_is_ok(any_sandbox, workspace: Path, spec: SandboxSpec) -> None:
    env = any_sandbox.run(["true"], workspace=workspace, spec=spec)
    assert (env.exit_code, env.status, env.stdout, env.stderr) == (0, "ok", "", "")


def test_stdin_is_delivered(any_sandbox, workspace: Path, spec: SandboxSpec) -> None:
    env = any_sandbox.run(["cat"], workspace=workspace, spec=spec, stdin=b"line one\nline two\n")
    assert env.stdout == "line one\nline two\n"


def test_workspace_is_shared_with_the_host(any_sandbox, workspace: Path, spec: SandboxSpec) -> None:
    env = any_sandbox.run(
        ["sh", "-c", "cat hello.txt && echo made > /workspace/new.txt"], workspace=workspace, spec=spec
    )
    assert env.stdout == "hello\n" and env.exit_code == 0
    assert (workspace / "new.txt").read_text() == "made\n"


def test_timeout_is_status_timeout(any_sandbox, workspace: Path, spec: SandboxSpec) -> None:
    env = any_sandbox.run(
        ["sh", "-c", "echo started; sleep 60"], workspace=workspace, spec=spec.model_copy(update={"timeout_s": 1.5})
    )
    assert (env.exit_code, env.status) == (124, "timeout")
    assert env.stdout == "started\n"
    assert env.duration_ms < 15_000


def test_a_command_that_traps_sigterm_is_still_a_timeout(any_sandbox, workspace: Path, spec: SandboxSpec) -> None:
    trap = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('trapped', flush=True); time.sleep(60)"
    env = any_sandbox.run(["python3", "-c", trap], workspace=workspace, spec=spec.model_copy(update={"timeout_s": 1.5}))
    assert (env.exit_code, env.status) == (124, "timeout"), env.render()
    assert env.stdout == "trapped\n" and env.duration_ms < 15_000


def test_output_is_capped_with_an_exact_marker(any_sandbox, workspace: Path, spec: SandboxSpec) -> None:
    capped = spec.model_copy(update={"stdout_cap": 1000})
    env = any_sandbox.run(
        ["python3", "-c", "import sys; sys.stdout.write('a' * 500 + 'b' * 100000 + 'z' * 500)"],
        workspace=workspace,
        spec=capped,
    )
    assert env.truncated and env.stdout_bytes == 101000 and env.stdout_dropped == 100000
    assert env.stdout == "a" * 500 + "\n[... 100000 bytes dropped ...]\n" + "z" * 500
    assert env.status == "ok"


def test_output_ceiling_kills_the_command(any_sandbox, workspace: Path, spec: SandboxSpec) -> None:
    ceiling = spec.model_copy(update={"output_ceiling": 1024 * 1024})
    env = any_sandbox.run(["sh", "-c", "yes flood"], workspace=workspace, spec=ceiling)
    assert (env.status, env.exit_code) == ("output_limit", 137)
    assert env.truncated and env.stdout_bytes > 1024 * 1024


def test_host_environment_is_not_visible(any_sandbox, workspace: Path, spec: SandboxSpec, monkeypatch) -> None:
    monkeypatch.setenv("HARNESS_PLANTED_SECRET", "sk-planted-0123456789")
    env = any_sandbox.run(["env"], workspace=workspace, spec=spec)
    assert env.exit_code == 0 and "PATH=" in env.stdout
    assert "sk-planted" not in env.stdout and "HARNESS_PLANTED_SECRET" not in env.stdout
    assert os.environ["HARNESS_PLANTED_SECRET"] == "sk-planted-0123456789"


def test_empty_command_and_missing_workspace_are_errors(any_sandbox, workspace: Path, spec: SandboxSpec) -> None:
    with pytest.raises(SpecError):
        any_sandbox.run([], workspace=workspace, spec=spec)
    with pytest.raises(WorkspaceError):
        any_sandbox.run(["true"], workspace=workspace / "missing", spec=spec)


def test_envelope_records_the_posture(any_sandbox, workspace: Path, spec: SandboxSpec) -> None:
    env = any_sandbox.run(
        ["true"], workspace=workspace, spec=spec.model_copy(update={"memory": 256 * 1024**2, "pids": 99})
    )
    assert env.limits.memory == 256 * 1024**2 and env.limits.pids == 99 and env.limits.timeout_s == 30
    assert env.image_id and env.runtime


def test_a_command_exiting_124_by_itself_is_not_a_timeout(any_sandbox, workspace: Path, spec: SandboxSpec) -> None:
    env = any_sandbox.run(["sh", "-c", "exit 124"], workspace=workspace, spec=spec)
    assert (env.exit_code, env.status) == (124, "exit_nonzero")


def test_container_paths_in_argv_reach_the_workspace(any_sandbox, workspace: Path, spec: SandboxSpec) -> None:
    env = any_sandbox.run(["cat", "/workspace/hello.txt"], workspace=workspace, spec=spec)
    assert (env.exit_code, env.stdout) == (0, "hello\n")
