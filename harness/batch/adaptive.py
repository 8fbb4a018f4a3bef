"""`harness batch --workers auto`: how many task-runs run at once, decided as the batch goes.

The cluster is started with the most sessions the machine could hold (`default_workers`, or an
existing cluster's slots) and the limit moves inside that ceiling, the way TCP and adaptive
concurrency limiters do:
- it starts where a fixed `--workers` would (twice the cores, within memory) and doubles after each
  healthy task-run that finished at the limit until the first sign of trouble (slow start), then
  grows by one per such task-run;
- it shrinks only on trouble that says "too many", by half: an engine failure (the run's or one of its attempts'
  cause), a model rate limit (a 429 retried during the run), or memory pressure on this machine;
- it grows only while the pace holds: a run whose sandbox overhead per call (the call's time minus
  its command's own) or model milliseconds per output token is more than twice the best seen in
  this batch (a task's own commands never count: only what contention stretches) stops the growth
  until the pace is back; when that ends the slow start (the doubling overshot), the limit also
  steps back a quarter. With the sessions on this machine (a local cluster), cores more than 85%
  busy since the last result stop the growth too: more at once would only queue for them.
Every change is one line of `concurrency.jsonl` in the batch directory (time, limit, running, why):
the report draws the concurrency over time from it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from sandbox import durable

if TYPE_CHECKING:
    from harness.batch.records import TaskRunRecord

LOG = "concurrency.jsonl"
"""The batch directory's record of the limit over time."""
START = 2
STARTED = "start at"
"""How the first line of each invocation's changes begins (the report splits the log there)."""
SLOWER = 2.0
"""A pace this many times the batch's best counts as slowed."""
CPU_BUSY = 0.85
"""Cores this busy since the last result: growing would only queue (sessions on this machine)."""
MEMORY_FLOOR = 0.10
"""Below this fraction of memory available, the limit halves."""
ENGINE_CAUSES = frozenset({"engine_unavailable", "sandbox_failed", "workspace_failed", "snapshot_failed"})


class Pace(NamedTuple):
    """What one finished task-run says about the load (from its record)."""

    engine_trouble: bool
    rate_limited: int
    call_overhead_ms: float | None
    model_ms_per_token: float | None

    @classmethod
    def of(cls, record: TaskRunRecord) -> Pace:
        causes = {record.cause, *(attempt.cause for attempt in record.attempts)}
        return cls(
            engine_trouble=bool(causes & ENGINE_CAUSES),
            rate_limited=record.rate_limited,
            call_overhead_ms=record.call_overhead_ms,
            model_ms_per_token=record.model_ms_per_token,
        )


class Change(NamedTuple):
    ts: float
    limit: int
    running: int
    why: str


def cpu_busy() -> float:
    """The fraction of this machine's cores busy since the last call (every process: the engine, the
    containers, the controllers); the first call starts the measure."""
    import psutil

    return float(psutil.cpu_percent(interval=None)) / 100


def memory_available() -> float:
    """The fraction of this machine's memory available."""
    import psutil

    memory = psutil.virtual_memory()
    return float(memory.available) / float(memory.total) if memory.total else 1.0


