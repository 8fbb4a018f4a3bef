"""Why a task's tests could not judge it, read from what the test runner printed: the kinds users
met (a module the image lacks, an error while collecting, no test collected, the network, a
read-only cache, a runner that is not there, Go modules that were never downloaded), each with the line
that decided it. One reading for
the start state and for the run with the reference change, so the same cause gets the same name."""

from __future__ import annotations

import re
from dataclasses import dataclass

from harness.history.languages import line_at, ran_nothing

NETWORK = re.compile(
    r"(temporary failure in name resolution|name or service not known|network is unreachable|"
    r"could not resolve host|failed to establish a new connection|nodename nor servname|"
    r"connection refused.*(pypi|registry|github)|no matching distribution found|dial tcp: lookup)",
    re.IGNORECASE,
)
_MODULE = re.compile(r"(ModuleNotFoundError: No module named ['\"]?([\w.]+)|cannot find package \"([\w./-]+)\"|"
                     r"Cannot find module '([^']+)')")  # fmt: skip
_READ_ONLY = re.compile(r"(read-only file system)", re.IGNORECASE)
_COLLECTION = re.compile(r"(ERROR collecting|errors? during collection|ImportError while (loading|importing))")
_NO_TESTS = re.compile(r"(no tests ran|collected 0 items|no test files|no tests to run|\[no test files\])")
_NOT_FOUND = re.compile(r"(: not found|command not found|No such file or directory: '?\w+'?$)", re.MULTILINE)
_ERROR_LINE = re.compile(r"^E?\s*(\w+(Error|Exception)\b.*)$", re.MULTILINE)


@dataclass(frozen=True)
class Diagnosis:
    """What kept the tests from judging, in a word (`kind`), a sentence, and the deciding line."""

    kind: str
    reason: str
    line: str


_GO_MODULE = re.compile(
    r"(missing go\.sum entry for module providing package (\S+)|no required module provides package (\S+)|"
    r"go: downloading (\S+) \S+|go: (\S+)@\S+: Get \"https://proxy\.golang\.org|"
    r"cannot find module providing package (\S+))"
)
_NPX_FETCH = re.compile(
    r"(npm ERR! request to https?://\S+?/(@?[\w.-]+(?:/[\w.-]+)?) failed|"
    r"npm ERR! could not determine executable to run|npx: command not found|npm ERR! canceled)"
)


def diagnose(output: str, exit_code: int) -> Diagnosis | None:
    """The environment problem the output shows, or None when the tests ran and judged."""
    text = output or ""
    go_module = _GO_MODULE.search(text)
    if go_module:
        name = next((group for group in go_module.groups()[1:] if group), "its modules")
        reason = (
            f"needs the Go module {name}, which is not in the image (its setup, `go mod download`, needs "
            "the Go module proxy: --allow-net go)"
        )
        return Diagnosis("needs_modules", reason, line_at(text, go_module.start()))
    runner = _NPX_FETCH.search(text)
    if runner:
        name = runner.group(2) or "the test runner"
        reason = (
            f"the test runner ({name}) is not installed, and npx tried to fetch it: the repository's setup "
            "(npm ci / npm install, through --allow-net npm) installs it"
        )
        return Diagnosis("runner_missing", reason, line_at(text, runner.start()))
    module = _MODULE.search(text)
    if module:
        name = next(group for group in module.groups()[1:] if group)
        reason = f"needs {name}, which the image does not have (install it in setup)"
        return Diagnosis("missing_module", reason, line_at(text, module.start()))
    for pattern, kind, reason in (
        (NETWORK, "network", "needs network (the tests try to reach it)"),
        (_READ_ONLY, "read_only", "writes where the image is read-only (a cache or a path outside the workspace)"),
    ):
        found = pattern.search(text)
        if found:
            return Diagnosis(kind, reason, line_at(text, found.start()))
    collection = _COLLECTION.search(text)
    if collection:
        error = _ERROR_LINE.search(text, collection.start())
        return Diagnosis(
            "collection_error", "the tests cannot be collected", line_at(text, (error or collection).start())
        )
    no_tests = _NO_TESTS.search(text)
    if no_tests:
        return Diagnosis("no_tests", "no test ran (the runner collected nothing)", line_at(text, no_tests.start()))
    nothing = ran_nothing(text)
    if nothing is not None:
        return Diagnosis("no_tests", "no test ran (the runner collected nothing)", nothing)
    if exit_code == 5 and "pytest" in text.lower():
        return Diagnosis("no_tests", "no test ran (pytest's exit 5: nothing collected)", "exit 5")
    missing = _NOT_FOUND.search(text)
    if exit_code in (126, 127) and missing:
        return Diagnosis("runner_missing", "the verify command cannot run", line_at(text, missing.start()))
    return None
