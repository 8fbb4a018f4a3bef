""" "Done" is decided here: the verify command runs in the sandbox and only exit 0 counts.

The model's word that it is finished is never enough. A failed verification becomes a structured
message back to the model, and the set of failing tests is extracted so the loop's circuit breaker
can notice a model going round in circles.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict, Field

from harness.agent.protect import ProtectedChange, TreeReader, protected_changes
from sandbox.envelope import Envelope
from sandbox.spec import Mount, Sandbox, SandboxSpec

_PATTERNS = (
    # pytest's short summary: the node id (its parameters may hold spaces) up to " - message"
    re.compile(r"^(?:FAILED|ERROR)\s+(\S+?::[^\[\s]*(?:\[[^\]\n]*\])?|\S+\.py)(?: - .*)?$", re.MULTILINE),
    re.compile(r"^(?:FAIL|ERROR): (\S+ \([\w.]+\))", re.MULTILINE),  # unittest
    re.compile(r"^\s*--- FAIL: (\S+)", re.MULTILINE),  # go test
    re.compile(r"^\s*(?:✕|×) (.+?)(?: \(\d+ ?ms\))?$", re.MULTILINE),  # jest / vitest
    re.compile(r"^test (\S+) \.\.\. FAILED$", re.MULTILINE),  # cargo test
    re.compile(r"^\s*not ok \d+ - (.+?)(?: # .*)?$", re.MULTILINE),  # node --test (TAP)
    re.compile(r"^\s*✘ \[fail\]: (.+?)(?:  .*)?$", re.MULTILINE),  # ava
)
_MOCHA_FAILING = re.compile(r"^\s*\d+ failing$", re.MULTILINE)
_MOCHA_ENTRY = re.compile(r"^  \d+\) (.+)$", re.MULTILINE)
_TAIL_CHARS = 3000


class VerifyResult(BaseModel):
    """One verification round."""

    model_config = ConfigDict(extra="forbid")

    command: str
    passed: bool
    exit_code: int
    status: str
    failing: list[str] = Field(default_factory=list)
    """Sorted failing test ids; `exit N` when none could be parsed but the command failed."""
    output: str = ""
    """Tail of stdout+stderr, for the model and the trajectory."""
    duration_ms: int = 0
    protected: list[str] = Field(default_factory=list)
    """Changes the agent made to the protected set (attempted test edits): each fails verification."""
    rule: str = ""
    """The rule the tests that ran broke against the start state (fewer collected, more deselected,
    skipped or expected to fail); empty when none did, or when nothing could be counted."""
    counts: str = ""
    """What ran, as counted from the runner's summary (`12 passed, 1 skipped`); empty when not counted."""
    cause: str = ""
    """Why it failed when the output says more than the failing tests do: a dependency the tests could
    not import, and what would have installed it (see `missing_dependency`)."""


class TestCounts(BaseModel):
    """What a test run's summary line says ran (pytest, unittest, go test -v)."""

    model_config = ConfigDict(extra="forbid")
    __test__ = False  # not a pytest class, whatever its name

    runner: str
    passed: int = 0
    failed: int = 0
    errors: int = 0
    skipped: int = 0
    deselected: int = 0
    xfailed: int = 0
    xpassed: int = 0

    @property
    def collected(self) -> int:
        return self.passed + self.failed + self.errors + self.skipped + self.xfailed + self.xpassed

    def __str__(self) -> str:
        fields = ("passed", "failed", "errors", "skipped", "deselected", "xfailed", "xpassed")
        return ", ".join(f"{getattr(self, f)} {f}" for f in fields if getattr(self, f)) or "nothing ran"


_PYTEST_SUMMARY = re.compile(r"^[=\s]*(?:(?:\d+ [a-z]+,? ?)+|no tests ran)\s*(?:in [\d.]+s.*)?[=\s]*$", re.MULTILINE)
_PYTEST_COUNT = re.compile(r"(\d+) (passed|failed|errors?|skipped|deselected|xfailed|xpassed)\b")
_UNITTEST_RAN = re.compile(r"^Ran (\d+) tests? in ", re.MULTILINE)
_UNITTEST_RESULT = re.compile(r"^(OK|FAILED)(?: \((.*)\))?$", re.MULTILINE)
_GO = re.compile(r"^\s*--- (PASS|FAIL|SKIP): ", re.MULTILINE)


