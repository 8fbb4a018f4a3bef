"""Forks as a batch: N continuations of one session from one of its steps, each a task-run of a batch
directory laid out like any (records, `sessions/`, reports), so the same Dask engine runs them (local
or a cluster), under one budget, resumable after kill -9 exactly once, and `harness report DIR`
compares them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from harness import assembly
from harness.agent.fork import fork_start
from harness.agent.outcome import RunState
from harness.batch.records import BatchDir, TaskRunKey, TaskRunRecord
from harness.batch.tasks import ForkFrom, Tags, Task, TaskDefaults, TasksFile, given_to
from harness.batch.worker import REFERENCE_MODEL, TaskRunSpec, no_reference, session_record
from harness.errors import DamagedError, NotFoundError, UsageError
from harness.trajectory import read_records, read_state
from sandbox.errors import SandboxError
from sandbox.layout import SessionFolder


def fork_tasks(parent_dir: Path, at: int, *, runs: int, models: list[str], hint: str | None = None) -> TasksFile:
    """The batch of forks of the session in parent_dir at its step `at`: each model `runs` times
    (default: the parent's own model). UsageError for a step the run does not have, a session
    still running or one that recorded no run."""
    parent_dir = Path(parent_dir).resolve()
    if not SessionFolder(parent_dir).info.is_file():
        raise NotFoundError(f"no session {parent_dir.name} in {parent_dir.parent} (see: harness session list)")
    assembly.check_forkable(parent_dir)
    config = assembly.saved_config(parent_dir, {})
    records = read_records(parent_dir)
    start = fork_start(records, at, session_id=parent_dir.name, model="", config=config.context, hint=hint)
    opened = assembly.open_session(parent_dir.parent, parent_dir.name)
    info = opened.info
    try:  # a damaged parent is refused before a cluster starts or anything is written
        opened.check_step(start.state.snapshot_step)
    except SandboxError as error:
        raise DamagedError(f"{error}; nothing was forked") from None
    finally:
        opened.close()
    record = batch_record(parent_dir)
    kept: dict[str, Any] = {}
    if record is not None:  # a task-run of a batch: the fork is the same task (reference, tags, tests)
        kept = {
            "reference": Path(record.reference) if record.reference else None,
            "tags": Tags(**record.tags),
            "read_only": record.read_only,
            "max_files": record.max_files,
            "max_lines": record.max_lines,
            "first_tools": record.first_tools,
        }
    name = record.key.task_id if record is not None else parent_dir.name[:60]
    task = Task(
        id=f"{name}-at-{at}",
        repo=Path(info.repo),
        task=start.state.task,
        fork=ForkFrom(folder=parent_dir, at=at, hint=hint),
        runs=runs,
        image=config.image,
        verify=config.verify,
        **kept,
    )
    models = list(models) or [config.model or ""]
    if not all(models):
        raise UsageError("the parent recorded no model: give one with --model")
    if REFERENCE_MODEL in models and task.reference is None:
        raise UsageError(no_reference([parent_dir.name]))
    defaults = TaskDefaults(model=models, agent=config.agent)  # a hosted parent's forks: its agent's (harness@ not)
    return TasksFile(source=SessionFolder(parent_dir).run_config, defaults=defaults, tasks=[task])


def batch_record(session_dir: Path) -> TaskRunRecord | None:
    """The record of the task-run a session folder belongs to, when it is one of a batch directory's
    `sessions/` (a fork of it keeps the task's reference, tags and tests)."""
    batch = session_dir.parent.parent
    if session_dir.parent.name != "sessions" or not (batch / "runs").is_dir():
        return None
    return next((r for r in BatchDir(batch).records() if r.session_id == session_dir.name), None)


PARENT = " (parent)"
"""What the parent's record adds to its model's name: the report shows it beside the forks."""


def record_parent(tasks: TasksFile, out: Path) -> None:
    """The parent's own record in the forks' batch directory (once; a parent without an outcome has
    none), so `harness report DIR` compares the forks with the run they continue."""
    task = tasks.tasks[0]
    assert task.fork is not None
    state = read_state(task.fork.folder, RunState)
    if state is None or state.result is None:
        return
    own = batch_record(task.fork.folder)  # a task-run's model as its batch named it (`reference:`, not the file)
    model = own.key.model if own else given_to(state.model, tasks.defaults.agent)
    key = TaskRunKey(task_id=task.id, model=f"{model}{PARENT}", run_index=0)
    batch = BatchDir(out)
    if batch.read(key) is not None:
        return
    spec = TaskRunSpec(key=key, task=task, defaults=tasks.defaults, sessions=task.fork.folder.parent, run_id="")
    batch.write(session_record(spec, task.fork.folder, state.result))
