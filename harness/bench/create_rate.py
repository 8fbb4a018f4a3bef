"""`harness bench sandbox --create-rate`: where the engine's own container create rate ends on this
machine, and harness's pool starts beside it, at 1, 2, 4 and 8 starts at once.

Each level starts N containers with that many at once and counts the ready ones per second: harness's
way (`DockerSandbox.start_one`: the hardened config, the call stub running, the workspace bound) and
the engine's own (the same image sleeping, no network, by the engine's create and start requests
alone: the least a client can ask), then removes them. The plateau is the smallest concurrency whose rate is within 10% of the best: starting
more at once than that only makes each start wait longer. The warm pool starts `WarmPool.starters`
at once (`sandbox.docker.pool.STARTERS`).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel

from sandbox import labels
from sandbox.docker.containers import DockerSandbox
from sandbox.docker.pool import STARTERS
from sandbox.owner import hand_over
from sandbox.spec import SandboxSpec

if TYPE_CHECKING:
    import docker

LEVELS = (1, 2, 4, 8)
TOLERANCE = 0.9
"""A level within this share of the best rate is on the plateau."""


class RateLevel(BaseModel):
    at_once: int
    started: int
    harness_per_s: float
    engine_per_s: float


class CreateRate(BaseModel):
    image: str
    levels: list[RateLevel]
    engine_plateau: int
    """The smallest concurrency whose engine rate is within 10% of the best measured."""
    harness_plateau: int
    pool_starters: int
    """How many the warm pool starts at once here (STARTERS)."""


def measure(
    client: docker.DockerClient, *, image: str, image_ref: str, run_id: str, levels: Sequence[int] = LEVELS
) -> CreateRate:
    found = []
    with tempfile.TemporaryDirectory(prefix="harness-bench-rate-") as tmp:
        workspace = Path(tmp) / "workspace"
        workspace.mkdir()
        (workspace / "README").write_text("a workspace\n")
        hand_over(workspace)
        spec = SandboxSpec(image=image)
        with DockerSandbox(client, run_id=run_id, pool_size=0) as box:
            box.discard(box.start_one(workspace=workspace, spec=spec))  # not counted: first look-ups
            for at_once in levels:
                count = max(8, 3 * at_once)

                def ours(_: int) -> str:
                    return box.start_one(workspace=workspace, spec=spec)

                harness = _rate(ours, box.discard, at_once, count)
                box.pool.wait_idle()

                def theirs(_: int) -> str:
                    created = client.api.create_container(
                        image_ref, ["sleep", "300"], user="65534:65534", labels={labels.RUN: run_id},
                        host_config=client.api.create_host_config(network_mode="none"),
                    )  # fmt: skip
                    client.api.start(created["Id"])
                    return str(created["Id"])

                def removed(cid: str) -> None:
                    client.api.remove_container(cid, force=True)

                engine = _rate(theirs, removed, at_once, count)
                found.append(RateLevel(at_once=at_once, started=count, harness_per_s=harness, engine_per_s=engine))
    return CreateRate(
        image=image,
        levels=found,
        engine_plateau=plateau(found, lambda level: level.engine_per_s),
        harness_plateau=plateau(found, lambda level: level.harness_per_s),
        pool_starters=STARTERS,
    )


def _rate(start: Callable[[int], str], remove: Callable[[str], None], at_once: int, count: int) -> float:
    """Containers started per second, at_once of them at a time; all removed after (not timed)."""
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=at_once) as pool:
        cids = list(pool.map(start, range(count)))
    elapsed = time.perf_counter() - started
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(remove, cids))
    time.sleep(1.0)  # the removals settle before the next level
    return round(count / elapsed, 2)


def plateau(levels: Sequence[RateLevel], rate: Callable[[RateLevel], float]) -> int:
    """The smallest concurrency whose rate is within TOLERANCE of the best."""
    best = max(rate(level) for level in levels)
    return min(level.at_once for level in levels if rate(level) >= TOLERANCE * best)
