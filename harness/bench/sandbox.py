"""Side-by-side latency of the three ways to run one short command in a container.

(a) our pooled single-use call (`DockerSandbox.run`), (b) a cold create/start/wait/remove, (c) an
exec into one long-lived container — same image, same hardened config, interleaved call by call so
machine noise hits all three alike — and (d) the pooled call as it runs on an engine on another
machine: nothing bind-mounted, the workspace sent as an archive and brought back after the call
(sandbox.docker.transfer), measured on this engine beside the others, for the bench's small
workspace, the example repository and a larger tree (2,000 files of 8 KiB unless told). A pooled container there is
filled with the workspace while it waits (sandbox.docker.delta), and its call sends only what changed
since: beside it, the same call in a container not filled ahead (the whole workspace at the call).
Between pooled calls the pool is allowed to refill and the used container's removal to finish
(outside the timed region), as in real use where the model thinks between calls.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker
from pydantic import BaseModel

from harness.bench import run
from harness.bench.measure import Latency, latency, ratio, side_by_side
from sandbox.docker import hardening
from sandbox.docker.containers import DockerSandbox
from sandbox.docker.engine import engine_kind, resolve_image, translate
from sandbox.labels import of_process
from sandbox.owner import container_user, hand_over
from sandbox.spec import SandboxSpec
from sandbox.tree import copy_tree

COMMAND = ["true"]
EXAMPLE = run.EXAMPLE / "calc"
"""The repository the README's demo fixes (the archive side's realistic workspace)."""
LARGE_FILE_BYTES = 8192
"""The size of each file of the archive side's larger tree (source-sized; ten to a folder)."""


class SandboxBench(BaseModel):
    """Result of `harness bench sandbox`."""

    engine: str = ""
    """The engine measured: its product, version, mode and address (`Podman 4.3.1 rootful at ...`)."""
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
    archive: Latency
    """(d) the pooled call with the workspace travelling as archives (an engine on another machine)."""
    archive_ms: float
    archive_over_pooled: float
    archive_over_exec: float
    archive_example: Latency
    """(d) again, with the example repository (examples/calc) as the workspace."""
    archive_example_ms: float
    archive_example_whole: Latency
    """(d) with the example, its container not filled ahead: the whole workspace sent at the call."""
    archive_large: Latency
    """(d) with the larger tree (tree_files files), filled ahead."""
    archive_large_whole: Latency
    """The same, not filled ahead."""
    filled_over_whole_example: float
    filled_over_whole_large: float
    call_path: str
    """How the pooled calls reached their containers (`stub`, or `exec` where no stub can run)."""
    starts_per_s: float
    """Pre-started containers the engine delivers per second, with the pool's own concurrency."""
    sustained_calls_per_s: float
    """Back-to-back pooled calls per second with no pause for the pool to refill: the refill is the limit."""
    note: str = (
        "pooled: the pool refills and used containers are removed between calls, outside the timed "
        "region (as when the model thinks between calls)"
    )


