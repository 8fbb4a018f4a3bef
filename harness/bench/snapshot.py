"""`harness bench snapshot`: cost of per-step snapshots and rollbacks, as ratios from one run.

A generated repository (default 10,000 files, ~50 MB, 100 files per directory) becomes a session;
each step changes one file. Measured side by side: the first full snapshot, the one-change
snapshot (median), a session step (snapshot + durable step record), rollback of one step, and the
same one-change snapshot on a 100,000-file repository (small files: only the count matters).
A full stat walk without the watcher (what a fresh process does) is reported too.
"""

from __future__ import annotations

import functools
import random
import shutil
import statistics
import tempfile
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from harness.bench.measure import timed
from sandbox.session.session import Session
from sandbox.snapshot.config import SnapshotConfig
from sandbox.snapshot.store import SnapshotStore
from sandbox.spec import SandboxSpec


class SnapshotBench(BaseModel):
    """Result of `harness bench snapshot` (times in milliseconds)."""

    files: int
    megabytes: float
    steps: int
    full_snapshot_ms: float
    snapshot_ms: float
    """Median one-file-change snapshot (watcher path, as in a running session)."""
    step_ms: float
    """Median Session.commit_step: snapshot + fsynced step record."""
    rollback_ms: float
    """Median Session.rollback by one step (restore only what differs + step record)."""
    walk_snapshot_ms: float
    """Median one-change snapshot by a full stat walk (fresh process, no watcher)."""
    incremental_over_full: float
    snapshot_100k_ms: float
    scale_100k_over_10k: float


def generate(root: Path, files: int, size: int, per_dir: int = 100) -> None:
    """files text files of about size bytes in two directory levels."""
    rng = random.Random(files)
    for i in range(files):
        folder = root / f"pkg{i // (per_dir * 100)}" / f"mod{i // per_dir}"
        if i % per_dir == 0:
            folder.mkdir(parents=True, exist_ok=True)
        line = f"value_{i} = {rng.random()!r}  # generated\n".encode()
        (folder / f"file{i}.py").write_bytes(line * max(1, size // len(line)))


def _change(root: Path, files: int, per_dir: int, step: int) -> None:
    i = (step * 7919) % files
    path = root / f"pkg{i // (per_dir * 100)}" / f"mod{i // per_dir}" / f"file{i}.py"
    path.write_bytes(path.read_bytes() + f"# step {step}\n".encode())


def _one_change_median(workspace: Path, store_dir: Path, files: int, steps: int, watch: bool) -> tuple[float, float]:
    store = SnapshotStore(workspace, store_dir, SnapshotConfig(watch=watch))
    full = timed(store.snapshot)
    times = []
    for step in range(steps):
        _change(workspace, files, 100, step + 1000 * watch)
        times.append(timed(store.snapshot))
    store.close()
    return full, statistics.median(times)


def run(
    files: int = 10_000,
    size: int = 5_000,
    steps: int = 15,
    big_files: int = 100_000,
    log: Callable[[str], None] = lambda _m: None,
) -> SnapshotBench:
    """Run every measurement in one temporary directory."""
    with tempfile.TemporaryDirectory(prefix="harness-bench-snapshot-") as tmp:
        base = Path(tmp)
        log(f"generating {files} files")
        generate(base / "repo", files, size)
        megabytes = sum(p.stat().st_size for p in (base / "repo").rglob("*") if p.is_file()) / 1e6
        session = Session.create(base / "repo", base / "state", spec=SandboxSpec(), session_id="bench")
        full, snap = _one_change_median(session.workspace, base / "store-a", files, steps, watch=True)
        _, walk = _one_change_median(session.workspace, base / "store-b", files, steps, watch=False)
        step_times, rollback_times = [], []
        session.store.snapshot()
        for step in range(steps):
            _change(session.workspace, files, 100, step)
            step_times.append(timed(functools.partial(session.commit_step, f"change {step}")))
        for _ in range(steps):
            rollback_times.append(timed(lambda: session.rollback(session.step - 1)))
        session.close()
        shutil.rmtree(base / "state")
        log(f"generating {big_files} files")
        generate(base / "big", big_files, 512)
        _, big = _one_change_median(base / "big", base / "store-big", big_files, steps, watch=True)
    return SnapshotBench(
        files=files,
        megabytes=round(megabytes, 1),
        steps=steps,
        full_snapshot_ms=round(full, 1),
        snapshot_ms=round(snap, 2),
        step_ms=round(statistics.median(step_times), 2),
        rollback_ms=round(statistics.median(rollback_times), 2),
        walk_snapshot_ms=round(walk, 1),
        incremental_over_full=round(snap / full, 4),
        snapshot_100k_ms=round(big, 2),
        scale_100k_over_10k=round(big / snap, 2),
    )
