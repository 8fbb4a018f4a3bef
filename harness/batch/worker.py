"""One task-run, executed in a Dask worker process through the composition root: a new session, or
the existing one resumed (a rerun after a crash continues where it stopped). A sandbox failure or an
endpoint that cannot be reached is retried with backoff as a new attempt; task outcomes are results
and are never retried."""

from __future__ import annotations

import socket
import statistics
import time
from collections import Counter
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from harness import assembly
from harness.agent.outcome import RunResult, RunState, infra_cause, machine_cause
from harness.assembly import engine
from harness.batch import shipping
from harness.batch.parents import adopt
from harness.batch.records import Attempt, TaskRunKey, TaskRunRecord
from harness.batch.tasks import Task, TaskDefaults
from harness.batch.watchdog import Watchdog, killed_reason
from harness.config import RunConfig, with_overrides
from harness.errors import HarnessError, ModelUnavailable, SessionError, UsageError
from harness.providers.vendor import ModelSpec
from harness.spend import CeilingReached
from harness.telemetry.config import TelemetryConfig
from harness.telemetry.traced import traced
from harness.trajectory import read_records, read_state
from harness.types import OutcomeKind
from sandbox.errors import EngineUnavailable, SandboxError
from sandbox.layout import SessionFolder, session_folder
from sandbox.network.netlog import read_log

REFERENCE_MODEL = "reference:"
"""`--model reference:` in a batch: every task runs its own reference change (harness tasks mine)."""
RETRIED_OUTCOMES: frozenset[OutcomeKind] = frozenset({"infra_error"})
"""Outcomes that say the machine failed, not the agent: retried as new attempts."""


class TaskRunSpec(BaseModel):
    """Everything a worker needs to run one task-run (sent to it by the client)."""

    model_config = ConfigDict(extra="forbid")

    key: TaskRunKey
    task: Task
    defaults: TaskDefaults
    sessions: Path
    run_id: str
    docker_host: str | None = None
    api_key: str | None = None
    max_cost_usd: float | None = None
    """What is left of the batch's cost budget when this task-run starts (caps the run's own)."""
    max_tokens: int | None = None
    attempts: int = 3
    backoff_s: float = 2.0
    grace_s: float = 60.0
    """How long past its wall clock (`limits.timeout_min`) a session may run before the worker stops it."""
    batch_id: str = ""
    probe: Path | None = None
    """The batch directory's probe file (holds batch_id): a worker that reads it shares the client's
    filesystem (None: taken as shared)."""
    files: dict[str, bytes] = {}
    """The model's file and the task's reference, by their client paths, for a worker that does not
    see them (sent only to a cluster)."""
    model: str | None = None
    """The model spec to run when it is not the key's (a file-based model at this worker's copy)."""
    telemetry: TelemetryConfig = TelemetryConfig()
    """Where the task-run's spans go (the client's settings: its flags and OTEL_* variables)."""
    trace_parent: dict[str, str] = {}
    """The batch span's W3C trace context: the task-run's span is its child."""
    secret_values: dict[str, str] = Field(default_factory=dict, repr=False)
    """The values of the task's `--secret` bindings, by NAME (read by the client from its variables)."""


class TaskRunOutput(BaseModel):
    """What a worker sends back: the record, and the session's files when the client cannot see them."""

    model_config = ConfigDict(extra="forbid")

    record: TaskRunRecord
    session_files: bytes | None = None
    """`shipping.session_files` of the session folder, from a worker without the batch directory."""


def task_model(spec: TaskRunSpec) -> str:
    """The model a task-run runs with: `reference:` names the task's own reference (a mined task's)."""
    model = spec.model or spec.key.model
    if model != REFERENCE_MODEL:
        return model
    if spec.task.reference is None:
        raise UsageError(no_reference([spec.task.id]))
    return f"reference:{spec.task.reference}"


def no_reference(task_ids: list[str]) -> str:
    """Why `--model reference:` cannot run these tasks."""
    shown = ", ".join(task_ids[:5]) + (f" and {len(task_ids) - 5} more" if len(task_ids) > 5 else "")
    return (
        f"--model reference: replays a mined task's own change, and {shown} has none (only tasks from "
        "`harness tasks mine` do): give another --model"
    )


