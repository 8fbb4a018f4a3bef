"""`harness bench batch`: a batch of scripted tasks whose model thinks (a scripted delay per turn, as
real models do), at several worker counts, side by side in one run: the speedup over one worker,
the peak memory of the batch (controller plus workers) per concurrent session, and the sustained
container starts per second against the engine's own ceiling (many bare `docker run` in parallel).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import yaml
from pydantic import BaseModel

from harness.batch.adaptive import read_log
from harness.batch.runner import BatchBudget, default_workers, run_batch
from harness.batch.tasks import load_tasks
from harness.bench.measure import docker_labels, ratio
from harness.bench.run import EXAMPLE
from sandbox import labels

VERIFY = "python3 -m pytest -q"


class WorkersRun(BaseModel):
    """One batch at one worker count (with auto: the ceiling its limit moved under)."""

    workers: int
    auto: bool = False
    limits: list[int] = []
    """With auto: the limit after each change, in order."""
    seconds: float
    verified: int
    peak_mb: float
    """Peak resident memory (RSS) of the controller and all its worker processes together; pages the
    processes share (the interpreter, libraries) count once per process."""
    mb_per_session: float
    peak_pss_mb: float = 0.0
    """The same peak as proportional set size: each shared page split among the processes sharing it,
    so the sum is the memory the batch actually holds."""
    pss_mb_per_session: float = 0.0
    container_starts: int
    starts_per_s: float
    cpu_s: float = 0.0
    """CPU time the whole host spent while the batch ran (every process: the batch, the engine, the
    containers; on a shared machine, its other tenants too)."""
    cpu_busy: float = 0.0
    """cpu_s over the cores' time: 1.0 means every core was busy the whole run."""


class BatchBench(BaseModel):
    """Result of `harness bench batch`."""

    tasks: int
    think_s: float
    runs: list[WorkersRun]
    speedup: float
    """Seconds at the fewest workers / seconds at the most (target at 8 over 1: at least 6)."""
    engine_starts_per_s: float
    """What the engine sustains on its own: bare `docker run` of `true`, in parallel."""
    cpu_bound_speedup: float = 0.0
    """The most speedup this machine's cores allow for this batch: the fewest workers' seconds over
    the CPU time their run took spread over every core (the same work cannot finish sooner)."""
    auto_over_best: float | None = None
    """With auto: the best fixed count's seconds over auto's (throughput ratio). Target: at least 0.9."""


def _script(folder: Path, think_s: float) -> Path:
    turns = [
        {
            "text": "Running the tests first.",
            "delay_s": think_s,
            "tool_calls": [{"name": "run_tests", "arguments": {}}],
        },
        {
            "text": "Reading the code.",
            "delay_s": think_s,
            "tool_calls": [{"name": "read_file", "arguments": {"path": "calc/ops.py"}}],
        },
        {
            "text": "Fixing add().",
            "delay_s": think_s,
            "tool_calls": [
                {
                    "name": "apply_patch",
                    "arguments": {
                        "path": "calc/ops.py",
                        "old_text": "    return a - b\n\n\ndef subtract",
                        "new_text": "    return a + b\n\n\ndef subtract",
                    },
                }
            ],
        },
        {"text": "Fixed add(); the tests pass.", "delay_s": think_s},
    ]
    path = folder / "thinking.yaml"
    path.write_text(yaml.safe_dump({"turns": turns}))
    return path


def _tasks(folder: Path, count: int) -> Path:
    tasks = [
        {"id": f"t{n}", "repo": str(EXAMPLE / "calc"), "task": "Fix the failing tests in calc."} for n in range(count)
    ]
    path = folder / "tasks.yaml"
    path.write_text(yaml.safe_dump({"defaults": {"verify": VERIFY}, "tasks": tasks}))
    return path


