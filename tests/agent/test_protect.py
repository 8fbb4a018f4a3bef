"""The protected set read from two trees: whole files (any change counts) and the test parts of shared
files (only a change there counts); the counts a test runner prints, and the rules they must keep."""

from __future__ import annotations

import pytest

from harness.agent.protect import protected_changes
from harness.agent.verify import TestCounts, count_rule, summary_counts


class Trees:
    """Two trees as {path: bytes} maps (what sandbox.session.Session reads from its store)."""

    def __init__(self, start: dict[str, str], final: dict[str, str]) -> None:
        self.trees = {"start": start, "final": final}

    def changed_paths(self, a: str, b: str) -> list[str]:
        old, new = self.trees[a], self.trees[b]
        return sorted(p for p in old.keys() | new.keys() if old.get(p) != new.get(p))

    def read_file(self, tree: str, path: str) -> bytes | None:
        text = self.trees[tree].get(path)
        return None if text is None else text.encode()


PYPROJECT = '[project]\nname = "x"\ndependencies = []\n\n[tool.pytest.ini_options]\ntestpaths = ["tests"]\n'
PACKAGE = '{"name": "x", "dependencies": {}, "scripts": {"test": "jest", "build": "tsc"}}'
MAKEFILE = "FLAGS := -v\nbuild:\n\tgo build ./...\ntest:\n\tgo test $(FLAGS) ./...\n"


def changes(start: dict[str, str], final: dict[str, str], extra: tuple[str, ...] = ()) -> list[str]:
    return [str(c) for c in protected_changes(Trees(start, final), "start", "final", ["tests/"], extra)]


def test_whole_files_at_any_depth_and_the_read_only_paths():
    start = {"tests/test_a.py": "x", "src/a.py": "a"}
    final = {
        "tests/test_a.py": "y",
        "src/a.py": "b",
        "pytest.ini": "[pytest]",
        "src/conftest.py": "hooks",
        "sitecustomize.py": "boom",
        "vitest.config.ts": "{}",
        "tests/__pycache__/test_a.cpython-311.pyc": "bytecode",  # generated: never a change
    }
    assert changes(start, final) == [
        "pytest.ini (added)",
        "sitecustomize.py (added)",
        "src/conftest.py (added)",
        "tests/test_a.py (changed)",
        "vitest.config.ts (added)",
    ]
    assert changes({"data/x.json": "1"}, {"data/x.json": "2"}, ("data/*.json",)) == ["data/x.json (changed)"]


@pytest.mark.parametrize(
    ("name", "start", "other_change", "test_change"),
    [
        (
            "pyproject.toml",
            PYPROJECT,
            PYPROJECT.replace("dependencies = []", 'dependencies = ["attrs"]'),
            PYPROJECT.replace('testpaths = ["tests"]', 'testpaths = ["tests"]\naddopts = "-k not slow"'),
        ),
        (
            "setup.cfg",
            "[metadata]\nname = x\n[tool:pytest]\ntestpaths = tests\n",
            "[metadata]\nname = y\n[tool:pytest]\ntestpaths = tests\n",
            "[metadata]\nname = x\n[tool:pytest]\ntestpaths = tests\naddopts = --deselect tests/a.py::t\n",
        ),
        (
            "package.json",
            PACKAGE,
            PACKAGE.replace('"build": "tsc"', '"build": "tsc -b"'),
            PACKAGE.replace('"jest"', '"jest -t nothing"'),
        ),
        (
            "Makefile",
            MAKEFILE,
            MAKEFILE.replace("go build", "go vet ./... && go build"),
            MAKEFILE.replace("-v", "-v -run TestNone"),
        ),
    ],
)
def test_shared_files_count_only_their_test_part(name, start, other_change, test_change):
    assert changes({name: start}, {name: other_change}) == []
    [found] = changes({name: start}, {name: test_change})
    assert found.startswith(f"{name} (")


def test_counts_of_each_runner_and_the_rules_against_the_start():
    start = summary_counts("FAILED tests/test_ops.py::test_add\n2 failed, 2 passed in 0.05s")
    assert start == TestCounts(runner="pytest", passed=2, failed=2)
    assert count_rule(start, summary_counts("4 passed in 0.04s")) == ""
    assert "more test(s) deselected" in count_rule(start, summary_counts("2 passed, 2 deselected in 0.01s"))
    assert "fewer tests ran (2)" in count_rule(start, summary_counts("2 passed in 0.01s"))
    assert "more test(s) skipped" in count_rule(start, summary_counts("2 passed, 2 skipped in 0.01s"))
    assert "expected to fail" in count_rule(start, summary_counts("2 passed, 1 xfailed, 1 xpassed in 0.01s"))
    unittest = summary_counts("Ran 5 tests in 0.001s\n\nOK (skipped=1, expected failures=1)")
    assert unittest == TestCounts(runner="unittest", passed=3, skipped=1, xfailed=1)
    assert summary_counts("--- PASS: TestA (0.00s)\n--- SKIP: TestB (0.00s)") == TestCounts(
        runner="go", passed=1, skipped=1
    )
    assert summary_counts("ok  \texample.com/x\t0.01s") is None  # nothing to count: no rule is applied
    assert count_rule(start, unittest) == ""  # runners differ: not comparable