def run_config(spec: TaskRunSpec) -> RunConfig:
    """The RunConfig of one task-run: task fields over batch defaults over run defaults."""
    task, defaults = spec.task, spec.defaults
    model = task_model(spec)
    overrides = {
        "model": model,
        "image": task.image or defaults.image,
        "verify": task.verify if task.verify is not None else defaults.verify,
        "checks": task.checks if task.checks is not None else defaults.checks,
        "sandbox.runtime": task.runtime or defaults.runtime,
        "gate.read_only_paths": task.read_only if task.read_only is not None else defaults.read_only,
        "approval": "unattended",
        "tools.declared": {
            name: tool.model_dump(mode="json") for name, tool in {**defaults.tools, **(task.tools or {})}.items()
        },
        "mcp": {name: server.model_dump(mode="json") for name, server in {**defaults.mcp, **(task.mcp or {})}.items()},
        "services": {
            name: service.model_dump(mode="json")
            for name, service in {**defaults.services, **(task.services or {})}.items()
        },
        "providers": {name: entry.model_dump(mode="json") for name, entry in defaults.providers.items()} or None,
        "hooks": defaults.hooks.model_dump(mode="json"),
        "spend": defaults.spend.model_dump(mode="json"),
        "delegate": defaults.delegate.model_dump(mode="json"),
        "attempts": {
            "count": task.attempts or defaults.attempts,
            "select": task.select or defaults.select,
        },
        "devcontainer_pull": defaults.devcontainer_pull,
        "devcontainer_features": {
            name: entry.model_dump(mode="json") for name, entry in defaults.devcontainer_features.items()
        },
        **_limits(spec),
        "started_from": started_from(task),
    }
    return with_overrides({"session": dict(task.session)}, overrides, f"{spec.task.id} (line {spec.task.line})")


def started_from(task: Task) -> dict[str, str | None] | None:
    """Where a mined task's start state came from (its tags: the repository, the commit's parent and
    the commit whose test changes it holds), for `harness apply`; None for any other task."""
    tags = task.tags.model_extra or {}
    commit = tags.get("commit")
    if not isinstance(commit, str) or not commit:
        return None
    repository, parent = tags.get("repository"), tags.get("parent")
    return {
        "repository": repository if isinstance(repository, str) and repository else None,
        "commit": parent if isinstance(parent, str) and parent else None,
        "applied": commit,
    }


def run_task(spec: TaskRunSpec, shipped: shipping.Shipped | None = None) -> TaskRunOutput:
    """Run (or resume) one task-run to an outcome, where this worker can see its repository (see
    harness.batch.shipping); never raises for what the run did."""
    try:
        spec, where = _placed(spec, shipped)
    except shipping.ShipmentLost as error:
        return TaskRunOutput(
            record=_record(spec, [Attempt(outcome="shipment_lost", detail=str(error))], None, "gave_up")
        )
    except (HarnessError, SandboxError, OSError, ValueError) as error:
        detail = f"this worker could not get the task's files: {error}"
        return TaskRunOutput(record=_record(spec, [Attempt(outcome="config_error", detail=detail)], None, "gave_up"))
    record = _run_placed(spec).model_copy(update={"repo_source": where.source})
    folder = session_folder(spec.sessions, spec.key.session_id).root
    if where.shared or not folder.is_dir():
        return TaskRunOutput(record=record)
    record = record.model_copy(update={"worker_session": f"{socket.gethostname()}:{folder}"})
    return TaskRunOutput(record=record, session_files=shipping.session_files(folder))


