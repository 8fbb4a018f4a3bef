"""What a changed path is: a test, a lockfile, a dependency manifest, documentation, or code.
Gitignore-style patterns; the defaults cover Python, JS/TS, Go and Rust layouts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import pathspec

Kind = Literal["test", "lock", "manifest", "doc", "code"]

TEST_PATTERNS = (
    "tests/", "test/", "testing/", "__tests__/", "spec/",
    "test_*.py", "*_test.py", "*_tests.py", "conftest.py",
    "*.test.js", "*.test.jsx", "*.test.ts", "*.test.tsx", "*.test.mjs", "*.test.cjs",
    "*.spec.js", "*.spec.jsx", "*.spec.ts", "*.spec.tsx",
    "*_test.go", "test.js", "test.mjs", "test.cjs", "tests.js", "test.ts",
)  # fmt: skip
"""Rust's integration tests live in tests/ (covered); its unit tests sit inside the code they test."""
LOCK_PATTERNS = (
    "poetry.lock", "Pipfile.lock", "uv.lock", "pdm.lock", "package-lock.json", "yarn.lock",
    "pnpm-lock.yaml", "npm-shrinkwrap.json", "Cargo.lock", "go.sum", "composer.lock", "Gemfile.lock",
)  # fmt: skip
MANIFEST_PATTERNS = (
    "requirements*.txt", "constraints*.txt", "pyproject.toml", "setup.py", "setup.cfg", "Pipfile",
    "package.json", "go.mod", "Cargo.toml",
)  # fmt: skip
DOC_PATTERNS = (
    "*.md", "*.rst", "*.txt", "*.adoc", "docs/", "doc/", "LICENSE*", "COPYING*", "AUTHORS*",
    "CHANGELOG*", "CHANGES*", "NEWS*", ".github/", ".gitignore", ".gitattributes", ".editorconfig",
)  # fmt: skip
TEST_FILE_PATTERNS = (
    "test_*.py",
    "*_test.py",
    "*_tests.py",
    "*.test.*",
    "*.spec.*",
    "*_test.go",
    "test.js",
    "test.mjs",
    "test.cjs",
    "tests.js",
    "test.ts",
    "tests/*.rs",
    "tests/**/*.rs",
)
"""Files that hold tests themselves (not fixtures or conftest): what `verify` names."""


class Classifier:
    def __init__(self, tests: Sequence[str] = TEST_PATTERNS) -> None:
        self._tests = pathspec.PathSpec.from_lines("gitignore", tests)
        named = (
            [pattern for pattern in tests if not pattern.rstrip().endswith("/")] if tests is not TEST_PATTERNS else []
        )
        self._named = pathspec.PathSpec.from_lines("gitignore", named)
        """The user's own test patterns that name files (`--tests test.js`): those files hold tests."""
        self._lock = pathspec.PathSpec.from_lines("gitignore", LOCK_PATTERNS)
        self._manifest = pathspec.PathSpec.from_lines("gitignore", MANIFEST_PATTERNS)
        self._doc = pathspec.PathSpec.from_lines("gitignore", DOC_PATTERNS)
        self._test_files = pathspec.PathSpec.from_lines("gitignore", TEST_FILE_PATTERNS)

    def kind(self, path: str) -> Kind:
        if self._tests.match_file(path):
            return "test"
        if self._lock.match_file(path):
            return "lock"
        if self._manifest.match_file(path):
            return "manifest"
        if self._doc.match_file(path):
            return "doc"
        return "code"

    def holds_tests(self, path: str) -> bool:
        """Whether the file holds tests itself (what verify runs), not fixtures or a conftest."""
        return bool(self._test_files.match_file(path) or self._named.match_file(path))


def matcher(patterns: Sequence[str]) -> pathspec.PathSpec:
    return pathspec.PathSpec.from_lines("gitignore", patterns)
