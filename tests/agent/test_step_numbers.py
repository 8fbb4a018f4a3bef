"""One step numbering everywhere: after the demo run, `harness show` lists step 3 as the apply_patch,
and `diff`, `rollback` and `session show` take and print those same numbers (the state after step N)."""

from __future__ import annotations

import json

import pytest

from tests.agent.conftest import FIX_SCRIPT

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]


def test_show_diff_and_rollback_speak_the_same_steps(harness) -> None:
    assert harness.run(f"scripted:{FIX_SCRIPT}", session="steps").code == 0
    shown = harness("show", "steps", env={"COLUMNS": "80"}).stdout
    step_3 = shown[shown.index("step 3 ") : shown.index("step 4 ")]
    assert "apply_patch" in step_3 and "the state after step 3 is kept" in step_3, shown
    assert "snapshot" not in shown, "one numbering: the run's steps"
    assert all(len(line.rstrip()) <= 80 for line in shown.splitlines()), "it fits 80 columns"
    assert max(len(line.split()) for line in shown.splitlines() if line.strip()) > 4, "not a word per line"
    ops = harness.session_dir("steps") / "workspace" / "calc" / "ops.py"
    assert not ops.exists() and "return a + b" in harness.final("steps", "calc/ops.py")

    diff = harness("diff", "steps", "--from", "2", "--to", "3")
    assert diff.code == 0 and "+    return a + b" in diff.stdout, diff.stdout + diff.stderr
    assert harness("diff", "steps", "--from", "3", "--to", "5").stdout.strip() == ""  # steps 4-5 wrote nothing

    back = harness("rollback", "steps", "--to", "2")
    assert back.code == 0 and "state after step 2" in back.stdout, back.stdout + back.stderr
    assert "return a - b" in ops.read_text(), "the workspace made again from the store, at step 2"
    forward = harness("rollback", "steps", "--to", "3")
    assert forward.code == 0 and "return a + b" in ops.read_text()

    listed = json.loads(harness("session", "show", "steps", "--json").stdout)
    held = {tuple(record["after_steps"]) for record in listed["steps"]}
    assert (0, 1, 2) in held and (3, 4, 5) in held, held
    table = harness("session", "show", "steps", env={"COLUMNS": "200"}).stdout
    assert "rollback to the state after step 2" in table and "rollback to the state after step 3" in table, table
    assert "snapshot" not in table and "rollback to step 0" not in table

    missing = harness("rollback", "steps", "--to", "9")
    assert missing.code == 64 and "no step 9" in missing.stderr and "harness show" in missing.stderr
    assert "Traceback" not in missing.stderr
