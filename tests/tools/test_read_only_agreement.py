"""The gate (pathspec, on the host) and the runner (its own matcher, inside the container) decide
read-only paths independently; this table proves they agree on every case, so neither can let
through a write the other would refuse."""

from __future__ import annotations

import itertools

import pytest

from harness.policy.gate import Gate, GateConfig
from harness.tools import pathguard

PATTERNS = [
    "tests/",
    "tests",
    "/tests/",
    "docs/*.md",
    "*.lock",
    "src/**/generated/",
    "**/fixtures",
    "a/b",
    "/a/b",
    "*.py",
    "build/",
    "data/*/raw",
    "conf?.ini",
    "[abc].txt",
    "vendor/**",
    "**/*.snap",
    "x/**/y",
    "name with space",
    ".github/",
    "tests/*_golden.txt",
    "nested/dir/",
    "*.min.*",
    "**/node_modules/",
    "/top.txt",
    "deep/a/b/c",
]
GROUPS = [
    ["*.py", "!keep.py"],
    ["tests/", "!tests/conftest.py"],
    ["docs/", "!docs/README.md"],
    ["*.lock", "!poetry.lock"],
    ["**/fixtures", "!**/fixtures/keep/"],
    ["build/", "!build/"],
]
PATHS = [
    "tests",
    "tests/test_x.py",
    "src/tests/test_y.py",
    "tests/conftest.py",
    "docs/a.md",
    "docs/sub/b.md",
    "docs/README.md",
    "poetry.lock",
    "x/poetry.lock",
    "Cargo.lock",
    "src/a/generated/x.py",
    "src/generated/y.py",
    "fixtures/f",
    "a/fixtures/g",
    "a/fixtures/keep/h",
    "a/b",
    "c/a/b",
    "a/b/c",
    "m.py",
    "keep.py",
    "pkg/keep.py",
    "build/out",
    "sub/build/out",
    "data/x/raw",
    "data/x/y/raw",
    "conf1.ini",
    "conf12.ini",
    "a.txt",
    "d.txt",
    "vendor/lib/z.go",
    "s/t.snap",
    "x/y",
    "x/1/2/y",
    "name with space",
    ".github/workflows/ci.yml",
    "tests/data_golden.txt",
    "nested/dir/f",
    "nested/dir",
    "src/test.py",
    "testsuite/x",
    "app.min.js",
    "web/node_modules/left-pad/index.js",
    "top.txt",
    "sub/top.txt",
    "deep/a/b/c",
    "deep/a/b/c/d",
    "deep/a/b",
]


@pytest.mark.parametrize(
    "patterns",
    [[p] for p in PATTERNS] + GROUPS + [list(pair) for pair in itertools.combinations(PATTERNS[:8], 2)],
    ids=lambda p: " ".join(p),
)
def test_gate_and_runner_agree_on_every_path(patterns: list[str]) -> None:
    gate, inside = Gate(GateConfig(read_only_paths=patterns)), pathguard.Patterns(patterns)
    disagree = [
        (path, gate.is_read_only(path)) for path in PATHS if gate.is_read_only(path) != pathguard.in_area(inside, path)
    ]
    assert disagree == [], f"gate and runner disagree (path, gate's answer): {disagree}"


def test_the_table_covers_both_answers() -> None:
    gate = Gate(GateConfig(read_only_paths=["tests/", "!tests/conftest.py"]))
    answers = {gate.is_read_only(path) for path in PATHS}
    assert answers == {True, False}
