"""`harness tasks check`: build each task in the real sandbox and keep only the sound ones, those
whose verify command fails at the start state and passes once the reference change is made (by the
`reference:` model, through the normal tools, as a batch would run it)."""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from harness import assembly
from harness.agent.verify import VerifyResult
from harness.batch.records import TaskRunKey
from harness.batch.tasks import Task, TasksFile
from harness.batch.worker import REFERENCE_MODEL, TaskRunSpec, run_config
from harness.errors import HarnessError
from sandbox.errors import SandboxError
from sandbox.tree import remove_tree

NETWORK = re.compile(
    r"(temporary failure in name resolution|name or service not known|network is unreachable|"
    r"could not resolve host|failed to establish a new connection|nodename nor servname|"
    r"connection refused.*(pypi|registry|github)|no matching distribution found)",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Verdict:
    task_id: str
    sound: bool
    reason: str
    """Why not (passes already, fails after the reference, needs network, times out, ...), or "sound"."""


def check(
    tasks: TasksFile,
    runtime: assembly.Runtime,
    *,
    workers: int = 2,
    on_verdict: Callable[[Verdict], None] = lambda verdict: None,
) -> list[Verdict]:
    """Every task's verdict, in the file's order (sessions in a scratch directory removed after)."""
    scratch = Path(tempfile.mkdtemp(prefix="harness-check-"))
    try:

        def one(task: Task) -> Verdict:
            verdict = check_task(task, tasks, scratch, runtime)
            on_verdict(verdict)
            return verdict

        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            return list(pool.map(one, tasks.tasks))
    finally:
        remove_tree(scratch)


def check_task(task: Task, tasks: TasksFile, sessions: Path, runtime: assembly.Runtime) -> Verdict:
    if task.reference is None:
        return Verdict(task.id, False, "no reference (only mined tasks have one)")
    spec = TaskRunSpec(
        key=TaskRunKey(task_id=task.id, model=REFERENCE_MODEL, run_index=0),
        task=task,
        defaults=tasks.defaults,
        sessions=sessions,
        run_id=runtime.run_id,
    )
    try:
        config = run_config(spec)
        if not config.verify:
            return Verdict(task.id, False, "no verify command")
        start = assembly.verify_once(task.repo, config, sessions, runtime, f"{task.id}-start")
        problem = _start_problem(start)
        if problem:
            return Verdict(task.id, False, problem)
        result = assembly.start_run(task.repo, task.task, config, sessions, runtime, f"{task.id}-reference")
    except (HarnessError, SandboxError) as error:
        return Verdict(task.id, False, f"cannot be built: {error}".splitlines()[0])
    if result.outcome == "verified":
        return Verdict(task.id, True, "sound")
    if result.limit == "wall_clock":
        return Verdict(task.id, False, "times out with the reference change")
    folder = sessions / f"{task.id}-reference"
    text = (folder / "trajectory.jsonl").read_text(encoding="utf-8", errors="replace") if folder.is_dir() else ""
    if NETWORK.search(text):
        return Verdict(task.id, False, "needs network (the tests try to reach it after the reference change)")
    failing = ", ".join(result.evidence[:3]) if isinstance(result.evidence, list) else ""
    detail = f": {failing}" if failing else f" ({result.outcome}: {result.detail})"
    return Verdict(task.id, False, f"fails after the reference{detail}".splitlines()[0])


def _start_problem(result: VerifyResult) -> str:
    if result.passed:
        return "passes already at the start state (the tests do not check the change)"
    if result.status == "timeout":
        return "times out at the start state"
    if NETWORK.search(result.output):
        return "needs network (the tests try to reach it)"
    if result.exit_code in (126, 127) and "not found" in result.output:
        return f"the verify command cannot run: {result.output.strip().splitlines()[-1][:200]}"
    return ""
