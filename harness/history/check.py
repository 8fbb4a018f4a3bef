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
from harness.config import RunConfig
from harness.errors import HarnessError
from harness.history import environment
from harness.history.diagnose import diagnose
from harness.history.materialize import read_yield
from harness.history.runners import deciding, narrowed, runner_of, same_failure
from harness.trajectory import VerifyRecord, read_records
from sandbox.errors import SandboxError
from sandbox.exit_code import ExitCode
from sandbox.tree import remove_tree

START_PROBLEMS = frozenset({"network", "read_only", "no_tests", "runner_missing", "needs_modules"})
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
    read_only, collection_error, no_tests, runner_missing, needs_modules (Go modules never downloaded),
    fails_either_way (the same tests fail at the start and after the reference: the environment breaks them),
    timeout, setup_failed, environment_mismatch
    (it failed, and the image's interpreter or toolchain does not meet what the commit declares),
    no_reference, no_verify."""
    evidence: str = ""
    """The line of the runner's output (or the error) that decided it."""
    phase: str = ""
    """Where it was found: `start` (the task's start state) or `reference` (after the reference change)."""
    image: str = ""
    """The image the task was checked in (another than its own when --env-images picked one)."""
    verify: str = ""
    """The verify command the task is sound with when it is not its own: the tests that fail at the
    start and after the reference alike (broken by the environment, not judging the change) left out."""
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
    # Many short sessions at once and nobody waiting on one call: paced as a batch's (one warm
    # container each, more only when a call finds none), not as a person's run (POOL_SIZE each, most
    # of them removed unused after a verify or two: engine CPU the other sessions needed).
    runtime = replace(runtime, pace="throughput")
    scratch = Path(tempfile.mkdtemp(prefix="harness-check-"))
    toolchains = Environments(runtime, env_images, build_envs, log)
    stopped: list[BaseException] = []
    total = len(tasks.tasks)
    try:

        def one(numbered: tuple[int, Task]) -> Verdict | None:
            number, task = numbered
            if stopped:  # the machine failed a task: every other one would fail the same way
                return None
            log(f"checking {task.id} ({number} of {total})")
            try:
                verdict = check_in_environment(task, tasks, scratch, runtime, toolchains)
            except MachineFailure as failure:
                stopped.append(failure.error)
                return None
            on_verdict(verdict)
            return verdict

        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            found = list(pool.map(one, enumerate(tasks.tasks, start=1)))
        if stopped:
            raise stopped[0]
        return [verdict for verdict in found if verdict is not None]
    finally:
        _keep_logs(scratch)


class MachineFailure(Exception):
    """A task's check failed for a reason of this machine's (an image missing, the engine gone, a disk
    full), the same for every task: the check stops at the first and says it once."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


MACHINE_CODES = frozenset({ExitCode.IMAGE_MISSING, ExitCode.RUNTIME_MISSING, ExitCode.STORAGE, ExitCode.SANDBOX})
"""The exit codes of errors that are the machine's, not a task's (see MachineFailure)."""


def _keep_logs(scratch: Path) -> None:
    """Remove the check's sessions, keeping the setup logs its verdicts name (`<id>.setup.log`, in the
    scratch folder or its second tries' `.era`); the folder goes when it keeps none."""
    era = scratch / ".era"
    for folder in (era, scratch):
        if not folder.is_dir():
            continue
        for child in folder.iterdir():
            if child == era or (child.is_file() and child.name.endswith(".setup.log")):
                continue
            if child.is_dir():
                remove_tree(child)
            else:
                child.unlink(missing_ok=True)
    for folder in (era, scratch):
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()


ERA_KINDS = frozenset({"fails_after_reference", "fails_either_way", "collection_error", "missing_module"})
"""Failures an interpreter newer than the commit explains (a removed module, a changed signature)."""


def check_in_environment(
    task: Task,
    tasks: TasksFile,
    sessions: Path,
    runtime: assembly.Runtime,
    toolchains: Environments,
) -> Verdict:
    """check_task in an image that meets what the task's commit declares (its own, else the first
    candidate that does, else one built for it when allowed); a failure with the declaration unmet
    is named for it. A task that fails so, in an image whose interpreter is newer than its commit,
    is tried once more in an environment of the commit's time (picked, or built with --build-envs)."""
    verdict = _in_declared(task, tasks, sessions, runtime, toolchains)
    if verdict.sound or verdict.kind not in ERA_KINDS:
        return verdict
    return _of_its_time(task, tasks, sessions, runtime, toolchains, verdict) or verdict


def _of_its_time(
    task: Task, tasks: TasksFile, sessions: Path, runtime: assembly.Runtime, toolchains: Environments, verdict: Verdict
) -> Verdict | None:
    tags = task.tags.model_extra or {}
    language, date = str(tags.get("language") or ""), str(tags.get("date") or "")
    image = verdict.image or task.image or tasks.defaults.image
    version = toolchains.version(image, language) if language else None
    older = environment.older_than(language, version, date)
    if older is None:
        return None
    versions = {other: toolchains.version(other, language) for other in toolchains.candidates(language)}
    chosen = environment.pick(language, older, versions, [])
    if chosen is None and toolchains.can_build:
        try:
            built = toolchains.build(language, older)
        except (HarnessError, SandboxError):
            return None
        if built is not None:
            versions[built] = toolchains.version(built, language)
            chosen = environment.pick(language, older, {built: versions[built] or ""}, [])
    if chosen is None:
        return None
    again = check_task(task.model_copy(update={"image": chosen}), tasks, scratch_of(sessions, "era"), runtime)
    if not again.sound:
        return None
    told = f"{language} {versions.get(chosen)} in {chosen}: the commit ({date}) is older than {language} {version} of {image}"
    return replace(again, image=chosen, environment=told, reason=f"{again.reason} (in an environment of its time)")


def scratch_of(sessions: Path, name: str) -> Path:
    """A folder beside the check's sessions for a second try (its session ids do not clash)."""
    folder = sessions / f".{name}"
    folder.mkdir(exist_ok=True)
    return folder


def _in_declared(
    task: Task,
    tasks: TasksFile,
    sessions: Path,
    runtime: assembly.Runtime,
    toolchains: Environments,
) -> Verdict:
    """check_task in the image the task's declaration asks for (see check_in_environment)."""
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


def reference_config(task: Task, tasks: TasksFile, sessions: Path, runtime: assembly.Runtime) -> RunConfig:
    """The config a task runs with under the `reference:` model, as a batch would run it, but for the
    model's reads and test run: `reference-change:` makes the change through the same tools and the
    verify decides (a careful model's reads and test run would change no verdict)."""
    spec = TaskRunSpec(
        key=TaskRunKey(task_id=task.id, model=REFERENCE_MODEL, run_index=0),
        task=task,
        defaults=tasks.defaults,
        sessions=sessions,
        run_id=runtime.run_id,
    )
    config = run_config(spec)
    reference = (config.model or "").removeprefix("reference:")
    return config.model_copy(update={"model": f"reference-change:{reference}"})


def check_task(task: Task, tasks: TasksFile, sessions: Path, runtime: assembly.Runtime) -> Verdict:
    if task.reference is None:
        return Verdict(task.id, False, "no reference (only mined tasks have one)", "no_reference")
    try:
        config = reference_config(task, tasks, sessions, runtime)
        if not config.verify:
            return Verdict(task.id, False, "no verify command", "no_verify")
        start = assembly.verify_once(task.repo, config, sessions, runtime, f"{task.id}-start")
        problem = _start_problem(task.id, start)
        if problem is not None:
            return problem
        result = assembly.start_run(task.repo, task.task, config, sessions, runtime, f"{task.id}-reference")
    except (HarnessError, SandboxError) as error:
        if getattr(error, "exit_code", None) in MACHINE_CODES:
            raise MachineFailure(error) from None
        first = str(error).splitlines()[0]
        return Verdict(task.id, False, f"cannot be built: {first}", "setup_failed", first, "start")
    if result.outcome == "verified":
        return Verdict(task.id, True, "sound")
    if result.limit == "wall_clock":
        return Verdict(task.id, False, "times out with the reference change", "timeout", phase="reference")
    last = _last_verify(sessions / f"{task.id}-reference")
    either = _without_broken(task, config.verify, start, last, tasks, sessions, runtime)
    if either is not None and either.sound:
        return either
    found = diagnose(last.output if last else "", last.exit_code if last else 0) if last else None
    if found is not None:  # a cause with a name (a module, the network) before "the same at both ends"
        return Verdict(
            task.id, False, f"{found.reason}, after the reference change", found.kind, found.line, "reference"
        )
    if either is not None:
        return either
    evidence = [str(item) for item in result.evidence] if isinstance(result.evidence, list) else []
    line = deciding(last.output, runner_of(config.verify or "")) if last else ""
    named = [item for item in evidence if not item.startswith("exit ")]
    if named:
        detail = ": " + ", ".join(named[:3])
    elif line:  # no test named: the line that decided it, not only its exit code
        detail = f" ({', '.join(evidence) or result.outcome}): {line}"
    else:
        detail = f" ({result.outcome}: {result.detail})"
    reason = f"fails after the reference{detail}".splitlines()[0]
    return Verdict(task.id, False, reason, "fails_after_reference", line, "reference")


def _without_broken(
    task: Task,
    verify: str,
    start: VerifyResult,
    last: VerifyRecord | None,
    tasks: TasksFile,
    sessions: Path,
    runtime: assembly.Runtime,
) -> Verdict | None:
    """For a task the reference change did not make pass, what the two ends say, for any runner: the
    same failure at both ends (the same tests, or the same deciding line when no test is named: a
    toolchain that refuses the commit, dependencies that changed since) is `fails_either_way`; every
    test that fails after the reference failed the same way at the start too, and others fail only at
    the start (they judge the change), is a sound task with a narrower verify, the broken ones left
    out by name as the runner takes them (tried again at both ends, in new sessions). None when neither
    holds: the change is judged, and found wanting."""
    if last is None or not start.failing or not last.failing:
        return None
    runner = runner_of(verify)
    at_start, after = set(start.failing), set(last.failing)
    named = all(_one_test(name, runner) for name in at_start | after)
    if not named:
        if at_start != after or not same_failure(start.output, last.output, runner):
            return None
        line = deciding(last.output, runner)
        reason = f"fails the same way at the start and after the reference (not by the change): {line}"
        if "go.mod file not found" in line:
            reason += " (the commit is from before Go modules; a verify that makes it one first, such as "
            reason += "`go mod init MODULE >/dev/null 2>&1; go test ./...`, can test it)"
        return Verdict(task.id, False, reason, "fails_either_way", line, "reference")
    if not after <= at_start:
        return None
    if runner == "pytest":
        said_then, said_now = _summary(start.output), _summary(last.output)
        if any(name not in said_then or said_then[name] != said_now.get(name) for name in after):
            return None  # failing otherwise after the reference: the change is judged, and found wanting
    broken = sorted(after)
    shown = ", ".join(broken[:3]) + (f" and {len(broken) - 3} more" if len(broken) > 3 else "")
    if at_start == after:  # nothing fails only at the start: no test judges the change here
        if runner != "pytest" and not same_failure(start.output, last.output, runner):
            return None
        reason = f"the same tests fail the same way at the start and after the reference (not by the change): {shown}"
        return Verdict(task.id, False, reason, "fails_either_way", shown, "reference")
    cannot = (
        f"every test that fails after the reference failed the same way at the start (the environment breaks "
        f"them, not the change: {shown}), and the others now pass; "
    )
    narrower = narrowed(verify, runner, broken, start.output)
    if narrower is None:
        why = f"{runner or 'its runner'} cannot leave tests out by name"
        return Verdict(task.id, False, cannot + why, "fails_either_way", shown, "reference")
    task = task.model_copy(update={"verify": narrower})
    try:
        config = reference_config(task, tasks, sessions, runtime)
        again = assembly.verify_once(task.repo, config, sessions, runtime, f"{task.id}-start-narrowed")
        refused = _UNKNOWN_FLAG.search(again.output)
        if refused:  # the runner's version has no such flag (go test -skip came with Go 1.20)
            why = f"this toolchain cannot leave them out ({refused.group().strip()})"
            return Verdict(task.id, False, cannot + why, "fails_either_way", shown, "reference")
        if again.passed or _start_problem(task.id, again) is not None:
            return None
        result = assembly.start_run(task.repo, task.task, config, sessions, runtime, f"{task.id}-reference-narrowed")
    except (HarnessError, SandboxError):
        return None
    if result.outcome != "verified":
        return None
    reason = f"sound without {len(broken)} test(s) that fail at the start and after the reference alike: {shown}"
    return Verdict(task.id, True, reason, "sound", shown, "reference", verify=narrower)


_UNKNOWN_FLAG = re.compile(
    r"(flag provided but not defined: -\S+|error: Unrecognized option: '\S+'|unknown option '\S+')"
)


def _one_test(name: str, runner: str) -> bool:
    """A runner's name of one test, not `exit N` (nor, for pytest, a file that did not collect)."""
    return not name.startswith("exit ") and ("::" in name if runner == "pytest" else True)


_SUMMARY = re.compile(r"^(?:FAILED|ERROR) (\S+?)(?: - (.*))?$", re.MULTILINE)


def _summary(output: str) -> dict[str, str]:
    """pytest's short summary: each failing test's id and how it failed (`AssertionError: ...`); a
    test that fails the same way before and after the change is broken by something else."""
    return {found.group(1): (found.group(2) or "").strip() for found in _SUMMARY.finditer(output or "")}


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
