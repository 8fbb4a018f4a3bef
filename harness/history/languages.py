"""The languages a mined task can be in: Python, Go, JavaScript/TypeScript and Rust, each with its
image, the files that hold its tests, the verify command that runs just the changed ones (`{tests}`
expanded the way its runner takes them: files, packages or test targets) and what "no test ran"
looks like in its runner's output. A task's language is that of its changed test files, else of
the manifest at the repository's root."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

NODE_RUNNERS = (
    ("jest", "npx --no-install jest {tests}"),
    ("vitest", "npx --no-install vitest run {tests}"),
    ("mocha", "npx --no-install mocha {tests}"),
    ("ava", "npx --no-install ava {tests}"),
)
"""A package.json naming one of these (dependencies or devDependencies) runs its tests with it;
otherwise Node's own runner takes the files (`node --test`: a plain script that exits non-zero fails)."""


@dataclass(frozen=True)
class Language:
    name: str
    image: str
    """The harness image its tasks run in (`--image` overrides)."""
    suffixes: tuple[str, ...]
    """File name endings of its sources and tests."""
    manifest: str
    """The root file that says a repository is in it."""
    template: str
    """The verify command; {tests} is what `arguments` makes of the changed test files."""
    arguments: Callable[[list[str]], list[str]]
    no_tests: re.Pattern[str]
    """Its runner's way of saying that nothing ran."""

    def verify(self, tests: list[str], template: str | None = None) -> str:
        quoted = " ".join(shlex.quote(a) for a in self.arguments(tests))
        return (template or self.template).replace("{tests}", quoted).strip()


def _files(tests: list[str]) -> list[str]:
    return sorted(tests)


def _packages(tests: list[str]) -> list[str]:
    """Go runs packages: the folders of the changed test files, as ./path (the root is `.`)."""
    folders = sorted({str(PurePosixPath(t).parent) for t in tests})
    return ["." if folder == "." else f"./{folder}" for folder in folders]


def _cargo_targets(tests: list[str]) -> list[str]:
    """Cargo runs integration-test targets by name (`tests/NAME.rs` or `tests/NAME/main.rs`)."""
    names = []
    for test in sorted(tests):
        parts = PurePosixPath(test).parts
        if len(parts) == 2 and parts[0] == "tests" and test.endswith(".rs"):
            names.append(PurePosixPath(test).stem)
        elif len(parts) == 3 and parts[0] == "tests" and parts[2] == "main.rs":
            names.append(parts[1])
    return [item for name in names for item in ("--test", name)]


PYTHON = Language(
    "python",
    "py311",
    (".py",),
    "pyproject.toml",
    "python3 -m pytest -q {tests}",
    _files,
    re.compile(r"(no tests ran|collected 0 items)"),
)
GO = Language(
    "go",
    "go",
    (".go",),
    "go.mod",
    "go test {tests}",
    _packages,
    re.compile(r"(\[no test files\]|testing: warning: no tests to run)"),
)
JAVASCRIPT = Language(
    "javascript",
    "node",
    (".js", ".jsx", ".mjs", ".cjs", ".ts", ".tsx", ".mts", ".cts"),
    "package.json",
    "node --test {tests}",
    _files,
    re.compile(r"(^# tests 0$|^ℹ tests 0$|No tests found|0 passing)", re.MULTILINE),
)
RUST = Language(
    "rust",
    "rust",
    (".rs",),
    "Cargo.toml",
    "cargo test {tests}",
    _cargo_targets,
    re.compile(r"^running 0 tests$", re.MULTILINE),
)
LANGUAGES = (PYTHON, GO, JAVASCRIPT, RUST)
BY_NAME = {language.name: language for language in LANGUAGES}


def of_files(paths: list[str], root: Mapping[str, object]) -> Language:
    """The language of these (test) files, by their endings; else by the root's manifest; else Python."""
    counts = {language.name: 0 for language in LANGUAGES}
    for path in paths:
        for language in LANGUAGES:
            if path.endswith(language.suffixes):
                counts[language.name] += 1
    best = max(LANGUAGES, key=lambda language: counts[language.name])
    if counts[best.name]:
        return best
    for language in (GO, RUST, JAVASCRIPT, PYTHON):
        if language.manifest in root:
            return language
    return PYTHON


def node_template(package_json: bytes | None) -> str:
    """The verify template for a JavaScript task, by the runner its package.json depends on."""
    if package_json is None:
        return JAVASCRIPT.template
    try:
        data = json.loads(package_json.decode("utf-8", "replace"))
    except ValueError:
        return JAVASCRIPT.template
    names: set[str] = set()
    for key in ("dependencies", "devDependencies"):
        section = data.get(key) if isinstance(data, dict) else None
        if isinstance(section, dict):
            names |= set(section)
    for runner, template in NODE_RUNNERS:
        if runner in names:
            return template
    return JAVASCRIPT.template


def ran_nothing(output: str) -> str | None:
    """The line saying that no test ran, in any of the runners' words (cargo: only when every
    target ran 0), or None."""
    if re.search(r"^running [1-9]\d* tests?$", output, re.MULTILINE):
        scoped = [PYTHON, GO, JAVASCRIPT]
    else:
        scoped = list(LANGUAGES)
    for language in scoped:
        found = language.no_tests.search(output)
        if found:
            return line_at(output, found.start())
    return None


def line_at(text: str, at: int) -> str:
    """The line of text holding position at (stripped, at most 300 characters): what a verdict quotes."""
    start = text.rfind("\n", 0, at) + 1
    end = text.find("\n", at)
    return text[start : end if end != -1 else len(text)].strip()[:300]
