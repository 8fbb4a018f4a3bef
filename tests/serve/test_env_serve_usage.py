"""`harness env serve` refuses what it cannot serve, each with a line that says why and the exit code
of docs/cli.md, before it listens; the graded score reads the runners' own summary lines."""

from __future__ import annotations

import pytest

from harness.rollouts.server import graded
from tests.agent.conftest import EXAMPLE
from tests.cli_process import run_cli


@pytest.mark.parametrize(
    ("args", "code", "said"),
    [
        (["/nonexistent/tasks.yaml"], 66, "no tasks file or repository at /nonexistent/tasks.yaml"),
        ([str(EXAMPLE)], 64, "a repository is served with --task TEXT"),
        ([str(EXAMPLE), "--task", "x", "--http", "0.0.0.0:0"], 64, "loopback address only"),
    ],
)
def test_what_cannot_be_served_is_refused_before_it_listens(tmp_path, args, code, said) -> None:
    done = run_cli(["env", "serve", *args, "--state-dir", str(tmp_path)], timeout=60)
    assert done.returncode == code, (done.returncode, done.stderr)
    assert said in done.stderr and "Traceback" not in done.stderr


def test_a_tasks_file_names_its_own_settings(tmp_path) -> None:
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text(f"tasks:\n  - id: calc\n    repo: {EXAMPLE}\n    task: fix it\n")
    done = run_cli(["env", "serve", str(tasks), "--task", "other", "--state-dir", str(tmp_path)], timeout=60)
    assert done.returncode == 64 and "--task: a tasks file says these per task" in done.stderr, done.stderr


def test_the_score_is_the_fraction_of_tests_the_runner_says_passed() -> None:
    assert graded("....\n2 failed, 2 passed in 0.31s\n") == 0.5
    assert graded("FAILED tests/x.py::a\n1 failed, 3 passed, 1 error in 1.2s") == 0.6
    assert graded("Tests:       1 failed, 3 passed, 4 total\nTime: 1 s") == 0.75
    assert graded("5 passed in 0.1s") == 1.0
    assert graded("ok  \tpkg\t0.01s") is None, "a summary that counts nothing: no score of its own"