class _Sampler:
    """Peak RSS of this process and its descendants, and container starts seen on the engine."""

    def __init__(self, client: object, run_id: str) -> None:
        self.peak = 0
        self.peak_pss = 0
        self.starts: set[str] = set()
        self._client, self._run_id = client, run_id
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> _Sampler:
        self._cpu = _busy_cpu_s()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.cpu_s = _busy_cpu_s() - self._cpu
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        me = psutil.Process()
        ticks = 0
        while not self._stop.wait(0.2):
            ticks += 1
            full = ticks % 5 == 0  # PSS reads every process's page map: once a second, not to load the cores
            total = proportional = 0
            for process in [me, *me.children(recursive=True)]:
                try:
                    if full:
                        info = process.memory_full_info()
                        total, proportional = total + info.rss, proportional + getattr(info, "pss", info.rss)
                    else:
                        total += process.memory_info().rss
                except psutil.Error:
                    continue
            self.peak = max(self.peak, total)
            self.peak_pss = max(self.peak_pss, proportional)
            try:
                found = self._client.api.containers(all=True, filters={"label": f"{labels.RUN}={self._run_id}"})  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001 - a listing that fails only loses one sample
                continue
            self.starts |= {c["Id"] for c in found}


def _busy_cpu_s() -> float:
    """CPU seconds the host has spent busy since boot (every core; idle and I/O wait left out)."""
    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


def _engine_ceiling(image_ref: str, run_id: str, seconds: float = 8.0, parallel: int = 8) -> float:
    """Bare `docker run --rm` of `true`, `parallel` at a time for `seconds`: runs completed per second."""
    docker = shutil.which("docker")
    if docker is None:
        return 0.0
    done, deadline = [0], time.monotonic() + seconds

    def loop() -> None:
        while time.monotonic() < deadline:
            subprocess.run(
                [docker, "run", "--rm", "--network", "none", *docker_labels(run_id), image_ref, "true"],
                capture_output=True,
                check=False,
            )
            done[0] += 1

    started = time.monotonic()
    with ThreadPoolExecutor(parallel) as pool:
        for _ in range(parallel):
            pool.submit(loop)
    return round(done[0] / (time.monotonic() - started), 2)


def measure(
    client: object,
    image_ref: str,
    *,
    run_id: str,
    docker_host: str | None,
    tasks: int = 24,
    think_s: float = 1.0,
    workers: tuple[int, ...] = (1, 4, 8),
    auto: bool = False,
) -> BatchBench:
    """Run the same batch once per worker count (and with auto, once more with `--workers auto` under
    the machine's default ceiling), then measure the engine's own start rate."""
    runs = []
    cores = psutil.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="harness-bench-batch-") as tmp:
        folder = Path(tmp)
        model = f"scripted:{_script(folder, think_s)}"
        tasks_file = load_tasks(_tasks(folder, tasks))
        plans = [(count, False) for count in workers] + ([(default_workers(adaptive=True), True)] if auto else [])
        for count, adaptive in plans:
            out = folder / f"out-{count}{'-auto' if adaptive else ''}"
            label = f"{run_id}-w{count}{'a' if adaptive else ''}"
            with _Sampler(client, label) as sampler:
                started = time.monotonic()
                summary = run_batch(
                    tasks_file,
                    out,
                    models=[model],
                    runs=1,
                    workers=count,
                    budget=BatchBudget(),
                    run_id=label,
                    docker_host=docker_host,
                    adaptive=adaptive,
                )
                seconds = time.monotonic() - started
            limits = [change.limit for change in read_log(out)]
            at_once = max(limits) if adaptive and limits else count  # auto: the most it ran at once
            runs.append(
                WorkersRun(
                    workers=count,
                    auto=adaptive,
                    limits=limits,
                    seconds=round(seconds, 2),
                    verified=summary.verified,
                    peak_mb=round(sampler.peak / 1024**2, 1),
                    mb_per_session=round(sampler.peak / 1024**2 / at_once, 1),
                    peak_pss_mb=round(sampler.peak_pss / 1024**2, 1),
                    pss_mb_per_session=round(sampler.peak_pss / 1024**2 / at_once, 1),
                    container_starts=len(sampler.starts),
                    starts_per_s=round(len(sampler.starts) / seconds, 2),
                    cpu_s=round(sampler.cpu_s, 1),
                    cpu_busy=round(sampler.cpu_s / (seconds * cores), 2),
                )
            )
    ceiling = _engine_ceiling(image_ref, run_id)
    fixed = [run for run in runs if not run.auto]
    best = min(run.seconds for run in fixed)
    return BatchBench(
        tasks=tasks,
        think_s=think_s,
        runs=runs,
        speedup=ratio(fixed[0].seconds, fixed[-1].seconds),
        auto_over_best=next((ratio(best, run.seconds) for run in runs if run.auto), None),
        engine_starts_per_s=ceiling,
        cpu_bound_speedup=ratio(fixed[0].seconds, fixed[0].cpu_s / cores) if fixed[0].cpu_s else 0.0,
    )


