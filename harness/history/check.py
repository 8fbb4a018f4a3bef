"""`harness tasks check`: build each task in the real sandbox and keep only the sound ones, those
whose verify command fails at the start state and passes once the reference change is made (by the
`reference:` model, through the normal tools, as a batch would run it)."""

from __future__ import annotations

import re
import tempfile
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from harness import assembly
from harness.agent.verify import VerifyResult
from harness.batch.records import TaskRunKey
from harness.batch.tasks import Task, TasksFile
from harness.batch.worker import REFERENCE_MODEL, TaskRunSpec, run_config
from harness.errors import HarnessError
from harness.history import environment
from harness.history.diagnose import diagnose
from harness.history.materialize import read_yield
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
    read_only, collection_error, no_tests, runner_missing, timeout, setup_failed, environment_mismatch
    (it failed, and the image's interpreter or toolchain does not meet what the commit declares),
    no_reference, no_verify."""
    evidence: str = ""
    """The line of the runner's output (or the error) that decided it."""
    phase: str = ""
    """Where it was found: `start` (the task's start state) or `reference` (after the reference change)."""
    image: str = ""
    """The image the task was checked in (another than its own when --env-images picked one)."""
    environment: str = ""
    """The image's toolchain against what the commit declares (`python 3.11.2; declares <3.10 in
    pyproject.toml:project.requires-python: not met`), when it declares something."""


MISMATCH_KINDS = frozenset(
    {"fails_after_reference", "missing_module", "collection_error", "no_tests", "runner_missing", "setup_failed"}
)
"""Failures that an unmet declaration (interpreter or toolchain too old or too new) explains first."""


class Environments:
    """The images a task can run in, by what they have: each image's version of a language's toolchain
    (probed once per check, in a call container), the images to pick from (--env-images and the
    environments built before on this engine), and environments built on demand (--build-envs)."""

    def __init__(
        self,
        runtime: assembly.Runtime,
        images: Sequence[str] = (),
        build: bool = False,
        log: Callable[[str], None] = lambda text: None,
    ) -> None:
        self._runtime, self._images, self.can_build, self._log = runtime, list(images), build, log
        self._known: dict[tuple[str, str], str | None] = {}
        self._built: dict[tuple[str, str], str | None] = {}
        self._local: dict[str, str] | None = None
        self._lock = threading.Lock()
        self._building = threading.Lock()

    def version(self, image: str, language: str) -> str | None:
        """The image's version of the language's toolchain; "" when it has none; None when the probe
        failed twice (then nothing is decided on it: no pick, no build)."""
        key = (image, language)
        with self._lock:
            if key in self._known:
                return self._known[key]
        argv = environment.VERSION_COMMANDS.get(language)
        printed: str | None = None
        for _ in range(2):
            try:
                printed = (
                    assembly.engine.toolchain_version(self._runtime.docker_host, self._runtime.run_id, image, argv)
                    if argv
                    else ""
                )
            except (HarnessError, SandboxError):
                printed = None
            if printed is not None:
                break
        with self._lock:
            self._known[key] = None if printed is None else environment.normalize(language, printed)
            return self._known[key]

    def candidates(self, language: str) -> list[str]:
        """--env-images, then the environments built for language on this engine before."""
        with self._lock:
            if self._local is None:
                try:
                    self._local = assembly.engine.env_images(self._runtime.docker_host)
                except (HarnessError, SandboxError):
                    self._local = {}
            local = [tag for tag, built_for in sorted(self._local.items()) if built_for == language]
        return list(dict.fromkeys([*self._images, *local]))

    def build(self, language: str, requires: str) -> str | None:
        """An environment from the Debian release whose toolchain meets requires (built once per
        check and found by its tag after), or None when no release has one."""
        release = environment.release_for(language, requires)
        if release is None:
            return None
        with self._building:
            if (language, release) not in self._built:
                self._log(f"building a {language} environment from Debian {release} for {requires}")
                self._built[(language, release)] = assembly.engine.build_env(
                    self._runtime.docker_host, language, release, self._log
                )
            return self._built[(language, release)]


def check(
    tasks: TasksFile,
    runtime: assembly.Runtime,
    *,
    workers: int = 2,
    env_images: Sequence[str] = (),
    build_envs: bool = False,
    on_verdict: Callable[[Verdict], None] = lambda verdict: None,
    log: Callable[[str], None] = lambda text: None,
) -> list[Verdict]:
    """Every task's verdict, in the file's order (sessions in a scratch directory removed after).
    env_images: images to pick from when a task's own does not meet what its commit declares;
    build_envs: build one from a Debian release that has it when none does."""
    scratch = Path(tempfile.mkdtemp(prefix="harness-check-"))
    toolchains = Environments(runtime, env_images, build_envs, log)
    try:

        def one(task: Task) -> Verdict:
            verdict = check_in_environment(task, tasks, scratch, runtime, toolchains)
            on_verdict(verdict)
            return verdict

        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            return list(pool.map(one, tasks.tasks))
    finally:
        remove_tree(scratch)


def check_in_environment(
    task: Task,
    tasks: TasksFile,
    sessions: Path,
    runtime: assembly.Runtime,
    toolchains: Environments,
) -> Verdict:
    """check_task in an image that meets what the task's commit declares (its own, else the first
    candidate that does, else one built for it when allowed); a failure with the declaration unmet
    is named for it."""
    image = task.image or tasks.defaults.image
    wanted = (task.tags.model_extra or {}).get("environment")
    if not isinstance(wanted, dict) or not wanted.get("requires") or not wanted.get("language"):
        return replace(check_task(task, tasks, sessions, runtime), image=image)
    language, requires, source = str(wanted["language"]), str(wanted["requires"]), str(wanted.get("source", ""))
    versions = {image: toolchains.version(image, language)}
    own = versions[image]
    met = environment.satisfies(language, own, requires) if own else (None if own is None else False)
    if met is False:
        versions.update({other: toolchains.version(other, language) for other in toolchains.candidates(language)})
        chosen = environment.pick(language, requires, versions, [image])
        if chosen is None and toolchains.can_build:
            try:
                built = toolchains.build(language, requires)
            except (HarnessError, SandboxError) as error:
                first = str(error).splitlines()[0]
                return Verdict(task.id, False, f"cannot build an environment: {first}", "setup_failed", first, "start")
            if built is not None:
                versions[built] = toolchains.version(built, language)
                chosen = environment.pick(language, requires, {built: versions[built] or ""}, [])
        if chosen is not None:
            image, met = chosen, True
            task = task.model_copy(update={"image": chosen})
    said = {True: "met", False: "not met", None: "cannot tell"}[met]
    having = (
        f"{language} {versions[image]}" if versions[image] else f"no {language}" if met is False else "(probe failed)"
    )
    described = f"{having} in {image}; declares {requires} ({source}): {said}"
    verdict = replace(check_task(task, tasks, sessions, runtime), image=image, environment=described)
    if met is False and not verdict.sound and verdict.kind in MISMATCH_KINDS:
        having = (
            f"the image's {language} {versions[image]}" if versions[image] else f"the image {image} has no {language}"
        )
        reason = f"{verdict.reason}; {having}, which does not meet {requires} ({source})"
        return replace(verdict, kind="environment_mismatch", reason=reason)
    return verdict


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


def yield_report(tasks: TasksFile, verdicts: list[Verdict]) -> dict[str, Any]:
    """Per repository and per language: commits scanned, tasks made, sound, rejected by reason (the
    mining half from each states directory's mined.json, the checking half from the verdicts)."""
    by_id = {task.id: task for task in tasks.tasks}
    repositories: dict[str, dict[str, Any]] = {}
    languages: dict[str, dict[str, Any]] = {}
    for verdict in verdicts:
        task = by_id[verdict.task_id]
        states = Path(task.repo).parent.parent
        mined = read_yield(states) or {}
        name = str(mined.get("repository") or states)
        repository = repositories.setdefault(
            name,
            {
                "repository": name,
                "scanned": mined.get("scanned"),
                "merges": mined.get("merges"),
                "mined": mined.get("tasks"),
                "skipped_by_reason": mined.get("skipped_by_reason", {}),
                "checked": 0,
                "sound": 0,
                "rejected_by_kind": {},
                "by_language": {},
            },
        )
        language = str((task.tags.model_extra or {}).get("language") or "unknown")
        for row in (
            repository,
            repository["by_language"].setdefault(language, _row()),
            languages.setdefault(language, _row()),
        ):
            row["checked"] += 1
            row["sound"] += verdict.sound
            if not verdict.sound:
                row["rejected_by_kind"][verdict.kind] = row["rejected_by_kind"].get(verdict.kind, 0) + 1
    for row in [*repositories.values(), *languages.values()]:
        row["sound_rate"] = round(row["sound"] / row["checked"], 3) if row["checked"] else None
    total = _row()
    total["checked"], total["sound"] = len(verdicts), sum(v.sound for v in verdicts)
    total["sound_rate"] = round(total["sound"] / total["checked"], 3) if verdicts else None
    for verdict in verdicts:
        if not verdict.sound:
            total["rejected_by_kind"][verdict.kind] = total["rejected_by_kind"].get(verdict.kind, 0) + 1
    return {"repositories": list(repositories.values()), "by_language": languages, "total": total}


def _row() -> dict[str, Any]:
    return {"checked": 0, "sound": 0, "rejected_by_kind": {}}