def summary_counts(text: str) -> TestCounts | None:
    """The counts of the last test-run summary in text, or None when no runner's summary is there."""
    lines = [
        m.group(0)
        for m in _PYTEST_SUMMARY.finditer(text)
        if _PYTEST_COUNT.search(m.group(0)) or "no tests ran" in m.group(0)
    ]
    if lines and " in " in lines[-1]:
        found = {
            kind.rstrip("s") if kind.startswith("error") else kind: int(n)
            for n, kind in _PYTEST_COUNT.findall(lines[-1])
        }
        return TestCounts(runner="pytest", **{("errors" if k == "error" else k): v for k, v in found.items()})
    ran, result = _UNITTEST_RAN.findall(text), _UNITTEST_RESULT.findall(text)
    if ran and result:
        detail = {key.strip(): value for key, value in re.findall(r"([a-z ]+)=(\d+)", result[-1][1])}
        failed, errors = int(detail.get("failures", 0)), int(detail.get("errors", 0))
        skipped, xfailed = int(detail.get("skipped", 0)), int(detail.get("expected failures", 0))
        xpassed = int(detail.get("unexpected successes", 0))
        passed = max(int(ran[-1]) - failed - errors - skipped - xfailed - xpassed, 0)
        return TestCounts(runner="unittest", passed=passed, failed=failed, errors=errors, skipped=skipped, xfailed=xfailed, xpassed=xpassed)  # fmt: skip
    go = _GO.findall(text)
    if go:
        return TestCounts(runner="go", passed=go.count("PASS"), failed=go.count("FAIL"), skipped=go.count("SKIP"))
    return None


def count_rule(start: TestCounts, now: TestCounts) -> str:
    """The first rule the tests that ran now break against those that ran at the start, or ''."""
    if start.runner != now.runner:
        return ""
    for what, before, after in (
        ("deselected", start.deselected, now.deselected),
        ("skipped", start.skipped, now.skipped),
        ("expected to fail (xfail)", start.xfailed + start.xpassed, now.xfailed + now.xpassed),
    ):
        if after > before:
            return f"{after - before} more test(s) {what} than at the start ({before} then, {after} now)"
    if now.collected < start.collected:
        return f"fewer tests ran ({now.collected}) than at the start ({start.collected})"
    return ""


def failing_tests(text: str) -> list[str]:
    """The failing test ids a test runner printed (pytest, unittest, go, jest, vitest, cargo, node's
    TAP, ava, mocha), sorted, unique."""
    found: set[str] = set()
    for pattern in _PATTERNS:
        found.update(match.group(1).strip() for match in pattern.finditer(text))
    return sorted(found | set(_mocha_failing(text)))


def _mocha_failing(text: str) -> list[str]:
    """The titles in mocha's list of failures (after `N failing`): each entry's describe blocks, then
    its test's title on the last line that ends with a colon."""
    summary = _MOCHA_FAILING.search(text)
    if summary is None:
        return []
    titles = []
    for entry in _MOCHA_ENTRY.finditer(text, summary.end()):
        lines = [entry.group(1).rstrip()]
        for line in [] if lines[0].endswith(":") else text[entry.end() + 1 :].splitlines():
            if not line.startswith("     ") or not line.strip():
                break
            lines.append(line.strip())
            if line.endswith(":"):
                break
        last = lines[-1]
        if last.endswith(":"):
            titles.append(last[:-1].strip())
    return titles


VERIFY_START = ".verify-start"
"""A folder of the state directory: what ran at a start state, counted once per start tree, image and
command (content-addressed, so every session of the same repository and a batch's reruns share it)."""
BYTECODE_ENV = ("PYTHONDONTWRITEBYTECODE=1",)
"""Verification writes no bytecode into the workspace; it reads none either, since the workspace it
runs on has its caches and `.pyc` files pruned (a planted unchecked-hash `.pyc` runs whatever its
source says). The image's own bytecode is kept: recompiling the test runner every time would cost
a second a round."""


class Verifier:
    """Runs the verify command in a fresh container over the session workspace; with a protection,
    against the protected set as it was at the start (see `Protection`)."""

    def __init__(
        self,
        sandbox: Sandbox,
        command: str,
        mounts: Sequence[Mount] = (),
        protection: Protection | None = None,
        setup: Sequence[str] = (),
    ) -> None:
        self.sandbox = sandbox
        self.command = command
        self.mounts = list(mounts)
        self.protection = protection
        self.setup = list(setup)
        """The session's setup commands (what a missing dependency's cause says was, or was not, run)."""

    def run(self, workspace: Path, spec: SandboxSpec) -> VerifyResult:
        if self.protection is None:
            result = self.once(workspace, spec)
        else:
            result = self.protection.verify(self.command, lambda: self.once(workspace, spec))
        if result.passed:
            return result
        return result.model_copy(update={"cause": missing_dependency(result.output, workspace, self.setup)})

    def once(self, workspace: Path, spec: SandboxSpec) -> VerifyResult:
        """The command once over the workspace as it is."""
        # Verification comes when the model says it is done: most often the run's last call.
        argv = ["/usr/bin/env", *BYTECODE_ENV, "/bin/sh", "-c", self.command]
        envelope = self.sandbox.run(argv, workspace=workspace, spec=spec, mounts=self.mounts, refill=False)
        return result_from_envelope(self.command, envelope)


