"""Which files only configure how tests are found and run: part of the protected set
(harness.agent.protect) and what the report counts as an edit of the test configuration
(harness.report.patchstats), which reads it without the rest of the protected set's machinery."""

from __future__ import annotations

PROTECTED_FILES = (
    # Python: pytest's own configuration, plugins and hooks at any depth, interpreter start-up hooks
    "pytest.ini",
    ".pytest.ini",
    "conftest.py",
    "/sitecustomize.py",
    "/usercustomize.py",
    "/*.pth",
    "/.env",
    # JavaScript / TypeScript test runners
    "jest.config.*",
    "vitest.config.*",
    "vitest.workspace.*",
    ".mocharc*",
    "karma.conf.*",
    "ava.config.*",
    "playwright.config.*",
    # Go: the test files live beside the code (a `//go:build ignore` line drops one from `go test`)
    "*_test.go",
    # Rust: cargo's own configuration (cfg flags, runners)
    "/.cargo/config",
    "/.cargo/config.toml",
)
"""gitignore-style patterns of files that only configure how tests are found and run."""
