"""Files a flag, a config or a tasks file names, through the real CLI: a device that never ends, a named
pipe nobody writes, a folder, a file too large: each refused at once, before a byte is read, in one line
naming the flag (exit 64) or the file's line (exit 78), and nothing is left behind."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.cli.test_exec import EXAMPLE, harness, one_line_error

pytestmark = pytest.mark.timeout(120)
FIX = str(Path(EXAMPLE).parent / "calc-fix.yaml")


@pytest.fixture
def pipe(tmp_path: Path) -> Path:
    os.mkfifo(tmp_path / "pipe")
    return tmp_path / "pipe"


@pytest.mark.docker
@pytest.mark.parametrize("flag", ["--ca-bundle", "--allow-net-ca"])
def test_a_bundle_that_is_no_file_is_refused_before_the_run(tmp_path, pipe, run_label, flag) -> None:
    state = tmp_path / "state"
    for bundle, kind in (("/dev/zero", "a character device"), (str(pipe), "a named pipe"), (str(tmp_path), "a folder")):
        extra = ["--secret", "T=TEST_NAMED_TOKEN@api.example.invalid"] if flag == "--allow-net-ca" else []
        done = harness(
            "run", "--image", "py311", "--model", f"scripted:{FIX}", EXAMPLE, "--task", "t", "--allow-net", "pypi",
            *extra, flag, bundle, "--state-dir", str(state), "--no-verify", run_label=run_label, TEST_NAMED_TOKEN="t" * 24,
        )  # fmt: skip
        assert done.returncode == 64, done.stdout + done.stderr
        assert one_line_error(done) == f"error: {flag} {bundle}: is {kind}, not a regular file"
    assert not state.exists() or not [p for p in state.iterdir() if not p.name.startswith(".")]


def test_a_tasks_files_bundle_is_checked_with_the_file(tmp_path) -> None:
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text(
        f"defaults:\n  allow_net: [pypi]\n  setup: ['true']\n  ca_bundle: /dev/zero\ntasks:\n"
        f"  - id: a\n    repo: {EXAMPLE}\n    task: t\n"
    )
    done = harness("batch", str(tasks), "--out", str(tmp_path / "out"), "--model", f"scripted:{FIX}")
    assert done.returncode == 78
    assert one_line_error(done).endswith("tasks.yaml:6: ca_bundle /dev/zero: is a character device, not a regular file")


def test_a_config_a_script_and_a_tasks_file_that_never_end_are_refused(tmp_path, pipe) -> None:
    done = harness("tools", "list", "--config", "/dev/zero")
    assert done.returncode == 64
    assert one_line_error(done) == "error: --config /dev/zero: is a character device, not a regular file"
    done = harness("run", "--model", f"scripted:{pipe}", EXAMPLE, "--task", "t", "--no-verify")
    assert done.returncode == 78 and "the model script" in one_line_error(done) and "a named pipe" in done.stderr
    done = harness("batch", str(pipe), "--out", str(tmp_path / "out"), "--model", f"scripted:{FIX}")
    assert done.returncode == 78 and "the tasks file" in one_line_error(done) and "a named pipe" in done.stderr
    done = harness("view", "/dev/zero", "--no-open")
    assert done.returncode in (64, 66) and "Traceback" not in done.stderr, done.stderr
