"""`harness bench sandbox --burst N`: time to a first command's output for N sandboxes asked for at
once, as peers publish it (create + first command, "time to interactive"), beside `docker run`
under the same load.

Each side is N fresh processes, each asking for a new sandbox and its first command's output
(`echo ready`): harness's one-shot `harness exec PATH -- echo ready` (a warm service of the bench's
own keeps N hardened containers started before the burst: what the service is for) and the docker
CLI's `docker run --rm --network none IMAGE echo ready`. Three arrival patterns, as ComputeSDK
measures: sequential (one after the other), staggered (one every `stagger_ms`), burst (all at once).
A launch succeeds when it exits 0 with `ready` on its output; its time runs from its launch to its
exit (the output is printed when the command ends). Percentiles are nearest-rank over every launch
of every round; the sides alternate which goes first round by round, and before each harness side the
service is given time to have N ready again (outside the timed region, as between two bursts).
"""

from __future__ import annotations

import functools
import math
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from harness.bench.measure import CLI, cli_env, docker_labels, ratio, warm_ready
from sandbox.warm import protocol

PATTERNS = ("sequential", "staggered", "burst")
EXPECTED = "ready"


class Percentiles(BaseModel):
    """One side under one arrival pattern: nearest-rank percentiles of the successful launches."""

    launches: int
    succeeded: int
    success_rate: float
    p50_ms: float
    p95_ms: float
    p99_ms: float
    max_ms: float
    failures: list[str] = []
    """The first few failures' reasons (exit code and the tail of stderr)."""


class Pattern(BaseModel):
    """Both sides under one arrival pattern."""

    pattern: str
    harness: Percentiles
    docker_run: Percentiles
    p99_over_docker_run_p50: float


class BurstBench(BaseModel):
    """Result of `harness bench sandbox --burst N`."""

    image: str
    n: int
    rounds: int
    stagger_ms: float
    patterns: list[Pattern]
    p99_over_docker_run_p50: float
    """The burst pattern's harness p99 over docker run's p50. Target: at most 1 at N = 20."""


def percentile(ordered: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of sorted samples (the max for q = 100); 0 for none."""
    if not ordered:
        return 0.0
    return ordered[min(len(ordered), max(1, math.ceil(q / 100 * len(ordered)))) - 1]


def figures(results: Sequence[tuple[float, str | None]]) -> dict[str, Any]:
    """Of (milliseconds, failure reason or None) launches: how many, how many succeeded and their share,
    the nearest-rank percentiles and max of the successful ones, the first few failures."""
    ok = sorted(ms for ms, failure in results if failure is None)
    return {
        "launches": len(results),
        "succeeded": len(ok),
        "rate": round(len(ok) / len(results), 3) if results else 0.0,
        **{f"p{q}": round(percentile(ok, q), 1) for q in (50, 95, 99)},
        "max": round(ok[-1], 1) if ok else 0.0,
        "failures": [failure for _, failure in results if failure is not None][:3],
    }


def summary(results: Sequence[tuple[float, str | None]]) -> Percentiles:
    """Percentiles of (milliseconds, failure reason or None) launches."""
    found = figures(results)
    return Percentiles(
        launches=found["launches"], succeeded=found["succeeded"], success_rate=found["rate"], p50_ms=found["p50"],
        p95_ms=found["p95"], p99_ms=found["p99"], max_ms=found["max"], failures=found["failures"],
    )  # fmt: skip


def launch(argv: list[str], env: dict[str, str], expected: str = EXPECTED) -> tuple[float, str | None]:
    """One process timed from its launch to its exit: a failure unless it exits 0 with expected on its
    standard output."""
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL, check=False)
    elapsed = (time.perf_counter() - started) * 1000
    if done.returncode != 0 or expected not in done.stdout:
        return elapsed, f"exit {done.returncode}: {(done.stderr or done.stdout).strip()[-200:]}"
    return elapsed, None


def arrivals(
    argvs: Sequence[list[str]], env: dict[str, str], pattern: str, stagger_ms: float
) -> list[tuple[float, str | None]]:
    """Launch every argv in the pattern; each launch's (ms, failure) in launch order."""
    return arrive([functools.partial(launch, argv, env) for argv in argvs], pattern, stagger_ms)


def arrive(
    launches: Sequence[Callable[[], tuple[float, str | None]]], pattern: str, gap_ms: float
) -> list[tuple[float, str | None]]:
    """Every launch in the arrival pattern (one after the other, one every gap_ms, or all at once);
    each one's (ms, failure or None), in launch order. A launch that raises is a failure, never retried."""
    if pattern == "sequential":
        return [launch() for launch in launches]
    results: list[tuple[float, str | None]] = [(0.0, "never ran")] * len(launches)
    gate = threading.Barrier(len(launches)) if pattern == "burst" else None

    def one(index: int) -> None:
        if gate is not None:
            gate.wait()
        try:
            results[index] = launches[index]()
        except Exception as error:  # noqa: BLE001 - a failed launch is counted, never retried
            results[index] = (0.0, f"{type(error).__name__}: {error}"[:200])

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(launches))]
    for thread in threads:
        thread.start()
        if gate is None:
            time.sleep(gap_ms / 1000)
    for thread in threads:
        thread.join()
    return results


