"""The causes `tasks check` names, read from what a real test runner printed (pytest run here on
small projects made here): a module the environment lacks, an error while collecting, nothing
collected, a read-only cache; each with the line that decided it, and nothing for tests that ran and
simply failed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from harness.history.diagnose import diagnose


def _pytest(folder: Path, files: dict[str, str]) -> tuple[str, int]:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(folder)],
        capture_output=True,
        text=True,
        cwd=folder,
        timeout=120,
    )
    return done.stdout + done.stderr, done.returncode


@pytest.mark.parametrize(
    "files, kind, line",
    [
        ({"test_a.py": "import surely_not_installed_anywhere\ndef test_a():\n    pass\n"}, "missing_module",
         "surely_not_installed_anywhere"),
        ({"test_a.py": "def test_a(:\n    pass\n"}, "collection_error", "SyntaxError"),
        ({"README.md": "no tests\n"}, "no_tests", "no tests ran"),
        ({"test_a.py": "def test_a():\n    raise ValueError('boom')\n"}, None, ""),
        ({"test_a.py": "def test_a():\n    assert 1 == 2\n"}, None, ""),
    ],
)  # fmt: skip
def test_what_the_runner_printed_names_the_cause(tmp_path, files, kind, line):
    output, code = _pytest(tmp_path / "project", files)
    found = diagnose(output, code)
    if kind is None:
        assert found is None, f"tests that ran and failed are the change's business: {found}"
        return
    assert found is not None and found.kind == kind, output
    assert line in found.line, found


def test_other_runners_and_the_environment():
    read_only = "mkdir /opt/go/pkg: read-only file system\nFAIL\tmod [setup failed]\n"
    assert diagnose(read_only, 1).kind == "read_only"
    assert "read-only file system" in diagnose(read_only, 1).line
    go_module = 'main.go:3:8: cannot find package "github.com/x/y" in any of:\n'
    assert diagnose(go_module, 1).reason.startswith("needs github.com/x/y")
    node = "Error: Cannot find module 'left-pad'\nRequire stack:\n"
    assert diagnose(node, 1).kind == "missing_module"
    assert diagnose("sh: 1: go: not found\n", 127).kind == "runner_missing"
    assert diagnose("pip: Temporary failure in name resolution\n", 1).kind == "network"
