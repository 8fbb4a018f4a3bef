"""A command forked from the tests' CLI server ends as the same command started for real: the same
streams, exit code, environment, working folder and exit handlers; a timeout kills it."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.cli_process import CONSOLE_SCRIPT, PYTHON_C, ROOT, run_cli

EXAMPLE = ROOT / "examples" / "calc"


def _real(args: list[str], **kwargs) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PYTHON_C, *args], capture_output=True, text=True, timeout=60, **kwargs)


@pytest.mark.parametrize(
    "args",
    [
        ["--version"],
        ["run", "--bogus"],  # a usage error: 64, one line naming the program as `python -c` does
        ["show", "no-such-session", "--state-dir", "{tmp}"],  # a read's quick path, its error
        ["session", "list", "--state-dir", "{tmp}", "--json"],
        ["tasks", "check", "{tmp}/missing.yaml"],
    ],
)
def test_a_forked_command_answers_as_a_started_one(args: list[str], tmp_path: Path) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    env = {**os.environ, "COLUMNS": "120"}
    forked, real = run_cli(args, env=env, timeout=60), _real(args, env=env)
    assert (forked.returncode, forked.stdout, forked.stderr) == (real.returncode, real.stdout, real.stderr)


def test_the_console_scripts_name_environment_folder_and_exit_handlers(tmp_path: Path) -> None:
    usage = run_cli(["run", "--bogus"], console=True)
    real = subprocess.run([CONSOLE_SCRIPT, "run", "--bogus"], capture_output=True, text=True, timeout=60)
    assert usage.stderr == real.stderr and "harness run --help" in usage.stderr
    # The command's environment is the one given, not the server's: a state folder named only there.
    state = tmp_path / "state"
    listed = run_cli(["session", "list", "--json"], env={**os.environ, "HARNESS_STATE_DIR": str(state)}, cwd=tmp_path)
    assert listed.returncode == 0 and listed.stdout.strip() == "[]", listed.stderr


@pytest.mark.docker
def test_a_timeout_kills_the_command(run_label: str) -> None:
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_cli(["exec", str(EXAMPLE), "--", "sleep", "60"], env={**os.environ, "HARNESS_RUN_ID": run_label}, timeout=3)
    assert time.monotonic() - started < 30


def test_a_startup_variable_starts_the_command_for_real() -> None:
    # PYTHONWARNINGS is read as the interpreter starts: such a command is started, not forked.
    warned = run_cli(["--version"], env={**os.environ, "PYTHONWARNINGS": "error::DeprecationWarning"})
    assert warned.returncode == 0 and warned.stdout.startswith("harness ")