def _placed(spec: TaskRunSpec, shipped: shipping.Shipped | None) -> tuple[TaskRunSpec, shipping.Place]:
    """The spec with this worker's sessions folder, repository and model files."""
    where = shipping.place(spec.sessions, spec.task.repo, probe=spec.probe, batch_id=spec.batch_id, shipped=shipped)
    if where.shared:
        return spec, where
    local = {original: str(shipping.keep_file(content, original)) for original, content in spec.files.items()}
    key_model = ModelSpec.of(spec.key.model)
    model = key_model.with_target(local[key_model.target]) if key_model.target in local else None
    reference = spec.task.reference
    if reference is not None and str(reference) in local:
        reference = Path(local[str(reference)])
    task = spec.task.model_copy(update={"repo": where.repo, "reference": reference})
    if task.fork is not None:  # what was shipped is the parent session: made a session of this worker's
        parent = adopt(where.repo, where.sessions)
        task = task.model_copy(update={"fork": task.fork.model_copy(update={"folder": parent})})
    return spec.model_copy(update={"sessions": where.sessions, "task": task, "model": model}), where


def _run_placed(spec: TaskRunSpec) -> TaskRunRecord:
    """Run the task-run; a session that outlives its wall clock by the grace period is stopped by
    the worker (see `Watchdog`)."""
    folder = session_folder(spec.sessions, spec.key.session_id)
    killed = killed_reason(folder.killed)
    if killed is not None:  # this worker process was ended for it: the record says so, nothing reruns
        return _record(spec, [Attempt(outcome="killed", detail=killed)], None, "gave_up")
    limit = run_config(spec).limits.timeout_min
    watchdog = (
        Watchdog(folder, grace_s=spec.grace_s, after_s=limit * 60 + spec.grace_s, docker_host=spec.docker_host)
        if limit
        else None
    )
    key = spec.key
    try:
        with traced(
            spec.telemetry,
            "harness.task_run",
            parent=spec.trace_parent,
            harness__task__id=key.task_id,
            harness__task__model=key.model,
            harness__task__run_index=key.run_index,
            harness__session__id=key.session_id,
            harness__worker=socket.gethostname(),
        ) as span:
            record = _run_task(spec.model_copy(update={"trace_parent": span.carrier}), watchdog)
            span.set(
                harness__status=record.status,
                harness__outcome=record.outcome,
                harness__cause=record.cause,
                harness__attempts=len(record.attempts),
            )
            return record
    finally:
        if watchdog is not None:
            watchdog.cancel()


def _run_task(spec: TaskRunSpec, watchdog: Watchdog | None) -> TaskRunRecord:
    runtime = assembly.Runtime(
        run_id=spec.run_id,
        docker_host=spec.docker_host,
        api_key=spec.api_key,
        pace="throughput",
        telemetry=spec.telemetry,
        trace_parent=spec.trace_parent,
        secret_values=spec.secret_values,
    )
    attempts: list[Attempt] = []
    result: RunResult | None = None
    for number in range(spec.attempts):
        if watchdog is not None and watchdog.fired:
            return _record(spec, [*attempts, Attempt(outcome="killed", detail=watchdog.reason)], None, "gave_up")
        started = time.monotonic()
        try:
            result = _attempt(spec, runtime)
            attempts.append(
                Attempt(
                    outcome=result.outcome,
                    detail=result.detail,
                    cause=result.cause,
                    duration_s=round(time.monotonic() - started, 3),
                )
            )
            if not _retried(result):
                break
        except (EngineUnavailable, ModelUnavailable) as error:  # the machine, not the agent: try again
            engine = isinstance(error, EngineUnavailable)
            attempts.append(
                Attempt(
                    outcome="infra_error" if engine else "model_error",
                    detail=f"{type(error).__name__}: {error}",
                    cause=infra_cause(error) if isinstance(error, EngineUnavailable) else machine_cause(error),
                    duration_s=round(time.monotonic() - started, 3),
                )
            )
        except CeilingReached as error:  # the user's spend ceiling: it never started (a later batch runs it)
            never = _record(spec, attempts, None, "gave_up")
            return never.model_copy(
                update={"status": "never_started", "outcome": "never_started", "detail": str(error)}
            )
        except (HarnessError, SandboxError) as error:  # it cannot start (bad config, no key, no image): a result
            return _record(spec, [*attempts, Attempt(outcome="config_error", detail=str(error))], None, "gave_up")
        if number + 1 < spec.attempts:
            time.sleep(spec.backoff_s * 2**number)
    done = result is not None and not _retried(result)
    return _record(spec, attempts, result, "done" if done else "gave_up")