class Trees(TreeReader, Protocol):
    """What verification needs of a session's stored trees (sandbox.session.Session has it all)."""

    @property
    def start_tree(self) -> str: ...

    def tree_now(self) -> str: ...

    def restore_tree(self, tree: str) -> None: ...

    def graft(self, tree: str, source: str, paths: list[str]) -> str: ...

    def prune(self, tree: str) -> str: ...


class Protection:
    """Verification that cannot be talked round. The workspace is put, for the length of the run, in
    the state the agent left with the protected set as it was at the start and without generated
    caches; any change to the protected set fails (an attempted test edit); what ran is counted and
    compared with what ran at the start (the start's count is taken once and kept in `baseline`);
    then the workspace is put back exactly as the agent left it."""

    def __init__(self, trees: Trees, read_only: Sequence[str], extra: Sequence[str], counted: Path, image: str) -> None:
        self.trees = trees
        self.read_only, self.extra = list(read_only), list(extra)
        self.counted, self.image = counted, image

    def verify(self, command: str, run: Callable[[], VerifyResult]) -> VerifyResult:
        start, final = self.trees.start_tree, self.trees.tree_now()
        changes = protected_changes(self.trees, start, final, self.read_only, self.extra)
        restored = [c.path for c in changes if c.restored]
        try:
            self.trees.restore_tree(self.trees.prune(self.trees.graft(final, start, restored)))
            result = run()
            counts = summary_counts(result.output)
            rule = ""
            if result.passed and counts is not None:
                at_start = self._start_counts(start, command, run)
                rule = count_rule(at_start, counts) if at_start is not None else ""
        finally:
            self.trees.restore_tree(final)
        return judged(result, changes, rule, counts)

    def _start_counts(self, start: str, command: str, run: Callable[[], VerifyResult]) -> TestCounts | None:
        """What ran at the start, counted once per start tree, image and command."""
        key = {"start": start, "image": self.image, "command": command}
        path = self.counted / (hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:32] + ".json")
        try:
            kept = json.loads(path.read_text())
            if kept.get("key") == key:
                return TestCounts(**kept["counts"]) if kept.get("counts") else None
        except (OSError, ValueError, TypeError):
            pass
        self.trees.restore_tree(self.trees.prune(start))
        counts = summary_counts(run().output)
        with contextlib.suppress(OSError):  # a cache: a count that cannot be kept is taken again next time
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_suffix(f".{os.getpid()}.tmp")
            temporary.write_text(json.dumps({"key": key, "counts": counts.model_dump() if counts else None}))
            os.replace(temporary, path)
        return counts


def judged(
    result: VerifyResult, changes: Sequence[ProtectedChange], rule: str, counts: TestCounts | None
) -> VerifyResult:
    """The result with the protected set's changes and the count rule applied: either fails it."""
    failing = [f"attempted test edit: {change}" for change in changes]
    if rule:
        failing.append(f"the tests that ran are not the start's: {rule}")
    update: dict[str, Any] = {
        "protected": [str(c) for c in changes],
        "rule": rule,
        "counts": str(counts) if counts else "",
    }
    if failing:
        update.update(passed=False, failing=[*failing, *result.failing])
    return result.model_copy(update=update)


MISSING = (
    re.compile(r"ModuleNotFoundError: No module named '([^']+)'"),
    re.compile(r"ImportError: No module named ([\w.]+)"),
    re.compile(r"Error: Cannot find module '([^']+)'"),
    re.compile(r"Cannot find package '([^']+)'"),
    re.compile(r"no required module provides package ([^\s;]+)"),
    re.compile(r"cannot find package \"([^\"]+)\""),
)
"""What a test runner prints when the code or its tests import what is not installed (Python, Node, Go)."""
DEPENDENCY_FILES = (
    "requirements.txt", "requirements-dev.txt", "requirements_dev.txt", "pyproject.toml", "setup.py", "setup.cfg",
    "Pipfile", "package.json", "go.mod", "Cargo.toml",
)  # fmt: skip


