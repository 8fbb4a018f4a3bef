"""What a repository's layout says about it: how to install its dependencies (`--setup auto`).

Read the way `harness.agent.verify.detect_verify` reads it (the test command): only regular, small
files, never through a symlink, nothing executed; the repository is untrusted.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

MAX_MANIFEST = 256 * 1024
"""Manifests larger than this are not read (a real one is far smaller)."""
REQUIREMENTS = (
    "requirements.txt",
    "requirements-dev.txt",
    "requirements-test.txt",
    "requirements_dev.txt",
    "requirements_test.txt",
    "dev-requirements.txt",
    "test-requirements.txt",
)
"""Requirement files installed by `--setup auto`, in this order (the tests' own among them)."""
AUTO = "auto"
"""The `--setup` value that asks for detection."""


def manifest(root: Path, name: str) -> str | None:
    """The text of root/name when it is a small regular file (never through a symlink), else None."""
    from sandbox.named import NamedFileError, read_named

    try:
        data = read_named(Path(root) / name, what=name, limit=MAX_MANIFEST, follow=False)
    except NamedFileError:
        return None
    return data.decode("utf-8", errors="replace")


def detect_setup(repo: Path, language: str | None = None) -> tuple[list[str], str] | None:
    """(commands, why) that install what the repository declares, or None when it declares nothing:
    a Python package (`pip install -e .`) and its requirement files, a Node project (`npm ci` with a
    lockfile, else `npm install`), a Go module (`go mod download`), a Rust crate
    (`cargo fetch`). language: only that ecosystem's (python, javascript, go, rust), as a mined
    task of that language needs."""
    found = [item for item in _declared(Path(repo)) if language is None or item[0] == language]
    if not found:
        return None
    return [command for _, command, _ in found], ", ".join(why for _, _, why in found)


def _declared(root: Path) -> list[tuple[str, str, str]]:
    """(language, command, why) of every ecosystem the repository's root declares dependencies in."""
    found: list[tuple[str, str, str]] = []
    pyproject = manifest(root, "pyproject.toml")
    if manifest(root, "setup.py") is not None or (
        pyproject is not None and re.search(r"^\[(project|build-system|tool\.poetry)\]", pyproject, re.MULTILINE)
    ):
        why = "setup.py" if manifest(root, "setup.py") is not None else "pyproject.toml declares a package"
        found.append(("python", "python3 -m pip install -e .", why))
    for name in REQUIREMENTS:
        if manifest(root, name) is not None:
            found.append(("python", f"python3 -m pip install -r {name}", name))
    package = manifest(root, "package.json")
    if package is not None and _json_object(package):
        lock = next((n for n in ("package-lock.json", "npm-shrinkwrap.json") if manifest(root, n) is not None), None)
        why = f"package.json with {lock}" if lock else "package.json without a lockfile"
        found.append(("javascript", "npm ci" if lock else "npm install", why))
    if manifest(root, "go.mod") is not None:
        found.append(("go", "go mod download", "go.mod"))
    if manifest(root, "Cargo.toml") is not None:
        found.append(("rust", "cargo fetch", "Cargo.toml"))
    return found


def expand_setup(setup: list[str], repo: Path) -> tuple[list[str], str]:
    """The setup commands with each `auto` replaced by what detect_setup finds, and why ("" when no
    `auto` was asked for); UsageError when the repository declares nothing to install."""
    from harness.errors import UsageError

    if "devcontainer" in setup:  # `harness run` and a batch take it before this (their engine builds the image)
        raise UsageError(
            "--setup devcontainer needs the image the devcontainer describes: use it with `harness run` or a "
            "tasks file; here give the setup commands (or auto)"
        )
    if AUTO not in setup:
        return setup, ""
    found = detect_setup(repo)
    if found is None:
        raise UsageError(
            f"--setup auto found nothing to install in {repo}: no setup.py, package pyproject.toml, "
            "requirements*.txt, package.json, go.mod or Cargo.toml; give the commands with --setup CMD"
        )
    commands, why = found
    return [part for command in setup for part in (commands if command == AUTO else [command])], why


def _json_object(text: str) -> bool:
    try:
        return isinstance(json.loads(text), dict)
    except ValueError:
        return False