class DiskBench(BaseModel):
    """Result of `harness bench batch --disk`: what a night of task-runs leaves on the disk."""

    tasks: int
    workers: int
    repo_bytes: int
    verified: int
    seconds: float
    batch_bytes: int
    """The batch directory after the batch (records, session folders, the shared object store)."""
    disk_over_repo: float
    """batch_bytes over the repository's size (target: at most 2; a workspace copy and a store per
    task-run made it about 90 at 50 task-runs)."""
    peak_bytes: int
    """The most the batch directory held while the batch ran (the running sessions' workspaces)."""
    peak_over_repo: float
    after_rm_bytes: int
    """The batch directory once every session but one was removed (`harness session rm`, collected)."""
    after_rm_over_repo: float
    collected_mb: float


def _disk(path: Path) -> int:
    """Bytes the files under path take on disk (blocks, so sparse and packed files count as they are)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
    return total


def generated_repo(folder: Path, megabytes: int) -> Path:
    """The example project plus `data/`: about `megabytes` MB of source-like text in 25 KB files
    (compressible the way code is, roughly two to one), seeded, so every run writes the same."""
    import random

    repo = folder / "repo"
    shutil.copytree(EXAMPLE / "calc", repo)
    words = [f"{a}{b}" for a in ("get", "set", "load", "parse", "value", "item", "node", "self") for b in "_xyzq"]
    chance = random.Random(50)
    size, number = 0, 0
    while size < megabytes * 1024**2:
        folder_n = repo / "data" / f"pkg{number // 100:03d}"
        folder_n.mkdir(parents=True, exist_ok=True)
        lines = [" ".join(chance.choice(words) + str(chance.randrange(10**6)) for _ in range(8)) for _ in range(400)]
        text = "\n".join(lines) + "\n"
        (folder_n / f"m{number}.py").write_text(f"# generated\n'''\n{text}'''\n")
        size += len(text)
        number += 1
    return repo


def measure_disk(
    *, run_id: str, docker_host: str | None, tasks: int = 50, workers: int = 2, megabytes: int = 50
) -> DiskBench:
    """A batch of `tasks` scripted task-runs (each fixes the example and passes its tests) on a
    generated repository; the batch directory's disk against the repository's, during, after, and
    after removing every session but one."""
    from harness.assembly import sessions as kept
    from harness.batch.records import BatchDir

    with tempfile.TemporaryDirectory(prefix="harness-bench-disk-") as tmp:
        folder = Path(tmp)
        repo = generated_repo(folder, megabytes)
        repo_bytes = _disk(repo)
        listed = [{"id": f"t{n}", "repo": str(repo), "task": "Fix the failing tests in calc."} for n in range(tasks)]
        spec = {"defaults": {"verify": f"{VERIFY} tests"}, "tasks": listed}
        (folder / "tasks.yaml").write_text(yaml.safe_dump(spec))
        out = folder / "out"
        peak = [0]
        done = threading.Event()

        def watch() -> None:
            while not done.wait(1.0):
                peak[0] = max(peak[0], _disk(out))

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        started = time.monotonic()
        try:
            summary = run_batch(
                load_tasks(folder / "tasks.yaml"),
                out,
                models=[f"scripted:{_script(folder, 0.0)}"],
                runs=1,
                workers=workers,
                budget=BatchBudget(),
                run_id=run_id,
                docker_host=docker_host,
            )
        finally:
            done.set()
            watcher.join()
        seconds = time.monotonic() - started
        after = _disk(out)
        peak[0] = max(peak[0], after)
        records = BatchDir(out).records()
        for record in records[1:]:
            session = kept.open_session(out / "sessions", record.session_id)
            kept.remove_session(session, docker_host)
        collected = kept.collect_objects(out / "sessions")
        after_rm = _disk(out)
    return DiskBench(
        tasks=tasks,
        workers=workers,
        repo_bytes=repo_bytes,
        verified=summary.verified,
        seconds=round(seconds, 1),
        batch_bytes=after,
        disk_over_repo=round(after / repo_bytes, 3),
        peak_bytes=peak[0],
        peak_over_repo=round(peak[0] / repo_bytes, 3),
        after_rm_bytes=after_rm,
        after_rm_over_repo=round(after_rm / repo_bytes, 3),
        collected_mb=round((collected.freed_bytes if collected else 0) / 1e6, 1),
    )