def _retried(result: RunResult) -> bool:
    """The machine failed, not the agent: the sandbox, or an endpoint that could not be reached."""
    return result.kind in RETRIED_OUTCOMES or result.cause == "endpoint_unreachable"


def _attempt(spec: TaskRunSpec, runtime: assembly.Runtime) -> RunResult:
    folder = session_folder(spec.sessions, spec.key.session_id)
    state = read_state(folder.root, RunState) if folder.state.exists() else None
    if state is not None and state.finished and state.result is not None:
        # finished before the record was written: the result is on disk; what its dead controller
        # may have left running goes (resume_run and start_run prune the same way themselves)
        engine.prune_crashed(spec.docker_host, spec.sessions, spec.key.session_id)
        return state.result
    if state is not None:
        return assembly.resume_run(spec.key.session_id, spec.sessions, runtime)
    if folder.root.exists():  # a create that never finished: start over
        from sandbox.tree import remove_tree

        remove_tree(folder.root)
    if spec.task.fork is not None:  # `harness fork`: the parent's config, this task-run's model and caps
        fork = spec.task.fork
        assembly.fork_session(
            fork.folder, fork.at, spec.sessions, runtime, spec.key.session_id, _fork_overrides(spec), fork.hint
        )
        return assembly.resume_run(spec.key.session_id, spec.sessions, runtime)
    config = run_config(spec)
    return assembly.start_run(spec.task.repo, spec.task.task, config, spec.sessions, runtime, spec.key.session_id)


def _fork_overrides(spec: TaskRunSpec) -> dict[str, object]:
    """What a fork changes of its parent's config: the model, and limits no looser than the batch's."""
    return {"model": task_model(spec), **_limits(spec)}


def _limits(spec: TaskRunSpec) -> dict[str, object]:
    """The task-run's limits as config overrides: the task's over the batch defaults', the cost and
    token caps no looser than what is left of the batch's budget."""
    limits = {**spec.defaults.limits.model_dump(exclude_none=True), **spec.task.limits.model_dump(exclude_none=True)}
    if spec.max_cost_usd is not None:
        limits["max_cost_usd"] = min(limits.get("max_cost_usd", spec.max_cost_usd), spec.max_cost_usd)
    if spec.max_tokens is not None:
        limits["max_tokens"] = min(limits.get("max_tokens", spec.max_tokens), spec.max_tokens)
    return {f"limits.{name}": value for name, value in limits.items()}


def session_record(spec: TaskRunSpec, folder: Path, result: RunResult) -> TaskRunRecord:
    """The record of a session no task-run of the batch made (a fork batch's parent), as if it had."""
    attempt = Attempt(outcome=result.outcome, detail=result.detail, cause=result.cause, duration_s=result.elapsed_s)
    return _record(spec, [attempt], result, "done", where=folder)


def _chosen(session_dir: Path) -> Path:
    """Where a task-run's turns, calls and requests are: its session's, or for a run of attempts the
    chosen attempt's (the run's result is that attempt's)."""
    from harness import readback

    try:
        chosen = readback.string((readback.attempts(session_dir) or {}).get("chosen"))
    except SessionError:
        return session_dir
    return session_dir.parent / f"{session_dir.name}-{chosen}" if chosen else session_dir


