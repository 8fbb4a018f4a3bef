"""The batch client: plan the task-runs (tasks x models x runs), skip the recorded ones, hand the rest
to a Dask cluster (a local one bound to 127.0.0.1 by default, or an existing scheduler), and write
each task-run's record as it comes back. Dask decides placement and reruns the work of a dead
worker; this adds only what Dask does not know: session slots, the global budget, records, resume.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.batch import shipping
from harness.batch.adaptive import LOG, Concurrency, Pace, cpu_busy
from harness.batch.parents import bundle
from harness.batch.records import BatchDir, TaskRunKey, TaskRunRecord
from harness.batch.tasks import Task, TasksFile, given_to
from harness.batch.worker import REFERENCE_MODEL, TaskRunOutput, TaskRunSpec, no_reference, run_task
from harness.environment.agents import agent_for
from harness.errors import UsageError
from harness.providers.vendor import ModelSpec, prefix_of
from harness.telemetry.config import TelemetryConfig
from harness.telemetry.traced import traced

SESSION_RESOURCE = "sessions"
"""The Dask worker resource a task-run holds: a worker serving N sessions advertises N."""
WORKER_CONFIG = {"distributed.worker.profile.enabled": False}
"""Dask settings of batch workers: no statistical profiler (it samples every thread every 10 ms for a
dashboard batches do not run; on a small host that CPU is the batch's limit)."""
SHIPMENT_RETRIES = 3
"""Times a task-run is queued again because the worker holding its shipped repository died."""


class BatchBudget(BaseModel):
    """The global budget: once spent, no new task-run starts; running ones are capped by what is left."""

    model_config = ConfigDict(extra="forbid")

    max_cost_usd: float | None = Field(None, ge=0)
    max_tokens: int | None = Field(None, ge=1)
    max_hours: float | None = Field(None, gt=0)


class BatchEvent(BaseModel):
    """What the progress display (or `--json`) is told."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["planned", "started", "finished", "never_started", "summary"]
    key: TaskRunKey | None = None
    record: TaskRunRecord | None = None
    queued: int = 0
    running: int = 0
    done: int = 0
    failed: int = 0
    cost_usd: float = 0.0


class BatchSummary(BaseModel):
    """The end of a batch."""

    model_config = ConfigDict(extra="forbid")

    planned: int
    skipped: int
    """Already recorded by an earlier run of the same command."""
    ran: int
    verified: int
    never_started: int
    gave_up: int
    cost_usd: float
    tokens: int
    elapsed_s: float


def default_workers(session_memory: int = 1024**3, *, adaptive: bool = False) -> int:
    """Concurrent sessions for a local cluster: twice the cores (a model's think time overlaps
    other sessions' work), no more than free memory allows at one session's limit plus its worker's
    own ~200 MB, at most 16. With adaptive (`--workers auto`), the ceiling its limit moves under:
    memory's bound alone, at most 16 (how much think time overlaps is what it finds out)."""
    import os

    import psutil

    cores = os.cpu_count() or 1
    room = max(1, (psutil.virtual_memory().available - 1024**3) // (session_memory + 200 * 1024**2))
    return int(max(1, min(room, 16) if adaptive else min(2 * cores, room, 16)))


def plan(tasks: TasksFile, models: list[str], runs: int | None) -> list[tuple[TaskRunKey, Any]]:
    """Every task-run of the batch, task by task."""
    models = models or tasks.defaults.model
    if not models and not all(task.model for task in tasks.tasks):
        raise UsageError(
            "no model: pass --model PROVIDER:MODEL (repeatable), set defaults.model in the tasks file, or give "
            "each task its own model (a batch directory remembers its models once it has run)"
        )
    out = []
    for task in tasks.tasks:
        count = runs or task.runs or tasks.defaults.runs
        agent = task.agent or tasks.defaults.agent
        own = [given_to(model, agent) for model in ([task.model] if task.model else models)]
        out += [(TaskRunKey(task_id=task.id, model=model, run_index=k), task) for model in own for k in range(count)]
    for model in dict.fromkeys(key.model for key, _ in out):  # an agent given a model it cannot use: said now
        spec = ModelSpec.of(model)
        if spec.agent:
            agent_for(spec.agent, spec.model, what=f"model {model}: the agent")
    lacking = list(dict.fromkeys(t.id for key, t in out if key.model == REFERENCE_MODEL and t.reference is None))
    if lacking:  # said before a cluster starts or anything is written
        raise UsageError(no_reference(lacking))
    return out


def to_run(tasks: TasksFile, batch: BatchDir, models: list[str], runs: int | None) -> list[TaskRunKey]:
    """The task-runs an invocation of the batch would run (those not recorded as done)."""
    models = models or tasks.defaults.model or batch.models()
    return [key for key, _ in plan(tasks, models, runs) if not _finished(batch.read(key))]


@contextmanager
def dask_client(cluster: str | None, workers: int) -> Iterator[Any]:
    """A client of the given scheduler, or of a local cluster on 127.0.0.1 (one session per worker;
    `client.cluster.scale(n)` adds workers later)."""
    import dask
    from distributed import Client, LocalCluster

    if cluster:
        with Client(cluster, timeout="20s") as client:
            yield client
        return
    with (
        dask.config.set(WORKER_CONFIG),  # the nannies hand it to the worker processes they start
        LocalCluster(
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            # No dashboard; the routes a scheduler serves all the same (health, metrics) on a port of
            # the system's choosing, never 8787: a second batch at once found it taken and warned
            scheduler_kwargs={"dashboard_address": "127.0.0.1:0"},
            resources={SESSION_RESOURCE: 1},
            silence_logs=50,  # a worker losing the scheduler at shutdown is not news
        ) as local,
        Client(local) as client,
    ):
        yield client


def run_batch(
    tasks: TasksFile,
    out: Path,
    *,
    models: list[str],
    runs: int | None,
    workers: int,
    budget: BatchBudget,
    run_id: str,
    cluster: str | None = None,
    docker_host: str | None = None,
    api_keys: dict[str, str] | None = None,
    on_event: Callable[[BatchEvent], None] = lambda event: None,
    stopping: Callable[[], bool] = lambda: False,
    telemetry: TelemetryConfig | None = None,
    secret_values: dict[str, str] | None = None,
    adaptive: bool = False,
) -> BatchSummary:
    """Run every task-run not yet recorded in out; records are written as results arrive. With
    adaptive, workers is the ceiling and the number running at once moves below it as the batch goes
    (`harness.batch.adaptive`, every change in the batch's `concurrency.jsonl`). Once
    `stopping()` says so, no new task-run starts and the running ones finish (the rest stay
    unrecorded: the next invocation runs them). With telemetry on, the batch is one span, the trace
    parent of every task-run's span on whichever worker runs it."""
    telemetry = telemetry or TelemetryConfig()
    batch = BatchRun(
        tasks, BatchDir(out), models, runs, budget, run_id, docker_host, api_keys or {}, on_event, stopping
    )
    batch.telemetry = telemetry
    batch.secret_values = dict(secret_values or {})
    with traced(
        telemetry, "harness.batch", harness__batch__id=batch.batch_id, harness__batch__planned=len(batch.planned)
    ) as span:
        batch.trace_parent = span.carrier
        if batch.todo:  # everything recorded already: no cluster to start
            # --workers auto on a local cluster: workers start one doubling ahead of the limit (its first
            # growth waits for no process), then as it grows; an existing cluster's are all there
            growing = adaptive and not cluster
            start = min(workers, default_workers()) if adaptive else workers
            with dask_client(cluster, min(workers, 2 * start) if growing else start) as client:
                # Workers of a local cluster share this filesystem; a cluster's may not: ship to those.
                slots = workers if growing else max(1, _slots(client) or workers)
                if adaptive:
                    batch.concurrency = Concurrency(
                        slots, batch.batch.root / LOG, start=start, cpu=cpu_busy if growing else None
                    )
                    batch.grow = client.cluster.scale if growing else None
                    batch.started_workers = min(workers, 2 * start)
                batch.schedule(client, slots, shipping.Shipper(client) if cluster else None)
                if batch.concurrency is not None:
                    batch.concurrency.ended()
        summary = batch.summary()
        span.set(**{f"harness__batch__{name}": value for name, value in summary.model_dump().items()})
    return summary


class BatchRun:
    """One invocation of a batch: what is planned and still to run, what was spent, and the queue."""

    def __init__(
        self,
        tasks: TasksFile,
        batch: BatchDir,
        models: list[str],
        runs: int | None,
        budget: BatchBudget,
        run_id: str,
        docker_host: str | None,
        api_keys: dict[str, str],
        on_event: Callable[[BatchEvent], None],
        stopping: Callable[[], bool],
    ) -> None:
        self.started = time.monotonic()
        self.tasks, self.batch, self.budget, self.run_id = tasks, batch, budget, run_id
        self.docker_host, self.api_keys, self.on_event, self.stopping = docker_host, api_keys, on_event, stopping
        batch.sessions.mkdir(parents=True, exist_ok=True)
        self.batch_id = batch.identity()
        models = models or tasks.defaults.model or batch.models()  # a rerun resumes the batch's own models
        self.planned = plan(tasks, models, runs)
        batch.remember_models(list(models))
        self.todo = [(key, task) for key, task in self.planned if not _finished(batch.read(key))]
        self.skipped = len(self.planned) - len(self.todo)
        self.cost_usd, self.tokens = 0.0, 0
        self.counts = {"ran": 0, "verified": 0, "never": 0, "gave_up": 0}
        self.queue = list(self.todo)
        self.bundles: dict[Path, Path] = {}
        self.running: dict[Any, tuple[TaskRunKey, Task]] = {}
        self.losses: dict[TaskRunKey, int] = {}
        self.telemetry = TelemetryConfig()
        self.secret_values: dict[str, str] = {}
        """`--secret` values by NAME; each task-run gets those its task binds."""
        self.trace_parent: dict[str, str] = {}
        """The batch span's trace context, handed to every task-run."""
        self.concurrency: Concurrency | None = None
        """`--workers auto`: the limit below the cluster's slots, moved by each result."""
        self.grow: Callable[[int], object] | None = None
        """`--workers auto` on a local cluster: start workers up to n (`LocalCluster.scale`)."""
        self.started_workers = 0
        self.ceiling: str | None = None
        """Why the user's spend ceiling refused a task-run (then no other starts)."""
        on_event(BatchEvent(kind="planned", queued=len(self.todo), done=self.skipped))

    def spec(self, key: TaskRunKey, task: Task, shipper: shipping.Shipper | None) -> TaskRunSpec:
        """What a worker needs to run one task-run, capped by what is left of the budget."""
        budget = self.budget
        left_cost = None if budget.max_cost_usd is None else max(0.0, budget.max_cost_usd - self.cost_usd)
        left_tokens = None if budget.max_tokens is None else max(1, budget.max_tokens - self.tokens)
        return TaskRunSpec(
            key=key,
            task=task,
            defaults=self.tasks.defaults,
            sessions=self.batch.sessions.resolve(),
            run_id=self.run_id,
            docker_host=self.docker_host,
            api_key=self.api_keys.get(prefix_of(key.model)),
            max_cost_usd=left_cost,
            max_tokens=left_tokens,
            grace_s=self.tasks.defaults.grace_s,
            batch_id=self.batch_id,
            probe=self.batch.probe.resolve(),
            files=shipper.files(_model_files(key, task)) if shipper else {},
            telemetry=self.telemetry,
            trace_parent=self.trace_parent,
            secret_values={
                name: value for name, value in self.secret_values.items() if name in _bound(task, self.tasks)
            },
        )

    def exhausted(self) -> str | None:
        """Why the global budget allows no new task-run, or None."""
        budget = self.budget
        if budget.max_cost_usd is not None and self.cost_usd >= budget.max_cost_usd:
            return f"the batch's cost budget (${budget.max_cost_usd:g}) was spent"
        if budget.max_tokens is not None and self.tokens >= budget.max_tokens:
            return f"the batch's token budget ({budget.max_tokens}) was spent"
        if budget.max_hours is not None and time.monotonic() - self.started >= budget.max_hours * 3600:
            return f"the batch's wall clock ({budget.max_hours:g} h) ran out"
        return self.ceiling

    def schedule(self, client: Any, slots: int, shipper: shipping.Shipper | None) -> None:
        """Keep slots task-runs running until the queue is empty, the budget spent or a stop asked;
        record each as it comes back, and why the ones never started did not."""
        from distributed import as_completed

        pending = as_completed()
        self._submit_more(client, slots, shipper, pending)
        for future in pending:
            key, task = self.running.pop(future)
            output: TaskRunOutput = future.result()
            if shipper and _lost(output.record) and self.losses.get(key, 0) < SHIPMENT_RETRIES:
                self.losses[key] = self.losses.get(key, 0) + 1  # its repository went with a dead worker: ship again
                shipper.lost(self.shipped_path(task))
                self.queue.insert(0, (key, task))
            else:
                self._record(key, task, output)
                if self.concurrency is not None:
                    self.concurrency.finished(Pace.of(output.record), len(self.running))
            self._submit_more(client, slots, shipper, pending)
        why = self.exhausted()
        for key, task in self.queue if why else []:  # the budget stopped scheduling: say so in each record
            self._never_started(key, task, why or "")

    def shipped_path(self, task: Task) -> Path:
        """What a worker without the batch's filesystem is sent for task: its repository, or for a
        fork the parent session (its files and objects, bundled once in a folder of the batch's)."""
        if task.fork is None:
            return task.repo
        into = self.batch.root / "parents" / task.fork.folder.name
        if into not in self.bundles:
            if into.exists():
                from sandbox.tree import remove_tree

                remove_tree(into)  # an earlier invocation's: the parent may have moved on since
            self.bundles[into] = bundle(task.fork.folder, into)
        return self.bundles[into]

    def _submit_more(self, client: Any, slots: int, shipper: shipping.Shipper | None, pending: Any) -> None:
        if self.concurrency is not None:
            slots = self.concurrency.pressure(len(self.running))
            if self.grow is not None and slots > self.started_workers:
                self.grow(slots)  # the new workers join while the queued task-runs wait for them
                self.started_workers = slots
        while self.queue and len(self.running) < slots and self.exhausted() is None and not self.stopping():
            key, task = self.queue.pop(0)
            future = client.submit(
                run_task,
                self.spec(key, task, shipper),
                shipper.repo(self.shipped_path(task)) if shipper else None,
                key=f"taskrun-{key.session_id}-{self.run_id}-{self.losses.get(key, 0)}",
                pure=False,
                resources={SESSION_RESOURCE: 1},
            )
            self.running[future] = (key, task)
            pending.add(future)
            self.on_event(BatchEvent(kind="started", key=key, queued=len(self.queue), running=len(self.running)))

    def _record(self, key: TaskRunKey, task: Task, output: TaskRunOutput) -> None:
        record = output.record
        if record.status == "never_started":  # the user's spend ceiling refused it: no more start
            self.ceiling = record.detail
            self.batch.write(record)
            self.counts["never"] += 1
            self.on_event(BatchEvent(kind="never_started", key=key, record=record))
            return
        if task.reference is not None:  # the client's path, not a worker's copy
            record = record.model_copy(update={"reference": str(Path(task.reference).resolve())})
        if output.session_files is not None:
            folder = self.batch.sessions / key.session_id
            shipping.receive_session(output.session_files, folder)
            record = record.model_copy(update={"session_dir": str(folder.resolve())})
        self.batch.write(record)
        self.cost_usd += record.cost_usd
        self.tokens += sum(record.tokens.values()) - record.tokens.get("cached", 0)
        self.counts["ran"] += 1
        self.counts["verified"] += record.verified
        self.counts["gave_up"] += record.status == "gave_up"
        self.on_event(
            BatchEvent(
                kind="finished",
                key=key,
                record=record,
                queued=len(self.queue),
                running=len(self.running),
                done=self.skipped + self.counts["ran"],
                failed=self.counts["gave_up"],
                cost_usd=self.cost_usd,
            )
        )

    def _never_started(self, key: TaskRunKey, task: Task, why: str) -> None:
        never = TaskRunRecord(
            key=key,
            status="never_started",
            outcome="never_started",
            detail=why,
            session_id=key.session_id,
            category=task.tags.category,
            tags=task.tags.model_dump(),
            first_tools=task.first_tools,
        )
        self.batch.write(never)
        self.counts["never"] += 1
        self.on_event(BatchEvent(kind="never_started", key=key, record=never))

    def summary(self) -> BatchSummary:
        """The end of this invocation (also told to on_event)."""
        summary = BatchSummary(
            planned=len(self.planned),
            skipped=self.skipped,
            ran=self.counts["ran"],
            verified=self.counts["verified"],
            never_started=self.counts["never"],
            gave_up=self.counts["gave_up"],
            cost_usd=round(self.cost_usd, 6),
            tokens=self.tokens,
            elapsed_s=round(time.monotonic() - self.started, 3),
        )
        self.on_event(BatchEvent(kind="summary", done=summary.skipped + summary.ran, cost_usd=summary.cost_usd))
        return summary


def _bound(task: Task, tasks: TasksFile) -> set[str]:
    """The names a task's `--secret` bindings give (its own over the defaults')."""
    from sandbox.settings import parse_secret

    bindings = task.session.secrets or tasks.defaults.session.secrets
    return {parse_secret(item)[0] for item in bindings}


def _model_files(key: TaskRunKey, task: Task) -> list[Path]:
    """The files a task-run's model reads: a scripted or reference model's file, a task's reference."""
    model = ModelSpec.of(key.model)
    found = [Path(model.target)] if model.vendor.file_target and model.target else []
    if key.model == REFERENCE_MODEL and task.reference is not None:
        found.append(task.reference)
    return found


def _lost(record: TaskRunRecord) -> bool:
    return bool(record.attempts) and record.attempts[-1].outcome == "shipment_lost"


def _finished(record: TaskRunRecord | None) -> bool:
    """Done for good: ran to an outcome. Never-started and given-up task-runs run again."""
    return record is not None and record.status == "done"


def _slots(client: Any) -> int:
    """Session slots the cluster's workers advertise in all."""
    info = client.scheduler_info()
    return int(sum(w.get("resources", {}).get(SESSION_RESOURCE, 0) for w in info.get("workers", {}).values()))
