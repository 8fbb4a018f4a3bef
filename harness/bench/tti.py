"""`harness bench sandbox --tti PATTERN --n N`: time to interactive as the field publishes it
(ComputeSDK's daily burst: from the request for a sandbox to its first command's output), for N
sandboxes arriving one after the other (sequential), one every `interval_ms` (staggered) or all at
once (burst), with the success rate beside each side's percentiles, all sides in the same run:

- `harness`: harness's pooled path in this process (a session's `DockerSandbox` with the pool a run
  gives it, POOL_SIZE ready containers per spec): each sandbox a fresh container for one call on the
  session's workspace, so a burst larger than the pool is served by the refill at the engine's pace
  (admission, not errors);
- `harness_exec`: the one-shot `harness exec PATH -- CMD` as a fresh process, through a warm service
  started with its default size (`harness warm start`); `harness_exec_cold`: the same with no service;
- `docker_run`: `docker run --rm --network none IMAGE CMD`.

The first command is `python3 -V` (or `node -v` in a Node image). A launch succeeds when it exits 0
and prints the version on its standard output; a failure is counted, never retried. Percentiles are nearest-rank over every
launch. Before each side the engine is let settle (its pool or service full again, outside the clock).
"""

from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import docker
from pydantic import BaseModel

from harness.bench.burst import arrive, figures, launch
from harness.bench.measure import CLI, cli_env, docker_labels, ratio, warm_ready
from sandbox.docker.containers import DockerSandbox
from sandbox.owner import hand_over
from sandbox.spec import SandboxSpec
from sandbox.warm import protocol

PATTERNS = ("sequential", "staggered", "burst")
WARM_PER_SPEC = 2
"""`harness warm start`'s default size: the one-shot side meets the service a user starts."""

Launch = Callable[[], "tuple[float, str | None]"]


class Side(BaseModel):
    """One side's launches: nearest-rank percentiles of the successful ones, and the success rate."""

    launches: int
    succeeded: int
    success: float
    """The share of launches that printed the version (0 to 1)."""
    p50: float
    p95: float
    p99: float
    max: float
    failures: list[str] = []
    """The first few failures' reasons."""


class TTIBench(BaseModel):
    """Result of `harness bench sandbox --tti PATTERN --n N`."""

    pattern: str
    n: int
    interval_ms: float
    image: str
    command: list[str]
    pool_size: int
    """The ready containers per spec of the `harness` side's pool (a run's)."""
    warm_per_spec: int
    """The ready containers of the warm service the `harness_exec` side meets."""
    harness: Side
    harness_exec: Side
    harness_exec_cold: Side
    docker_run: Side
    harness_p99_over_docker_run_p50: float
    """Target under a burst of 100: at most 1."""


def side(results: Sequence[tuple[float, str | None]]) -> Side:
    found = figures(results)
    return Side(**{key: value for key, value in found.items() if key != "rate"}, success=found["rate"])


def _pooled(box: DockerSandbox, workspace: Path, spec: SandboxSpec, command: list[str], expected: str) -> Launch:
    def pooled() -> tuple[float, str | None]:
        started = time.perf_counter()
        envelope = box.run(command, workspace=workspace, spec=spec)
        elapsed = (time.perf_counter() - started) * 1000
        if envelope.exit_code != 0 or expected not in envelope.stdout:
            said = f"{envelope.stdout}{envelope.stderr} ({envelope.status})"
            return elapsed, f"exit {envelope.exit_code}: {said.strip()[-200:]}"
        return elapsed, None

    return pooled


def first_command(image: str) -> tuple[list[str], str]:
    """The first command of a sandbox of image, and what its output holds."""
    return (["node", "-v"], "v") if "node" in image else (["python3", "-V"], "Python")


def measure(
    client: docker.DockerClient,
    *,
    image: str,
    image_ref: str,
    run_id: str,
    pool_size: int,
    pattern: str = "burst",
    n: int = 100,
    interval_ms: float = 200.0,
) -> TTIBench:
    """The four sides under one arrival pattern (harness's in-process pool first, then the warm
    one-shot, the cold one-shot and docker run)."""
    docker_cli = shutil.which("docker")
    if docker_cli is None:
        raise RuntimeError("the time-to-interactive bench compares with the docker CLI, and none is installed")
    command, expected = first_command(image)
    spec = SandboxSpec(image=image, timeout_s=300)
    env = cli_env(HARNESS_RUN_ID=run_id)
    with tempfile.TemporaryDirectory(prefix="harness-bench-tti-") as name:
        tmp = Path(name)
        repos = []
        for index in range(n):
            repo = tmp / f"repo-{index}"
            repo.mkdir()
            (repo / "README").write_text(f"sandbox {index}\n")
            hand_over(repo)
            repos.append(repo)
        with DockerSandbox(client, run_id=run_id, pool_size=pool_size) as box:
            box.prewarm(workspace=repos[0], spec=spec)  # as a session's, warmed as its workspace is made
            box.pool.wait_idle()
            pooled = arrive([_pooled(box, repos[0], spec, command, expected) for _ in repos], pattern, interval_ms)
        one_shot = [[*CLI, "exec", str(repo), "--image", image, "--", *command] for repo in repos]
        cold_env = {**env, "HARNESS_WARM_DIR": str(tmp / "no-warm")}
        warm_env = {**env, "HARNESS_WARM_DIR": str(tmp / "warm")}
        started = subprocess.run(
            [*CLI, "warm", "start", "--image", image, f"--per-spec={WARM_PER_SPEC}", "--per-run=0"],
            capture_output=True, text=True, env=warm_env,
        )  # fmt: skip
        if started.returncode != 0:
            raise RuntimeError(f"the bench's warm service did not start: {started.stderr.strip()[-300:]}")
        try:
            folder = protocol.engine_folder(tmp / "warm", env.get("DOCKER_HOST") or None)
            if not warm_ready(folder, image, WARM_PER_SPEC, timeout_s=180.0):
                raise RuntimeError(f"the warm service did not have {WARM_PER_SPEC} containers ready within 180 s")
            warm = arrive(
                [functools.partial(launch, argv, warm_env, expected) for argv in one_shot], pattern, interval_ms
            )
        finally:
            subprocess.run([*CLI, "warm", "stop"], capture_output=True, env=warm_env, check=False)
        cold = arrive([functools.partial(launch, argv, cold_env, expected) for argv in one_shot], pattern, interval_ms)
        bare = [docker_cli, "run", "--rm", "--network", "none", *docker_labels(run_id), image_ref, *command]
        theirs = arrive([functools.partial(launch, list(bare), env, expected) for _ in repos], pattern, interval_ms)
    ours, run = side(pooled), side(theirs)
    return TTIBench(
        pattern=pattern, n=n, interval_ms=interval_ms, image=image_ref, command=command, pool_size=pool_size,
        warm_per_spec=WARM_PER_SPEC, harness=ours, harness_exec=side(warm), harness_exec_cold=side(cold),
        docker_run=run, harness_p99_over_docker_run_p50=ratio(ours.p99, run.p50),
    )  # fmt: skip
