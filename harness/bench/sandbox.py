"""Side-by-side latency of the three ways to run one short command in a container.

(a) our pooled single-use call (`DockerSandbox.run`), (b) a cold create/start/wait/remove, (c) an
exec into one long-lived container — same image, same hardened config, interleaved call by call so
machine noise hits all three alike. Between pooled calls the pool is allowed to refill and the used
container's removal to finish (outside the timed region), as in real use where the model thinks
between calls.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import docker
from pydantic import BaseModel

from sandbox.docker import hardening
from sandbox.docker.containers import DockerSandbox
from sandbox.docker.engine import resolve_image, translate
from sandbox.owner import container_user, hand_over
from sandbox.spec import SandboxSpec

COMMAND = ["true"]


class Latency(BaseModel):
    """Median and 90th percentile of one approach, in milliseconds."""

    median_ms: float
    p90_ms: float


class SandboxBench(BaseModel):
    """Result of `harness bench sandbox`."""

    image: str
    calls: int
    pooled: Latency
    cold: Latency
    exec: Latency
    pooled_ms: float
    cold_ms: float
    exec_ms: float
    pooled_over_exec: float
    pooled_over_cold: float
    note: str = (
        "pooled: the pool refills and used containers are removed between calls, outside the timed "
        "region (as when the model thinks between calls)"
    )


def _latency(samples: list[float]) -> Latency:
    ordered = sorted(samples)
    p90 = ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))]
    return Latency(median_ms=round(statistics.median(ordered), 1), p90_ms=round(p90, 1))


def _timed(action: Callable[[], object]) -> float:
    started = time.perf_counter()
    action()
    return (time.perf_counter() - started) * 1000


def measure(client: docker.DockerClient, *, run_id: str, image: str = "py311", calls: int = 20) -> SandboxBench:
    """Run `calls` rounds of (a), (b), (c) interleaved and summarise them."""
    ref, image_id = resolve_image(client, image)
    spec = SandboxSpec(image=image, timeout_s=60)
    api = client.api
    with (
        tempfile.TemporaryDirectory(prefix="harness-bench-") as tmp,
        DockerSandbox(client, run_id=run_id, pool_size=1) as box,
    ):
        workspace = Path(tmp) / "workspace"
        workspace.mkdir()
        (workspace / "README").write_text("bench\n")
        hand_over(workspace)
        labels = {"harness.run": run_id, "harness.kind": "bench"}
        config = hardening.container_config(image_id, spec, workspace, (), container_user(), labels)
        host = api.create_host_config(**config["host_config"])
        with translate("starting the bench containers"):
            long_lived = api.create_container(**{**config, "host_config": host})["Id"]
            api.start(long_lived)

        def pooled() -> None:
            box.run(COMMAND, workspace=workspace, spec=spec)

        def cold() -> None:
            cid = api.create_container(**{**config, "command": COMMAND, "host_config": host})["Id"]
            api.start(cid)
            api.wait(cid)
            api.remove_container(cid, force=True)

        def exec_once() -> None:
            exec_id = api.exec_create(long_lived, COMMAND)["Id"]
            api.exec_start(exec_id)
            api.exec_inspect(exec_id)

        samples: dict[str, list[float]] = {"pooled": [], "cold": [], "exec": []}
        try:
            box.prewarm(workspace=workspace, spec=spec)
            for action in (pooled, cold, exec_once):  # one untimed warm-up round
                box.pool.wait_idle()
                action()
            for _ in range(calls):
                box.pool.wait_idle()
                samples["pooled"].append(_timed(pooled))
                box.pool.wait_idle()
                samples["cold"].append(_timed(cold))
                samples["exec"].append(_timed(exec_once))
        finally:
            api.remove_container(long_lived, force=True)
    stats = {name: _latency(values) for name, values in samples.items()}
    a, b, c = stats["pooled"].median_ms, stats["cold"].median_ms, stats["exec"].median_ms
    return SandboxBench(
        image=ref,
        calls=calls,
        pooled=stats["pooled"],
        cold=stats["cold"],
        exec=stats["exec"],
        pooled_ms=a,
        cold_ms=b,
        exec_ms=c,
        pooled_over_exec=round(a / c, 2),
        pooled_over_cold=round(a / b, 2),
    )
