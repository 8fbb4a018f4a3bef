"""`harness bench startup`: what a person waits for before harness does anything, side by side.

- `harness --help` against `python3 -c "import typer"` (the floor of any typer CLI);
- a one-shot `harness exec PATH -- true` against `docker run --rm --network none IMAGE true` (the
  floor of any one-call container), twice: warm (a warm service of the bench's own, in a private
  folder, has the container started before the command) and cold (no service: the command starts
  its container and waits for it, as every one-shot did before the service);
- the warm one-shot against `docker exec LIVE true` into a container of the image started before the
  rounds (what a tool that keeps one container per task pays per call);
- the cold one-shot against its floor: a fresh Python process that imports the Docker SDK (which
  harness must use) and pydantic and makes the same one call with `containers.run` (no copy, no
  hardening, no envelope). What separates that floor from `docker run` is the interpreter and the SDK,
  which no Python one-shot avoids; what separates the cold one-shot from the floor is harness's own.

Every side is a fresh process of the same interpreter (and the docker CLI), interleaved round by
round; the figures are medians. The warm service is stopped at the end, removing its containers.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pydantic import BaseModel

from harness.bench.measure import (
    CLI,
    Latency,
    cli_env,
    docker_labels,
    latency,
    ratio,
    run_checked,
    side_by_side,
    warm_ready,
)
from sandbox.warm import protocol


class StartupBench(BaseModel):
    """Result of `harness bench startup`."""

    rounds: int
    help: Latency
    bare_typer: Latency
    help_over_typer: float
    """Target: at most 2."""
    exec: Latency | None = None
    """The one-shot exec with the warm service running."""
    docker_run: Latency | None = None
    exec_over_docker_run: float | None = None
    """Warm one-shot exec / docker run. Target: at most 0.3; None when no docker CLI is installed to compare with."""
    cold_exec: Latency | None = None
    """The one-shot exec without a warm service."""
    cold_exec_over_docker_run: float | None = None
    """Target: at most 1.5."""
    sdk_floor: Latency | None = None
    """A fresh Python process importing the Docker SDK and pydantic and making the call with `containers.run`."""
    sdk_floor_over_docker_run: float | None = None
    """The bound of any Python one-shot through the SDK, against docker run."""
    cold_exec_over_sdk_floor: float | None = None
    """harness's own share of the cold one-shot."""
    docker_exec: Latency | None = None
    """`docker exec` of the same command into a live container of the image (the docker CLI's fastest call)."""
    exec_over_docker_exec: float | None = None
    """Warm one-shot exec / docker exec. Target: at most 0.6."""
    image: str = ""


SDK_FLOOR = """
import sys, docker, pydantic
labels = dict(label.split("=", 1) for label in sys.argv[2:])
docker.from_env().containers.run(sys.argv[1], ["true"], remove=True, network_mode="none", labels=labels)
"""
"""The floor of a cold one-shot in Python: argv is the image, then the labels as NAME=VALUE."""


def measure(*, image_ref: str, run_id: str, rounds: int = 10) -> StartupBench:
    """Time both pairs `rounds` times each (fresh processes every time)."""
    env = cli_env(HARNESS_RUN_ID=run_id)
    help_samples = side_by_side(
        {
            "help": lambda: run_checked([*CLI, "--help"], env),
            "typer": lambda: run_checked([sys.executable, "-c", "import typer"], env),
        },
        rounds=rounds,
    )
    result = StartupBench(
        rounds=rounds,
        help=latency(help_samples["help"]),
        bare_typer=latency(help_samples["typer"]),
        help_over_typer=ratio(latency(help_samples["help"]).median_ms, latency(help_samples["typer"]).median_ms),
        image=image_ref,
    )
    docker = shutil.which("docker")
    if docker is None:
        return result
    with tempfile.TemporaryDirectory(prefix="harness-bench-startup-") as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        (repo / "README").write_text("bench\n")
        warm_env = {**env, "HARNESS_WARM_DIR": str(Path(tmp) / "warm")}
        cold_env = {**env, "HARNESS_WARM_DIR": str(Path(tmp) / "none")}
        bare = [docker, "run", "--rm", "--network", "none", *docker_labels(run_id), image_ref, "true"]
        one_shot = [*CLI, "exec", str(repo), "--image", image_ref, "--", "true"]
        floor = [sys.executable, "-c", SDK_FLOOR, image_ref, *docker_labels(run_id)[1::2]]
        live = f"harness-bench-live-{run_id}"
        run_checked([docker, "run", "-d", "--rm", "--name", live, "--network", "none", *docker_labels(run_id), image_ref,
              "sleep", "3600"])  # fmt: skip
        run_checked([*CLI, "warm", "start", "--image", image_ref, "--per-run", "0"], warm_env)
        try:
            folder = protocol.engine_folder(Path(tmp) / "warm", warm_env.get("DOCKER_HOST") or None)
            samples = side_by_side(
                {
                    "exec": lambda: run_checked(one_shot, warm_env),
                    "cold": lambda: run_checked(one_shot, cold_env),
                    "docker_run": lambda: run_checked(bare),
                    "docker_exec": lambda: run_checked([docker, "exec", live, "true"]),
                    "sdk_floor": lambda: run_checked(floor, env),
                },
                rounds=rounds,
                between=lambda: warm_ready(folder, image_ref, 2, timeout_s=30.0),  # as between two commands
            )
        finally:
            run_checked([*CLI, "warm", "stop"], warm_env)
            subprocess.run([docker, "rm", "-f", live], capture_output=True, check=False)
    ours, cold, theirs = latency(samples["exec"]), latency(samples["cold"]), latency(samples["docker_run"])
    into, sdk = latency(samples["docker_exec"]), latency(samples["sdk_floor"])
    return result.model_copy(
        update={
            "exec": ours,
            "docker_run": theirs,
            "exec_over_docker_run": ratio(ours.median_ms, theirs.median_ms),
            "cold_exec": cold,
            "cold_exec_over_docker_run": ratio(cold.median_ms, theirs.median_ms),
            "docker_exec": into,
            "exec_over_docker_exec": ratio(ours.median_ms, into.median_ms),
            "sdk_floor": sdk,
            "sdk_floor_over_docker_run": ratio(sdk.median_ms, theirs.median_ms),
            "cold_exec_over_sdk_floor": ratio(cold.median_ms, sdk.median_ms),
        }
    )
