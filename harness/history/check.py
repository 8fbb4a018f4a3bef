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
from harness.history.diagnose import diagnose
from harness.trajectory import VerifyRecord, read_records
from sandbox.errors import SandboxError
from sandbox.tree import remove_tree

START_PROBLEMS = frozenset({"network", "read_only", "no_tests", "runner_missing"})
"""What, at the start state, says the tests cannot judge at all (a missing name or a collection error
there is the expected failure of a test added with its feature)."""


@dataclass(frozen=True)
class Verdict:
    task_id: str
    sound: bool
    reason: str
    """Why not (passes already, fails after the reference, needs a module, cannot be collected, needs
    network, times out, ...), or "sound"."""
    kind: str = "sound"
    """The reason in a word: sound, passes_at_start, fails_after_reference, missing_module, network,
    read_only, collection_error, no_tests, runner_missing, timeout, setup_failed, no_reference, no_verify."""
    evidence: str = ""
    """The line of the runner's output (or the error) that decided it."""
    phase: str = ""
    """Where it was found: `start` (the task's start state) or `reference` (after the reference change)."""


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
        return Verdict(task.id, False, "no reference (only mined tasks have one)", "no_reference")
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
            return Verdict(task.id, False, "no verify command", "no_verify")
        start = assembly.verify_once(task.repo, config, sessions, runtime, f"{task.id}-start")
        problem = _start_problem(task.id, start)
        if problem is not None:
            return problem
        result = assembly.start_run(task.repo, task.task, config, sessions, runtime, f"{task.id}-reference")
    except (HarnessError, SandboxError) as error:
        first = str(error).splitlines()[0]
        return Verdict(task.id, False, f"cannot be built: {first}", "setup_failed", first, "start")
    if result.outcome == "verified":
        return Verdict(task.id, True, "sound")
    if result.limit == "wall_clock":
        return Verdict(task.id, False, "times out with the reference change", "timeout", phase="reference")
    last = _last_verify(sessions / f"{task.id}-reference")
    found = diagnose(last.output if last else "", last.exit_code if last else 0) if last else None
    if found is not None:
        return Verdict(
            task.id, False, f"{found.reason}, after the reference change", found.kind, found.line, "reference"
        )
    failing = ", ".join(result.evidence[:3]) if isinstance(result.evidence, list) else ""
    detail = f": {failing}" if failing else f" ({result.outcome}: {result.detail})"
    reason = f"fails after the reference{detail}".splitlines()[0]
    return Verdict(task.id, False, reason, "fails_after_reference", _deciding(last.output) if last else "", "reference")


def _start_problem(task_id: str, result: VerifyResult) -> Verdict | None:
    """Why the start state cannot make a task: it passes already, or the tests cannot judge at all."""
    if result.passed:
        return Verdict(
            task_id, False, "passes already at the start state (the tests do not check the change)", "passes_at_start",
            result.counts, "start",
        )  # fmt: skip
    if result.status == "timeout":
        return Verdict(task_id, False, "times out at the start state", "timeout", phase="start")
    found = diagnose(result.output, result.exit_code)
    if found is not None and found.kind in START_PROBLEMS:
        return Verdict(task_id, False, f"{found.reason}, at the start state", found.kind, found.line, "start")
    return None  # an import or collection error at the start is how a test of code not yet written fails


def _last_verify(folder: Path) -> VerifyRecord | None:
    if not folder.is_dir():
        return None
    records = [r for r in read_records(folder) if isinstance(r, VerifyRecord)]
    return records[-1] if records else None


def _deciding(output: str) -> str:
    """The last line that names a failure or an error (what a person would quote)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    wanted = [line for line in lines if re.search(r"(FAILED|ERROR|Error|failed|--- FAIL)", line)]
    return (wanted or lines or [""])[-1][:300]
