"""The real CLI (`.venv/bin/harness` in a subprocess): exit codes, one-line errors, JSON envelope."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandbox.docker.engine import available_runtimes
from sandbox.docker.prune import find_containers
from tests.cli_process import run_cli

ROOT = Path(__file__).resolve().parents[2]
HARNESS = str(Path(sys.executable).parent / "harness")
EXAMPLE = str(ROOT / "examples" / "calc")
pytestmark = pytest.mark.timeout(180)


def harness(*args: str, run_label: str = "cli-test", **env: str) -> subprocess.CompletedProcess[str]:
    environ = {**os.environ, "HARNESS_RUN_ID": run_label, "COLUMNS": "200", **env}
    return run_cli(args, env=environ, timeout=150, console=True)


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), done.stderr
    assert "Traceback" not in done.stderr + done.stdout
    return lines[0]


@pytest.mark.docker
def test_exec_json_returns_the_envelope_and_the_exit_code(run_label, sandbox_image, docker_client, tmp_path) -> None:
    own_label = f"{run_label}-exec"
    try:
        done = harness(
            "exec",
            "--json",
            "--keep",
            str(tmp_path / "kept"),
            EXAMPLE,
            "--",
            "sh",
            "-c",
            "env; echo changed > calc/ops.py; exit 3",
            run_label=own_label,
            HARNESS_PLANTED_SECRET="sk-planted-42",
        )
        # the one-shot's container stopped as its call ended; the engine removes it (auto_remove):
        # the command did not wait for that removal
        deadline = time.monotonic() + 10
        while (leftovers := find_containers(docker_client, {"harness.run": own_label})) and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        for container in find_containers(docker_client, {"harness.run": own_label}):
            container.remove(force=True)
    assert leftovers == []
    assert done.returncode == 3, done.stderr
    envelope = json.loads(done.stdout)
    assert {"exit_code", "status", "stdout", "stderr", "truncated", "duration_ms"} <= envelope.keys()
    assert envelope["exit_code"] == 3 and envelope["status"] == "exit_nonzero"
    assert "sk-planted" not in envelope["stdout"] and "HARNESS_PLANTED_SECRET" not in envelope["stdout"]
    assert (tmp_path / "kept" / "calc" / "ops.py").read_text() == "changed\n"
    assert "changed" not in (ROOT / "examples" / "calc" / "calc" / "ops.py").read_text()


@pytest.mark.docker
def test_a_cold_one_shot_leaves_its_container_to_the_engine_and_still_tells_an_oom_kill(
    run_label, sandbox_image, docker_client, tmp_path, engine_here
) -> None:
    """Without a warm service the one-shot does not wait for its container's removal: the engine
    removes it (auto_remove) once the stub ends, which it does when the command's stream closes,
    a child left running in the background included; the stub waits for that close, so an OOM kill is
    still read from the living container."""
    own_label = f"{run_label}-cold"
    warm = str(tmp_path / "no-warm-service")
    try:
        lingering = harness(
            "exec", "--json", EXAMPLE, "--", "sh", "-c", "(sleep 300 &); echo started",
            run_label=own_label, HARNESS_WARM_DIR=warm,
        )  # fmt: skip
        assert lingering.returncode == 0 and json.loads(lingering.stdout)["stdout"] == "started\n"
        killed = harness(
            "exec", "--json", "--memory", "64m", EXAMPLE, "--", "python3", "-c", "x = bytearray(400 * 1024 * 1024)",
            run_label=own_label, HARNESS_WARM_DIR=warm,
        )  # fmt: skip
        envelope = json.loads(killed.stdout)
        if engine_here.limits_unenforced:  # no memory limit there (rootless on cgroup v1), and the envelope says so
            assert "memory" in envelope["limits"]["unenforced"], envelope
        else:
            assert killed.returncode == 137 and envelope["status"] == "oom_killed", envelope
        deadline = time.monotonic() + 10
        while (leftovers := find_containers(docker_client, {"harness.run": own_label})) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert leftovers == [], "the engine removed both containers"
    finally:
        for container in find_containers(docker_client, {"harness.run": own_label}):
            container.remove(force=True)


def test_a_one_shot_ended_by_sigterm_leaves_no_container(run_label, sandbox_image, docker_client, tmp_path) -> None:
    """A process manager's kill (SIGTERM: `timeout`, a batch runner) ends `harness exec` as Ctrl-C
    does: the call's container is killed and removed, where it ran on before."""
    own_label = f"{run_label}-term"
    environ = {**os.environ, "HARNESS_RUN_ID": own_label, "HARNESS_WARM_DIR": str(tmp_path / "no-warm-service")}
    process = subprocess.Popen(
        [HARNESS, "exec", EXAMPLE, "--", "sleep", "1000"], env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        deadline = time.monotonic() + 60
        while not find_containers(docker_client, {"harness.run": own_label}) and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # the call under way
        process.terminate()
        _, stderr = process.communicate(timeout=60)
        assert process.returncode == 130 and stderr.decode().strip() == "interrupted", stderr
        deadline = time.monotonic() + 10
        while (leftovers := find_containers(docker_client, {"harness.run": own_label})) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert leftovers == []
    finally:
        process.kill()
        for container in find_containers(docker_client, {"harness.run": own_label}):
            container.remove(force=True)


def test_exec_human_output_runs_the_example_tests(run_label, sandbox_image) -> None:
    done = harness(
        "exec",
        "--timeout",
        "60",
        "--memory",
        "512m",
        EXAMPLE,
        "--",
        "python3",
        "-m",
        "pytest",
        "-q",
        run_label=run_label,
    )
    assert done.returncode == 1
    assert done.stdout.startswith("exit_code=1 status=exit_nonzero")
    assert "2 failed, 2 passed" in done.stdout


@pytest.mark.docker
def test_the_plain_form_without_a_warm_service_prints_what_the_full_command_prints(run_label, sandbox_image, tmp_path):
    """`exec PATH -- CMD` with no warm service skips the command line (typer, rich) and starts its own
    container; a flag the quick path does not take goes through the command line. Same words, same
    code, and a container's terminal escapes shown as text, never sent to the terminal."""
    command = ["--", "sh", "-c", "printf 'a\\033]0;owned\\007b\\033[2Jc\\n'; echo err >&2; exit 3"]
    quick = harness("exec", EXAMPLE, *command, run_label=run_label, HARNESS_WARM_DIR=str(tmp_path / "none"))
    full = harness("exec", "--timeout", "60", EXAMPLE, *command, run_label=run_label, HARNESS_WARM_DIR=str(tmp_path))
    assert quick.returncode == full.returncode == 3
    assert "\x1b" not in quick.stdout + full.stdout and "\x07" not in quick.stdout
    assert "a\\x1b]0;owned\\x07b\\x1b[2Jc" in quick.stdout
    strip = [line for line in quick.stdout.splitlines() if not line.startswith("exit_code=")]
    assert strip == [line for line in full.stdout.splitlines() if not line.startswith("exit_code=")]
    assert strip == ["--- stdout ---", "a\\x1b]0;owned\\x07b\\x1b[2Jc", "--- stderr ---", "err"]


@pytest.mark.parametrize(
    "flags",
    [
        ["--memory", "lots"],
        ["--cpus", "-1"],
        ["--timeout", "0"],
        ["--pids", "2"],
        ["--runtime", "kata"],
        ["--bogus-flag"],
    ],
)
def test_nonsense_limits_are_usage_errors(flags: list[str]) -> None:
    done = harness("exec", *flags, EXAMPLE, "--", "true")
    assert done.returncode == 64
    one_line_error(done)


def test_missing_path_is_not_found(tmp_path) -> None:
    done = harness("exec", str(tmp_path / "no-such-repo"), "--", "true")
    assert done.returncode == 66
    assert "does not exist" in one_line_error(done)


@pytest.mark.parametrize("host", ["tcp://127.0.0.1:1", "unix:///nonexistent/docker.sock"])
def test_unreachable_engine_exits_125(host: str) -> None:
    done = harness("exec", EXAMPLE, "--", "true", DOCKER_HOST=host)
    assert done.returncode == 125
    assert "no Docker engine answers" in one_line_error(done)


@pytest.mark.docker
def test_unknown_image_exits_71(run_label) -> None:
    done = harness("exec", "--image", "no-such-image-xyz", EXAMPLE, "--", "true", run_label=run_label)
    assert done.returncode == 71
    assert "no-such-image-xyz" in one_line_error(done)


@pytest.mark.docker
def test_runsc_runs_when_registered_and_exits_72_when_not(run_label, docker_client, engine_here) -> None:
    done = harness("exec", "--runtime", "runsc", EXAMPLE, "--", "true", run_label=run_label)
    registered = "runsc" in available_runtimes(docker_client)  # CI registers it (scripts/ensure-engine.sh)
    if registered and engine_here.product != "Podman":
        assert done.returncode == 0, done.stderr
    else:  # not registered, or on Podman, where gVisor is not supported yet
        assert done.returncode == 72
        assert "runsc" in one_line_error(done) and "runc" in one_line_error(done)


@pytest.mark.docker
def test_each_failure_has_its_own_exit_code(run_label, tmp_path) -> None:
    """Issue 2: unknown image, unreachable engine, missing path, nonsense limits: one line, distinct codes."""
    codes = {
        "usage": harness("exec", "--memory", "lots", EXAMPLE, "--", "true").returncode,
        "not found": harness("exec", str(tmp_path / "nope"), "--", "true").returncode,
        "image": harness("exec", "--image", "no-such-image-xyz", EXAMPLE, "--", "true", run_label=run_label).returncode,
        "engine": harness("exec", EXAMPLE, "--", "true", DOCKER_HOST="tcp://127.0.0.1:1").returncode,
    }
    assert codes == {"usage": 64, "not found": 66, "image": 71, "engine": 125}


@pytest.mark.docker
def test_images_list_and_doctor(sandbox_image, engine_here) -> None:
    listed = harness("images", "list", "--json")
    assert listed.returncode == 0
    assert {row["name"]: row["status"] for row in json.loads(listed.stdout)}["py311"] == "current"
    piped = harness("images", "list")  # to a pipe: whole references, no box cut to its width
    reference = {row["name"]: row["ref"] for row in json.loads(listed.stdout)}["py311"]
    assert "…" not in piped.stdout and reference in piped.stdout and piped.stdout.startswith("name  "), piped.stdout
    doctor = harness("doctor")
    assert f"engine: {engine_here.product} " in doctor.stdout and "image py311: current" in doctor.stdout
    mode = "rootless" if engine_here.rootless else "rootful"
    api = "API " if engine_here.product == "Docker" else "Docker-compatible API "
    assert f"({mode}, {api}" in doctor.stdout, doctor.stdout
    said_of_gvisor = "runsc is found but not supported on Podman yet" in " ".join(doctor.stdout.split())
    assert said_of_gvisor == (engine_here.product == "Podman" and "runsc" in doctor.stdout), doctor.stdout
    assert doctor.returncode in (0, 125)
    if doctor.returncode:
        assert "problem:" in doctor.stderr


@pytest.mark.docker
def test_images_build_again_is_a_no_op(sandbox_image) -> None:
    done = harness("images", "build", "py311")
    assert done.returncode == 0, done.stderr
    assert "is current" in done.stderr and "building" not in done.stderr


@pytest.mark.parametrize("spelled", ["python", "cobol:bullseye", "python:buster", "python:bullseye\x1b[2J"])
def test_images_build_names_what_an_environment_is_spelled_of(spelled: str) -> None:
    done = harness("images", "build", "--env", spelled)
    assert done.returncode == 64, done.stderr
    assert "give LANGUAGE:RELEASE" in done.stderr and "python, go, javascript, rust" in done.stderr
    assert "\x1b" not in done.stderr and "Traceback" not in done.stderr