class Concurrency:
    """The limit, and the rule that moves it. `log` is the batch directory's file (None: not kept)."""

    def __init__(
        self,
        ceiling: int,
        log: Path | None = None,
        *,
        start: int = START,
        memory: Callable[[], float] = memory_available,
        cpu: Callable[[], float] | None = cpu_busy,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.ceiling = max(1, ceiling)
        self.limit = max(1, min(start, self.ceiling))
        self.slow_start = True
        self.holding = False
        """The pace slowed: no growth until it is back (said once in the log)."""
        self.best_overhead: float | None = None
        self.best_per_token: float | None = None
        self.log = log
        self.memory = memory
        self.cpu = cpu
        """None when the sessions run on other machines (an existing cluster): no CPU signal here."""
        if cpu is not None:
            cpu()
        self.clock = clock
        self.changes: list[Change] = []
        self._say(0, f"{STARTED} {self.limit} of at most {self.ceiling}")

    def finished(self, pace: Pace, running: int) -> int:
        """A task-run came back (running: how many still run): the new limit."""
        was_full = running + 1 >= self.limit
        if pace.engine_trouble:
            return self._down(running, "an engine failure", halve=True)
        if pace.rate_limited:
            return self._down(
                running, f"the model endpoint rate-limited ({pace.rate_limited} retries after 429)", halve=True
            )
        slowed = self._slowed(pace)
        busy = self.cpu() if self.cpu is not None else 0.0
        if not slowed and busy >= CPU_BUSY:  # the cores are the limit: more at once would only queue
            slowed = f"the machine's cores are {busy:.0%} busy"
        elif slowed and self.slow_start:  # the doubling overshot: back a quarter, then grow no more
            return self._down(running, slowed, halve=False, step=max(1, self.limit // 4))
        if slowed:
            self.slow_start = False
            if not self.holding:
                self.holding = True
                self._say(running, f"holding: {slowed}")
            return self.limit
        self.holding = False
        if was_full and self.limit < self.ceiling:
            grown = min(self.ceiling, self.limit * 2 if self.slow_start else self.limit + 1)
            self._set(grown, running, "healthy at the limit" + (" (slow start)" if self.slow_start else ""))
        return self.limit

    def pressure(self, running: int) -> int:
        """Before more task-runs start (after every result): memory pressure halves the limit."""
        available = self.memory()
        if available < MEMORY_FLOOR and self.limit > 1:
            return self._down(running, f"memory pressure ({available:.0%} available)", halve=True)
        return self.limit

    def ended(self) -> None:
        """The batch stopped scheduling: the last line (where the report's chart ends)."""
        self._say(0, "the batch ended")

    def _slowed(self, pace: Pace) -> str | None:
        why = None
        if pace.call_overhead_ms is not None:
            best = self.best_overhead
            if best is not None and pace.call_overhead_ms > SLOWER * max(best, 5.0):
                why = (
                    f"sandbox overhead per call {pace.call_overhead_ms:.0f} ms, over {SLOWER:g}x the best {best:.0f} ms"
                )
            self.best_overhead = pace.call_overhead_ms if best is None else min(best, pace.call_overhead_ms)
        if pace.model_ms_per_token is not None:
            best = self.best_per_token
            if why is None and best is not None and pace.model_ms_per_token > SLOWER * max(best, 1.0):
                why = f"model {pace.model_ms_per_token:.0f} ms per output token, over {SLOWER:g}x the best {best:.0f}"
            self.best_per_token = pace.model_ms_per_token if best is None else min(best, pace.model_ms_per_token)
        return why

    def _down(self, running: int, why: str, *, halve: bool, step: int = 1) -> int:
        self.slow_start = False
        lower = max(1, self.limit // 2 if halve else self.limit - step)
        if lower != self.limit:
            self._set(lower, running, why)
        return self.limit

    def _set(self, limit: int, running: int, why: str) -> None:
        self.limit = limit
        self._say(running, why)

    def _say(self, running: int, why: str) -> None:
        change = Change(ts=round(self.clock(), 3), limit=self.limit, running=running, why=why)
        self.changes.append(change)
        if self.log is not None:
            durable.append_line(self.log, change._asdict())


def invocations(changes: Sequence[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """The changes (as `Change._asdict()`) split per invocation of the batch, oldest first."""
    runs: list[list[Mapping[str, Any]]] = []
    for change in changes:
        if str(change["why"]).startswith(STARTED) or not runs:
            runs.append([])
        runs[-1].append(change)
    return runs


def read_log(batch_dir: Path) -> list[Change]:
    """The limit over time of a batch run with `--workers auto` (every invocation's, oldest first);
    lines that are not a change are skipped (a batch directory is outside input)."""
    path = Path(batch_dir) / LOG
    changes = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if path.is_file() else []:
        try:
            data = json.loads(line)
            changes.append(
                Change(
                    ts=float(data["ts"]), limit=int(data["limit"]), running=int(data["running"]), why=str(data["why"])
                )
            )
        except (ValueError, KeyError, TypeError):
            continue
    return changes
