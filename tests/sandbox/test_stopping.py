"""A call stopped from outside while it runs (sandbox.stopping: an agent's `terminal/kill`, an MCP
client's cancel): the call's container is killed at once, the envelope is a command killed (exit 137)
whose stderr says who stopped it and why; a call asked to stop before it started never runs its
command; a stop aimed at another call touches nothing. On the real engine through both call paths
(the stub and `docker exec`), and on the fake sandbox."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import docker
import pytest

from sandbox import stopping
from sandbox.docker.containers import DockerSandbox
from sandbox.envelope import Envelope
from sandbox.spec import SandboxSpec

pytestmark = pytest.mark.timeout(120)


def _in_thread(call: Callable[[], Envelope], ident: str) -> tuple[threading.Thread, list[Envelope]]:
    got: list[Envelope] = []

    def run() -> None:
        with stopping.running(ident):
            got.append(call())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, got


def _started(workspace: Path, spec: SandboxSpec, client: docker.DockerClient | None, timeout_s: float = 30) -> None:
    """Wait until the command runs: its mark in the workspace, or (an engine elsewhere, where the
    workspace travels back only at the end) its `sleep` among its container's processes."""
    deadline = time.monotonic() + timeout_s
    while not ((workspace / "started").exists() or (client is not None and _sleeping(client, spec))):
        assert time.monotonic() < deadline, "the command never started"
        time.sleep(0.05)


def _sleeping(client: docker.DockerClient, spec: SandboxSpec) -> bool:
    (label,) = spec.labels.items()
    for container in client.containers.list(filters={"label": "=".join(label)}, ignore_removed=True):
        try:
            processes = container.top().get("Processes") or []
        except docker.errors.APIError:  # gone between the listing and its question
            continue
        if any("sleep 60" in " ".join(row) for row in processes):
            return True
    return False


SLOW = ["sh", "-c", "touch started; sleep 60; echo never"]


def test_a_running_call_stopped_by_its_id_is_killed_and_says_why(
    any_sandbox, workspace: Path, spec: SandboxSpec, request: pytest.FixtureRequest
):
    client = request.getfixturevalue("docker_client") if isinstance(any_sandbox, DockerSandbox) else None
    ident = f"call-{uuid.uuid4().hex}"
    thread, got = _in_thread(lambda: any_sandbox.run(SLOW, workspace=workspace, spec=spec), ident)
    _started(workspace, spec, client)
    assert stopping.stop(f"other-{uuid.uuid4().hex}", "not this one") is False
    asked = time.monotonic()
    assert stopping.stop(ident, "the agent killed its terminal") is True
    thread.join(15)
    assert not thread.is_alive() and time.monotonic() - asked < 10, "the call ends at the stop, not at its timeout"
    (envelope,) = got
    assert (envelope.exit_code, envelope.status) == (137, "exit_nonzero")
    assert "never" not in envelope.stdout
    assert (workspace / "started").exists(), "what the command wrote before its stop is kept"
    assert envelope.stderr.rstrip().endswith("stopped by its caller before it ended (the agent killed its terminal)")
    assert "exit_code=137" in envelope.render()


def test_a_call_stopped_before_it_started_never_runs_its_command(any_sandbox, workspace: Path, spec: SandboxSpec):
    ident = f"call-{uuid.uuid4().hex}"
    assert stopping.stop(ident, "the client cancelled the call") is False, "nothing runs under it yet"
    thread, got = _in_thread(lambda: any_sandbox.run(["touch", "ran"], workspace=workspace, spec=spec), ident)
    thread.join(30)
    (envelope,) = got
    assert envelope.exit_code == 137 and "(the client cancelled the call)" in envelope.stderr
    assert not (workspace / "ran").exists()
    after = any_sandbox.run(["touch", "ran"], workspace=workspace, spec=spec)
    assert after.exit_code == 0 and (workspace / "ran").exists(), "the next call, unmarked, runs"


def test_a_call_that_ended_is_not_touched_by_a_late_stop(any_sandbox, workspace: Path, spec: SandboxSpec):
    ident = f"call-{uuid.uuid4().hex}"
    with stopping.running(ident):
        envelope = any_sandbox.run(["echo", "done"], workspace=workspace, spec=spec)
    stopping.forget(ident)  # its caller knows it ended and drops what it would have asked
    assert stopping.stop(ident, "late") is False
    stopping.forget(ident)
    assert (envelope.exit_code, envelope.stdout, envelope.stderr) == (0, "done\n", "")


@pytest.mark.docker
def test_a_docker_exec_call_is_stopped_as_a_stub_call_is(
    docker_client: docker.DockerClient, run_label: str, sandbox_image: str, workspace: Path, spec: SandboxSpec
):
    box = DockerSandbox(docker_client, run_id=run_label, pool_size=0, call_path="exec")
    try:
        ident = f"call-{uuid.uuid4().hex}"
        thread, got = _in_thread(lambda: box.run(SLOW, workspace=workspace, spec=spec), ident)
        _started(workspace, spec, docker_client)
        stopping.stop(ident, "asked")
        thread.join(15)
        (envelope,) = got
        assert (envelope.exit_code, envelope.call_path) == (137, "exec")
        assert "stopped by its caller before it ended (asked)" in envelope.stderr
    finally:
        box.close()
    left = docker_client.containers.list(all=True, filters={"label": f"harness.test={spec.labels['harness.test']}"})
    assert left == [], "the stopped call's container is gone"
