"""What a task-run's patch did, read from the patch text alone: files touched, lines changed, test
files edited, assertions removed from tests (a suite that went green because an assert was deleted
is no completion)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import pathspec

from harness.agent.protected import PROTECTED_FILES

_FILE = re.compile(r"^diff --git a/(.+?) b/(.+)$")
_TESTISH = re.compile(r"(^|/)(tests?|spec|__tests__)/|(^|/)test_[^/]*\.py$|_test\.(py|go|rs)$|\.(test|spec)\.[jt]sx?$")
_ASSERT = re.compile(r"\b(assert|expect\(|assertEqual|assert_eq!|t\.Error|self\.assert)")


@dataclass(kw_only=True)
class PatchStats:
    """Counts of one patch."""

    files: list[str] = field(default_factory=list)
    lines_changed: int = 0
    test_files: list[str] = field(default_factory=list)
    """Edited files that are tests (the task's read-only paths, or test-looking names)."""
    removed_assertions: int = 0
    test_config: list[str] = field(default_factory=list)
    """Edited files that configure how tests are found and run (pytest.ini, conftest.py, ...)."""


def patch_stats(patch: str | None, read_only: Sequence[str] = ("tests/",)) -> PatchStats:
    """The counts of a unified (git) patch; an empty or missing patch counts nothing."""
    if not patch:
        return PatchStats()
    spec = pathspec.PathSpec.from_lines("gitignore", list(read_only))
    files: list[str] = []
    changed = removed_asserts = 0
    current = ""
    for line in patch.splitlines():
        match = _FILE.match(line)
        if match:
            current = match.group(2)
            files.append(current)
            continue
        if line.startswith(("+++", "---")):
            continue
        if line.startswith(("+", "-")):
            changed += 1
            if line.startswith("-") and _is_test(current, spec) and _ASSERT.search(line):
                removed_asserts += 1
    tests = [path for path in files if _is_test(path, spec)]
    config = pathspec.PathSpec.from_lines("gitignore", PROTECTED_FILES)
    configs = [path for path in files if config.match_file(path) and path not in tests]
    return PatchStats(
        files=files, lines_changed=changed, test_files=tests, removed_assertions=removed_asserts, test_config=configs
    )


def _is_test(path: str, spec: pathspec.PathSpec) -> bool:
    return bool(spec.match_file(path) or _TESTISH.search(path))
