""" "Done" is decided here: the verify command runs in the sandbox and only exit 0 counts.

The model's word that it is finished is never enough. A failed verification becomes a structured
message back to the model, and the set of failing tests is extracted so the loop's circuit breaker
can notice a model going round in circles.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from sandbox.envelope import Envelope
from sandbox.spec import Mount, Sandbox, SandboxSpec

_PATTERNS = (
    re.compile(r"^(?:FAILED|ERROR)\s+(\S+::\S+|\S+\.py)", re.MULTILINE),  # pytest short summary
    re.compile(r"^(?:FAIL|ERROR): (\S+ \([\w.]+\))", re.MULTILINE),  # unittest
    re.compile(r"^\s*--- FAIL: (\S+)", re.MULTILINE),  # go test
    re.compile(r"^\s*(?:✕|×) (.+?)(?: \(\d+ ?ms\))?$", re.MULTILINE),  # jest / vitest
)
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


def failing_tests(text: str) -> list[str]:
    """The failing test ids a test runner printed (pytest, unittest, go, jest), sorted, unique."""
    found: set[str] = set()
    for pattern in _PATTERNS:
        found.update(match.group(1).strip() for match in pattern.finditer(text))
    return sorted(found)


class Verifier:
    """Runs the verify command in a fresh container over the session workspace."""

    def __init__(self, sandbox: Sandbox, command: str, mounts: Sequence[Mount] = ()) -> None:
        self.sandbox = sandbox
        self.command = command
        self.mounts = list(mounts)

    def run(self, workspace: Path, spec: SandboxSpec) -> VerifyResult:
        # Verification comes when the model says it is done: most often the run's last call.
        envelope = self.sandbox.run(
            ["/bin/sh", "-c", self.command], workspace=workspace, spec=spec, mounts=self.mounts, refill=False
        )
        return result_from_envelope(self.command, envelope)


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
    lines = [
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
    from harness.detect import manifest

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