def missing_dependency(output: str, workspace: Path, setup: Sequence[str]) -> str:
    """One line when the output says the tests could not import something: what, and what would have
    installed it (the repository's dependency files and the setup that did or did not run); else ''."""
    for pattern in MISSING:
        found = pattern.search(output)
        if found:
            break
    else:
        return ""
    name = found.group(1).strip("'\"")
    files = [f for f in DEPENDENCY_FILES if (workspace / f).is_file()]
    if setup:
        fix = f"the session's setup (`{' && '.join(setup)[:200]}`) did not install it"
    elif files:
        fix = (
            f"no setup ran, and the repository declares its dependencies in {', '.join(files)}: "
            "--setup auto installs them (with --setup-network, or --allow-net for its registry)"
        )
    else:
        fix = "no setup ran: --setup 'COMMAND' installs it (with --setup-network)"
    return f"the tests cannot import {name!r} ({found.group(0).strip()[:200]}); {fix}"


def result_from_envelope(command: str, envelope: Envelope) -> VerifyResult:
    text = envelope.stdout + ("\n" + envelope.stderr if envelope.stderr else "")
    passed = envelope.exit_code == 0 and envelope.status == "ok"
    failing = [] if passed else (failing_tests(text) or [f"exit {envelope.exit_code} ({envelope.status})"])
    return VerifyResult(
        command=command,
        passed=passed,
        exit_code=envelope.exit_code,
        status=envelope.status,
        failing=failing,
        output=text[-_TAIL_CHARS:],
        duration_ms=envelope.duration_ms,
    )


def feedback(result: VerifyResult, round_number: int, max_rounds: int, layer: str = "verify") -> str:
    """The structured message a failed verification (or a failed check after it) sends the model."""
    what = "VERIFICATION FAILED" if layer == "verify" else f"CHECK FAILED ({layer}; the tests passed)"
    protected = (
        [
            "You changed files that decide which tests run and how (the tests and their configuration). "
            "Verification ran them as they were at the start; the task is not done while your changes to "
            "them remain. Undo these changes:"
        ]
        if result.protected
        else []
    )
    lines = [
        *protected,
        f"{what} (round {round_number} of {max_rounds}): `{result.command}` "
        f"exited {result.exit_code} (status {result.status}). The task is not done until it exits 0.",
        f"Failing ({len(result.failing)}):",
        *[f"- {name}" for name in result.failing[:50]],
        "Output (tail):",
        result.output.strip()[-_TAIL_CHARS:] or "(no output)",
        "Look at the failures, fix the code (not the tests), run the tests yourself, then end with your "
        'three-sentence account. If you cannot fix it, say "I am not sure" and explain why.',
    ]
    return "\n".join(lines)


NPM_PLACEHOLDER = "no test specified"


def detect_verify(repo: Path) -> tuple[str, str] | None:
    """(command, why) of the test command a repository's layout names, or None. Only regular files
    are read (never through a symlink), and only small ones: the repository is untrusted."""
    from harness.environment.detect import manifest

    root = Path(repo)

    def text(name: str) -> str | None:
        return manifest(root, name)

    python_tests = _python_tests(root)
    pytest_config = next(
        (n for n in ("pytest.ini", "pyproject.toml", "setup.cfg", "tox.ini") if "pytest" in (text(n) or "")), None
    )
    if python_tests or pytest_config:
        found = [f for f in (python_tests, pytest_config) if f]
        return "python3 -m pytest -q", f"Python tests ({' and '.join(found)})"
    package = text("package.json")
    if package:
        import json

        try:
            scripts = json.loads(package).get("scripts") or {}
        except (ValueError, AttributeError):
            scripts = {}
        test = scripts.get("test") if isinstance(scripts, dict) else None
        if isinstance(test, str) and test.strip() and NPM_PLACEHOLDER not in test:
            return "npm test --silent", "package.json has a test script"
    if text("go.mod") is not None:
        return "go test ./...", "go.mod"
    if text("Cargo.toml") is not None:
        return "cargo test", "Cargo.toml"
    makefile = text("Makefile") or text("makefile")
    if makefile and any(line.startswith("test:") for line in makefile.splitlines()):
        return "make test", "the Makefile has a test target"
    return None


def _python_tests(root: Path) -> str | None:
    for folder in ("tests", "test"):
        directory = root / folder
        if directory.is_dir() and not directory.is_symlink():
            try:
                names = [entry.name for entry in directory.iterdir()][:5000]
            except OSError:
                continue
            if any(n.endswith(".py") and (n.startswith("test_") or n.endswith("_test.py")) for n in names):
                return f"{folder}/test_*.py"
    return None
