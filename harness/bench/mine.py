"""`harness bench mine`: the yield of `tasks mine` + `tasks check`, per language, on histories the
bench builds (histories.py: Python, Go, JavaScript, Rust, with merges, squashes and an old
interpreter requirement), on the project's own example, and on any repository given with --repo.

Each repository is mined (timed), written as a tasks file, and checked in the real sandbox (each
task's verify at its start state and with its reference change); the figures are the checked
tasks that are sound, per language, against the targets (Python at least 70%, Go and JavaScript at
least half)."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from harness import assembly
from harness.batch.tasks import load_tasks
from harness.bench.histories import HISTORIES
from harness.history import check, materialize
from harness.history.mine import MineOptions, mine
from harness.history.reader import History
from sandbox.tree import remove_tree

TARGETS = {"python": 0.7, "go": 0.5, "javascript": 0.5}
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "mathlib.bundle"


class RepositoryYield(BaseModel):
    name: str
    scanned: int
    merges: int
    mined: int
    mine_ms: float
    sound: int
    rejected_by_kind: dict[str, int]
    by_language: dict[str, dict[str, int]]
    verdicts: list[dict[str, Any]] = Field(default_factory=list)


class MineBench(BaseModel):
    repositories: list[RepositoryYield]
    by_language: dict[str, dict[str, float]]
    """language -> checked, sound, sound_rate, target (when it has one)."""
    targets_met: bool
    seconds: float


def measure(
    runtime: assembly.Runtime,
    *,
    languages: list[str] | None = None,
    repos: list[Path] = (),  # type: ignore[assignment]
    example: bool = True,
    workers: int = 3,
    build_envs: bool = False,
    log: Any = lambda text: None,
) -> MineBench:
    started = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="harness-bench-mine-"))
    try:
        sources: list[tuple[str, Path]] = []
        for language in languages or list(HISTORIES):
            HISTORIES[language](scratch / "histories" / language)
            sources.append((f"built {language}", scratch / "histories" / language))
        if example and EXAMPLE.is_file():
            sources.append(("example mathlib", EXAMPLE))
        sources += [(str(repo), Path(repo)) for repo in repos]
        results = [
            _one(name, path, scratch / f"tasks-{n}", runtime, workers, build_envs, log)
            for n, (name, path) in enumerate(sources)
        ]
    finally:
        remove_tree(scratch, ignore_errors=True)
    totals: dict[str, dict[str, float]] = {}
    for result in results:
        for language, row in result.by_language.items():
            total = totals.setdefault(language, {"checked": 0, "sound": 0})
            total["checked"] += row["checked"]
            total["sound"] += row["sound"]
    met = True
    for language, total in totals.items():
        total["sound_rate"] = round(total["sound"] / total["checked"], 3) if total["checked"] else 0.0
        if language in TARGETS:
            total["target"] = TARGETS[language]
            met = met and total["sound_rate"] >= TARGETS[language]
    return MineBench(
        repositories=results, by_language=totals, targets_met=met, seconds=round(time.monotonic() - started, 1)
    )


def _one(
    name: str, path: Path, folder: Path, runtime: assembly.Runtime, workers: int, build_envs: bool, log: Any
) -> RepositoryYield:
    log(f"mining {name}")
    output = folder / "tasks.yaml"
    folder.mkdir(parents=True)
    with History.open(path) as history:
        begun = time.perf_counter()
        mined = mine(history, MineOptions())
        mine_ms = (time.perf_counter() - begun) * 1000
        if mined.tasks:
            materialize.write(mined, history, output)
    if not mined.tasks:
        return RepositoryYield(
            name=name, scanned=mined.scanned, merges=mined.merges, mined=0, mine_ms=round(mine_ms, 1), sound=0,
            rejected_by_kind={}, by_language={},
        )  # fmt: skip
    tasks = load_tasks(output)
    log(f"checking {len(tasks.tasks)} task(s) of {name}")
    verdicts = check.check(tasks, runtime, workers=workers, build_envs=build_envs, log=log)
    report = check.yield_report(tasks, verdicts)
    by_language = {
        language: {"checked": row["checked"], "sound": row["sound"]} for language, row in report["by_language"].items()
    }
    return RepositoryYield(
        name=name,
        scanned=mined.scanned,
        merges=mined.merges,
        mined=len(mined.tasks),
        mine_ms=round(mine_ms, 1),
        sound=report["total"]["sound"],
        rejected_by_kind=report["total"]["rejected_by_kind"],
        by_language=by_language,
        verdicts=[{"task": v.task_id, "kind": v.kind, "reason": v.reason, "image": v.image} for v in verdicts],
    )