def measure(
    *, image: str, image_ref: str, run_id: str, n: int = 20, rounds: int = 2, stagger_ms: float = 100.0
) -> BurstBench:
    """Every pattern, both sides, `rounds` times (the sides' order alternating)."""
    docker = shutil.which("docker")
    if docker is None:
        raise RuntimeError("the burst bench compares with the docker CLI, and none is installed")
    env = cli_env(HARNESS_RUN_ID=run_id)
    with tempfile.TemporaryDirectory(prefix="harness-bench-burst-") as name:
        tmp = Path(name)
        env["HARNESS_WARM_DIR"] = str(tmp / "warm")
        repos = []
        for index in range(n):
            repo = tmp / f"repo-{index}"
            repo.mkdir()
            (repo / "README").write_text(f"sandbox {index}\n")
            repos.append(repo)
        ours = [[*CLI, "exec", str(repo), "--image", image, "--", "echo", EXPECTED] for repo in repos]
        bare = [docker, "run", "--rm", "--network", "none", *docker_labels(run_id), image_ref, "echo", EXPECTED]
        theirs = [list(bare) for _ in repos]
        started = subprocess.run(
            [*CLI, "warm", "start", "--image", image, f"--per-spec={n}", "--per-run=0"],
            capture_output=True,
            text=True,
            env=env,
        )
        if started.returncode != 0:
            raise RuntimeError(f"the bench's warm service did not start: {started.stderr.strip()[-300:]}")
        folder = protocol.engine_folder(tmp / "warm", env.get("DOCKER_HOST") or None)
        samples: dict[tuple[str, str], list[tuple[float, str | None]]] = {}
        try:
            for pattern in PATTERNS:
                for round_ in range(rounds):
                    sides: list[tuple[str, Callable[[], list[tuple[float, str | None]]]]] = [
                        ("harness", lambda p=pattern: arrivals(ours, env, p, stagger_ms)),  # type: ignore[misc]
                        ("docker_run", lambda p=pattern: arrivals(theirs, env, p, stagger_ms)),  # type: ignore[misc]
                    ]
                    for side, action in sides if round_ % 2 == 0 else reversed(sides):
                        if side == "harness" and not warm_ready(folder, image, n, timeout_s=180.0):
                            raise RuntimeError(f"the warm service did not have {n} containers ready within 180 s")
                        samples.setdefault((pattern, side), []).extend(action())
        finally:
            subprocess.run([*CLI, "warm", "stop"], capture_output=True, env=env, check=False)
    patterns = []
    for pattern in PATTERNS:
        ours_p, theirs_p = summary(samples[(pattern, "harness")]), summary(samples[(pattern, "docker_run")])
        patterns.append(
            Pattern(
                pattern=pattern,
                harness=ours_p,
                docker_run=theirs_p,
                p99_over_docker_run_p50=ratio(ours_p.p99_ms, theirs_p.p50_ms),
            )
        )
    return BurstBench(
        image=image_ref,
        n=n,
        rounds=rounds,
        stagger_ms=stagger_ms,
        patterns=patterns,
        p99_over_docker_run_p50=patterns[-1].p99_over_docker_run_p50,
    )
