"""The protected set: the task's tests and every file that decides which tests are found and how
they run. Verification runs with these as they were at the start; a change the agent made to any of
them is an attempted test edit, and the task is not done.

Whole files (restored for verification): the read-only paths, Go's `*_test.go` files (which live
beside the code), and per ecosystem the files that only configure tests (`pytest.ini`, any
`conftest.py`, `sitecustomize.py`, `jest.config.*`...). Sections
of files that also hold other things (compared, never restored): `[tool.pytest...]` in
`pyproject.toml`, `[tool:pytest]` in `setup.cfg`, `[pytest]` in `tox.ini`, the test scripts and
runner settings of `package.json`, a Makefile's `test` rule and the variables it uses. A config file
may add patterns (`verify_protect`).
"""

from __future__ import annotations

import configparser
import json
import re
import tomllib
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import pathspec
from pydantic import BaseModel, ConfigDict

from harness.agent.protected import PROTECTED_FILES
from sandbox.snapshot.edit import generated


class ProtectedChange(BaseModel):
    """One change the agent made to the protected set."""

    model_config = ConfigDict(extra="forbid")

    path: str
    what: str
    """`added`, `changed`, `removed`, or the section that changed (`[tool.pytest.ini_options]`)."""
    restored: bool
    """True for whole files (verification ran with the start version); False for sections."""

    def __str__(self) -> str:
        return f"{self.path} ({self.what})"


class TreeReader(Protocol):
    """Stored trees of a session (sandbox.session.Session)."""

    def changed_paths(self, a: str, b: str) -> list[str]: ...

    def read_file(self, tree: str, path: str) -> bytes | None: ...


def protected_spec(read_only: Sequence[str], extra: Sequence[str] = ()) -> pathspec.PathSpec:
    """The whole-file part of the protected set as one matcher."""
    return pathspec.PathSpec.from_lines("gitignore", [*read_only, *PROTECTED_FILES, *extra])


def protected_changes(
    trees: TreeReader, start: str, final: str, read_only: Sequence[str], extra: Sequence[str] = ()
) -> list[ProtectedChange]:
    """What the agent changed in the protected set between the start tree and the final one. Only
    protected files and the top-level files with test sections are read."""
    spec = protected_spec(read_only, extra)
    changes: list[ProtectedChange] = []
    for path in trees.changed_paths(start, final):
        clean = path.rstrip("/")
        if generated(clean):
            continue  # caches and bytecode: never a change (verification runs without them)
        whole = matches(spec, path)
        reader = SECTIONS.get(clean) if not whole else None
        if not whole and reader is None:
            continue
        before, after = trees.read_file(start, clean), trees.read_file(final, clean)
        if whole:
            what = "added" if before is None and after is not None else "removed" if after is None else "changed"
            changes.append(ProtectedChange(path=clean, what=what, restored=True))
        elif reader is not None and reader[1](before) != reader[1](after):
            changes.append(ProtectedChange(path=clean, what=reader[0], restored=False))
    return changes


def matches(spec: pathspec.PathSpec, path: str) -> bool:
    """A changed path (directories end in `/`) that a gitignore-style spec names, itself or as a directory."""
    return spec.match_file(path.rstrip("/")) or spec.match_file(path)


def _toml_pytest(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        parsed = tomllib.loads(data.decode("utf-8", "replace"))
    except tomllib.TOMLDecodeError:
        return ("unreadable", data)
    return (parsed.get("tool") or {}).get("pytest")


def _ini_section(section: str) -> Callable[[bytes | None], Any]:
    def extract(data: bytes | None) -> Any:
        if data is None:
            return None
        parser = configparser.RawConfigParser(strict=False, interpolation=None)
        try:
            parser.read_string(data.decode("utf-8", "replace"))
        except configparser.Error:
            return ("unreadable", data)
        return dict(parser.items(section)) if parser.has_section(section) else None

    return extract


_PACKAGE_KEYS = ("jest", "mocha", "ava", "vitest", "c8", "nyc")


def _package_tests(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        parsed = json.loads(data)
    except ValueError:
        return ("unreadable", data)
    if not isinstance(parsed, dict):
        return ("not an object", data)
    found = parsed.get("scripts")
    scripts: dict[str, Any] = found if isinstance(found, dict) else {}
    tests = {k: v for k, v in scripts.items() if k in ("test", "pretest", "posttest") or k.startswith("test:")}
    return tests, {k: parsed.get(k) for k in _PACKAGE_KEYS}


_RULE = re.compile(r"^test\s*:", re.MULTILINE)
_VARIABLE = re.compile(r"\$[({]([A-Za-z_][A-Za-z0-9_]*)[)}]")


def _make_test_rule(data: bytes | None) -> Any:
    """A Makefile's `test` rule (its line and recipe) and the assignments of the variables it uses."""
    if data is None:
        return None
    lines = data.decode("utf-8", "replace").splitlines()
    rule: list[str] = []
    for index, line in enumerate(lines):
        if _RULE.match(line):
            rule.append(line)
            for recipe in lines[index + 1 :]:
                if not recipe.startswith("\t"):
                    break
                rule.append(recipe)
    names = sorted({name for line in rule for name in _VARIABLE.findall(line)})
    if not names:
        return rule, []
    assignment = re.compile(rf"^\s*(?:export\s+)?(?:{'|'.join(names)})\s*[:?+!]?=")
    return rule, [line.strip() for line in lines if assignment.match(line)]


SECTIONS: dict[str, tuple[str, Callable[[bytes | None], Any]]] = {
    "pyproject.toml": ("[tool.pytest] section", _toml_pytest),
    "setup.cfg": ("[tool:pytest] section", _ini_section("tool:pytest")),
    "tox.ini": ("[pytest] section", _ini_section("pytest")),
    "package.json": ("test scripts and runner settings", _package_tests),
    "Makefile": ("test rule", _make_test_rule),
    "makefile": ("test rule", _make_test_rule),
    "GNUmakefile": ("test rule", _make_test_rule),
}
"""Files at the repository's top whose test part is compared (the rest of them is the agent's to change)."""