def measure(
    client: docker.DockerClient, *, run_id: str, image: str = "py311", calls: int = 20, tree_files: int = 2000
) -> SandboxBench:
    """Run `calls` rounds of (a), (b), (c) interleaved and summarise them."""
    ref, image_id = resolve_image(client, image)
    spec = SandboxSpec(image=image, timeout_s=60)
    with translate("asking the engine what it is"):
        version, info = client.version(), client.info()
    product, rootless = engine_kind(version, info)
    engine = f"{product} {version.get('Version')} {'rootless' if rootless else 'rootful'} at {client.api.base_url}"
    api = client.api
    with (
        tempfile.TemporaryDirectory(prefix="harness-bench-") as tmp,
        DockerSandbox(client, run_id=run_id, pool_size=1) as box,
        contextlib.ExitStack() as stack,
    ):
        workspace = Path(tmp) / "workspace"
        workspace.mkdir()
        (workspace / "README").write_text("bench\n")
        hand_over(workspace)
        example = Path(tmp) / "example"
        copy_tree(EXAMPLE, example)
        hand_over(example)
        large = _large_tree(Path(tmp) / "large", tree_files)
        far = {  # one sandbox per workspace, as each session has its own (its pool keeps its workspace's)
            each: stack.enter_context(DockerSandbox(client, run_id=run_id, pool_size=1, transport="archive"))
            for each in (workspace, example, large)
        }
        config = hardening.container_config(
            image_id, spec, workspace, (), container_user(), of_process(run_id, "bench")
        )
        if box.remote is not None:  # an engine that cannot take this machine's folders: (b) and (c) run
            config["host_config"]["binds"] = {}  # `true` without them (the workspace plays no part there)
        else:  # as a call's container here: a network namespace of its own, made by the runtime
            config = hardening.own_namespace(config)
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

        def filled(workspace: Path) -> Callable[[], None]:
            def side() -> None:  # the pooled container, filled while it waited
                far[workspace].run(COMMAND, workspace=workspace, spec=spec)

            return side

        spares: dict[Path, str] = {}

        def whole(workspace: Path) -> Callable[[], None]:
            def side() -> None:  # a container started outside the clock, not filled ahead
                far[workspace].call(spares.pop(workspace), COMMAND, workspace=workspace, spec=spec)

            return side

        def settled() -> None:
            box.pool.wait_idle()
            for each, sandbox in far.items():
                sandbox.pool.wait_idle()
                if each is not workspace and each not in spares:
                    spares[each] = sandbox.start_one(workspace=each, spec=spec)

        try:
            box.prewarm(workspace=workspace, spec=spec)
            call_path = box.run(COMMAND, workspace=workspace, spec=spec).call_path
            for each, sandbox in far.items():  # the derived image, the pool's first start: off the clock
                sandbox.run(COMMAND, workspace=each, spec=spec)
            settled()
            samples = side_by_side(
                {
                    "pooled": pooled,
                    "cold": cold,
                    "exec": exec_once,
                    "archive": filled(workspace),
                    "archive_example": filled(example),
                    "archive_example_whole": whole(example),
                    "archive_large": filled(large),
                    "archive_large_whole": whole(large),
                },
                rounds=calls,
                between=settled,
            )
            starts = _starts_per_s(box, workspace, spec, count=max(4, calls // 2))
            sustained = _sustained_calls_per_s(box, workspace, spec, count=max(5, calls))
        finally:
            api.remove_container(long_lived, force=True)
            for each, cid in spares.items():
                far[each].discard(cid)
    stats = {name: latency(values) for name, values in samples.items()}
    a, b, c = stats["pooled"].median_ms, stats["cold"].median_ms, stats["exec"].median_ms
    return SandboxBench(
        engine=engine,
        image=ref,
        calls=calls,
        pooled=stats["pooled"],
        cold=stats["cold"],
        exec=stats["exec"],
        pooled_ms=a,
        cold_ms=b,
        exec_ms=c,
        pooled_over_exec=ratio(a, c),
        pooled_over_cold=ratio(a, b),
        archive=stats["archive"],
        archive_ms=stats["archive"].median_ms,
        archive_over_pooled=ratio(stats["archive"].median_ms, a),
        archive_over_exec=ratio(stats["archive"].median_ms, c),
        archive_example=stats["archive_example"],
        archive_example_ms=stats["archive_example"].median_ms,
        archive_example_whole=stats["archive_example_whole"],
        archive_large=stats["archive_large"],
        archive_large_whole=stats["archive_large_whole"],
        filled_over_whole_example=ratio(stats["archive_example"].median_ms, stats["archive_example_whole"].median_ms),
        filled_over_whole_large=ratio(stats["archive_large"].median_ms, stats["archive_large_whole"].median_ms),
        call_path=call_path,
        starts_per_s=starts,
        sustained_calls_per_s=sustained,
    )


def _starts_per_s(box: DockerSandbox, workspace: Path, spec: SandboxSpec, count: int) -> float:
    """Containers started (ready for a call) per second at the pool's own concurrency."""
    box.pool.wait_idle()
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=box.pool.starters) as pool:
        cids = list(pool.map(lambda _: box.start_one(workspace=workspace, spec=spec), range(count)))
    elapsed = time.perf_counter() - started
    for cid in cids:
        box.discard(cid)
    box.pool.wait_idle()
    return round(count / elapsed, 2)


def _sustained_calls_per_s(box: DockerSandbox, workspace: Path, spec: SandboxSpec, count: int) -> float:
    box.pool.wait_idle()
    started = time.perf_counter()
    for _ in range(count):
        box.run(COMMAND, workspace=workspace, spec=spec)
    elapsed = time.perf_counter() - started
    box.pool.wait_idle()
    return round(count / elapsed, 2)


def _large_tree(root: Path, files: int) -> Path:
    """files files of LARGE_FILE_BYTES under root, ten to a folder (a repository's source tree)."""
    line = b"def function(argument):  # a line of source, as a repository's files hold\n"
    body = (line * (LARGE_FILE_BYTES // len(line) + 1))[:LARGE_FILE_BYTES]
    for index in range(files):
        folder = root / f"pkg{index // 10:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"module{index % 10}.py").write_bytes(body)
    hand_over(root)
    return root