def _record(
    spec: TaskRunSpec,
    attempts: list[Attempt],
    result: RunResult | None,
    status: Literal["done", "gave_up"],
    where: Path | None = None,
) -> TaskRunRecord:
    folder = session_folder(spec.sessions, spec.key.session_id) if where is None else SessionFolder(where)
    record = TaskRunRecord(
        key=spec.key,
        status=status,
        attempts=attempts,
        session_id=folder.root.name,
        session_dir=str(folder.root),
        category=spec.task.tags.category,
        tags=spec.task.tags.model_dump(),
        first_tools=spec.task.first_tools,
        read_only=spec.task.read_only if spec.task.read_only is not None else spec.defaults.read_only,
        max_files=spec.task.max_files,
        max_lines=spec.task.max_lines,
    )
    if result is None:
        last = attempts[-1] if attempts else Attempt(outcome="gave_up")
        return record.model_copy(update={"outcome": last.outcome, "detail": last.detail, "cause": last.cause})
    facts = _trajectory_facts(_chosen(folder.root))
    requests = read_log(SessionFolder(_chosen(folder.root)).network)
    patch = Path(result.patch).read_text(encoding="utf-8", errors="replace") if result.patch else None
    return record.model_copy(
        update={
            "outcome": result.outcome,
            "cause": result.cause,
            "exit_code": result.exit_code,
            "verified": result.verified,
            "detail": result.detail,
            "steps": result.steps,
            "turns": facts.turns,
            "tokens": result.tokens,
            "cost_usd": result.cost_usd,
            "duration_s": result.elapsed_s,
            "first_tool": facts.first_tool,
            "verify_rounds": result.verify_rounds,
            "peak_context_tokens": facts.peak_context_tokens,
            "tool_errors": facts.tool_errors,
            "obstacle": facts.obstacle,
            "call_overhead_ms": facts.call_overhead_ms,
            "model_ms_per_token": facts.model_ms_per_token,
            "rate_limited": facts.rate_limited,
            "not_applied": facts.not_applied,
            "reference_lines": _reference_lines(spec.task.reference),
            "net_requests": len(requests),
            "net_refused": dict(Counter(str(r.get("host", "?")) for r in requests if not r.get("allowed"))),
            "patch": patch,
        }
    )


def _reference_lines(reference: Path | None) -> int | None:
    """The size of a mined task's reference change (its reference.patch beside reference.json)."""
    patch = reference.parent / "reference.patch" if reference is not None else None
    if patch is None or not patch.is_file():
        return None
    lines = patch.read_text(encoding="utf-8", errors="replace").splitlines()
    return sum(1 for line in lines if line[:1] in "+-" and not line.startswith(("+++ ", "--- ")))


class _Facts(NamedTuple):
    turns: int
    """Model turns that called tools."""
    first_tool: str | None
    peak_context_tokens: int
    """The largest prompt sent (estimated)."""
    tool_errors: dict[str, int]
    obstacle: str
    """The model's last "Biggest obstacle" line."""
    call_overhead_ms: float | None
    model_ms_per_token: float | None
    rate_limited: int
    not_applied: list[str]
    """The keys of the devcontainer.json the run never applied."""


def _trajectory_facts(session_dir: Path) -> _Facts:
    """What the report needs from a session's trajectory."""
    records = read_records(session_dir)
    turns = [record.turn for record in records if record.kind == "turn"]
    with_calls = [turn for turn in turns if turn.tool_calls]
    errors: dict[str, int] = {}
    for record in records:
        if record.kind == "tool" and record.error_kind:
            errors[record.error_kind] = errors.get(record.error_kind, 0) + 1
    obstacles = [record.detail for record in records if record.kind == "event" and record.event == "obstacle"]
    overheads = [
        max(0, record.duration_ms - record.envelope.duration_ms)
        for record in records
        if record.kind == "tool" and record.envelope is not None
    ]
    per_token = [
        turn.latency_ms / turn.usage.output_tokens for turn in turns if turn.usage.output_tokens and turn.latency_ms
    ]
    return _Facts(
        turns=len(with_calls),
        first_tool=with_calls[0].tool_calls[0].name if with_calls else None,
        peak_context_tokens=max((record.estimated_tokens for record in records if record.kind == "request"), default=0),
        tool_errors=errors,
        obstacle=obstacles[-1] if obstacles else "",
        call_overhead_ms=round(statistics.median(overheads), 1) if overheads else None,
        model_ms_per_token=round(statistics.median(per_token), 2) if per_token else None,
        rate_limited=sum(reason.startswith("ModelRateLimited") for turn in turns for reason in turn.retry_reasons),
        not_applied=_not_applied(records),
    )


def _not_applied(records: list[Any]) -> list[str]:
    """The devcontainer keys the run's start record lists as never applied."""
    start = next((r for r in records if r.kind == "start" and r.agent is None), None)
    found = (start.config.get("devcontainer") if start is not None else None) or {}
    return [str(item.get("key")) for item in found.get("dropped") or [] if isinstance(item, dict)]
