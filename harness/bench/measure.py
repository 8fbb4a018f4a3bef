"""The one way every bench measures: sides interleaved round by round (so machine noise hits them
alike), an untimed warm-up, medians and 90th percentiles, ratios of medians.

`side_by_side({"ours": f, "bare": g}, rounds=25)` runs warm-up, then f, g, f, g, ... with `between`
called before each timed call (a pool refill, a quiet pause) outside the timed region.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from pydantic import BaseModel

CLI = [sys.executable, "-c", "from harness.cli import main; main()"]
"""`harness` as a fresh process of this interpreter (what a bench times, or starts a service with)."""


def run_checked(argv: list[str], env: dict[str, str] | None = None) -> None:
    """Run a bench's process (stdin closed, output captured); RuntimeError with its stderr's tail when
    it fails."""
    import subprocess

    done = subprocess.run(argv, capture_output=True, env=env, stdin=subprocess.DEVNULL, check=False)
    if done.returncode != 0:
        shown = " ".join(part for part in argv[:7] if not part.startswith("from harness.cli"))
        raise RuntimeError(f"{shown} ... exited {done.returncode}: {done.stderr.decode(errors='replace')[-400:]}")


def warm_ready(folder: Path, image: str, count: int, timeout_s: float) -> bool:
    """Wait until the warm service in folder has count containers of image ready (it refills in the
    background after every call); False when it had not within timeout_s."""
    import time

    from sandbox.warm import protocol

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if protocol.status(folder).ready.get(image, 0) >= count:
            return True
        time.sleep(0.05)
    return False


def docker_labels(run_id: str) -> list[str]:
    """`--label` flags for a container a bench makes with the docker CLI: its run, this process as
    its controller (so `harness sandbox prune` elsewhere leaves it while the bench runs) and its kind."""

    from sandbox import labels

    marks = {labels.RUN: run_id, **labels.owner(), labels.KIND: "bench"}
    return [flag for name, value in marks.items() for flag in ("--label", f"{name}={value}")]


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of timed `harness` processes: this one's, as installed, so without
    PYTHONDONTWRITEBYTECODE (the warm-up writes harness's bytecode, as pip does the libraries'; no
    side pays a compile a user pays once), plus extra."""
    import os

    return {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}, **extra}


class Latency(BaseModel):
    """Median and 90th percentile of one side, in milliseconds."""

    median_ms: float
    p90_ms: float


def latency(samples: Sequence[float]) -> Latency:
    """Median and p90 of samples in milliseconds (rounded to 0.1 ms)."""
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return Latency(median_ms=round(statistics.median(ordered), 1), p90_ms=round(p90, 1))


def timed(action: Callable[[], object]) -> float:
    """Milliseconds action took."""
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def side_by_side(
    sides: Mapping[str, Callable[[], object]],
    *,
    rounds: int,
    between: Callable[[], object] = lambda: None,
    warmup: int = 1,
) -> dict[str, list[float]]:
    """Milliseconds of each side per round, the sides interleaved in every round."""
    for _ in range(warmup):
        for action in sides.values():
            between()
            action()
    samples: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(rounds):
        for name, action in sides.items():
            between()
            samples[name].append(timed(action))
    return samples


def ratio(numerator: float, denominator: float, digits: int = 2) -> float:
    """numerator / denominator rounded; infinity when the denominator is zero."""
    return round(numerator / denominator, digits) if denominator else float("inf")


def median(samples: Sequence[float], digits: int = 1) -> float:
    """The median, rounded."""
    return round(statistics.median(samples), digits)
