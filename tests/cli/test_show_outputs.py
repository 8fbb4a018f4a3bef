"""`harness show -v` and `--step N` through the real CLI on a real run: each call's output and the
verification's output on the terminal, their last lines with a line that says how many were left out
and which command shows them; one step whole; a step that is not there, or -v with --json, refused
with the usage code. At 80 and 120 columns, through the quick path and the full command line."""

from __future__ import annotations

import json

import pytest

from tests.agent.conftest import EXAMPLE, Harness, run_args

pytestmark = pytest.mark.docker

COUNT = "python3 -c \"print('\\\\n'.join('line %d' % i for i in range(100)))\""


@pytest.fixture(scope="module")
def ran(tmp_path_factory, run_label):
    top = tmp_path_factory.mktemp("show")
    harness = Harness(top / "sessions", run_label)
    turns = [
        {"text": "Count.", "tool_calls": [{"name": "run_command", "arguments": {"command": COUNT}}]},
        {"text": "Test.", "tool_calls": [{"name": "run_tests", "arguments": {}}]},
        {"text": "Done."},
    ]
    model = top / "model.json"
    model.write_text(json.dumps({"turns": turns}))
    done = harness.run(f"scripted:{model}", session="out")
    assert done.code != 0 and done.json()["outcome"] == "stuck", done.stdout + done.stderr
    return harness


@pytest.mark.parametrize("columns", ["80", "120"])
def test_verbose_shows_each_output_s_last_lines_and_says_what_it_left_out(ran, columns):
    shown = ran("show", "out", "-v", env={"COLUMNS": columns})
    assert shown.code == 0, shown.stderr
    text = shown.stdout
    assert "line 99" in text and "line 69" not in text.replace("line 699", "")  # the last 30 of 100
    assert "70 earlier line(s) left out; `harness show out --step 1` shows up to 2000" in " ".join(text.split())
    assert "assert -1 == 5" in text and "2 failed, 2 passed" in text, "run_tests' and verify's output"
    assert all(len(line) <= int(columns) for line in text.splitlines())
    assert not [line for line in text.splitlines() if line.endswith(" ")], "no line padded with spaces"


def test_one_step_whole_and_the_refusals(ran):
    whole = ran("show", "out", "--step", "1", env={"COLUMNS": "120"})
    assert whole.code == 0 and "line 0" in whole.stdout and "line 99" in whole.stdout and "left out" not in whole.stdout
    assert "Test." not in whole.stdout and "harness run" not in whole.stdout, "that step alone"
    full = ran("show", "out", "--step=1", "--state-dir", str(ran.state_dir), "-v", "--verbose")  # the full command line
    assert full.code == 0 and "line 0" in full.stdout
    missing = ran("show", "out", "--step", "9")
    assert missing.code == 64 and "no step 9 (its steps: 1-4)" in missing.stderr
    both = ran("show", "out", "-v", "--json")
    assert both.code == 64 and "-v and --step" in both.stderr


def test_a_missing_dependency_is_named_with_its_fix(tmp_path, run_label):
    repo = tmp_path / "dep"
    (repo / "tests").mkdir(parents=True)
    (repo / "requirements.txt").write_text("no_such_dependency_xyz==1.0\n")
    (repo / "tests" / "test_dep.py").write_text("import no_such_dependency_xyz\n\n\ndef test_it():\n    assert True\n")
    model = tmp_path / "done.json"
    model.write_text(json.dumps({"turns": [{"text": "Done."}]}))
    harness = Harness(tmp_path / "sessions", run_label)
    ran = harness("run", "--image", "py311", "--model", f"scripted:{model}", str(repo), "--task", "Make it pass.",
                  "--verify", "python3 -m pytest -q", "--max-verify-rounds", "1", "--session", "dep", "--json")  # fmt: skip
    detail = ran.json()["detail"]
    assert ran.code == 11 and "the tests cannot import 'no_such_dependency_xyz'" in detail, detail
    assert "declares its dependencies in requirements.txt: --setup auto installs them" in detail
    shown = " ".join(harness("show", "dep").stdout.split())
    assert "cause: the tests cannot import 'no_such_dependency_xyz'" in shown, shown


def test_a_route_out_nothing_installs_through_is_said(tmp_path, run_label):
    repo = tmp_path / "needs"
    repo.mkdir()
    (repo / "requirements.txt").write_text("requests\n")
    harness = Harness(tmp_path / "sessions", run_label)
    ran = harness("run", "--image", "no-such-image", "--model", "scripted:/dev/null", str(repo), "--task", "x",
                  "--no-verify", "--allow-net", "pypi")  # fmt: skip
    said = " ".join(ran.stderr.split())
    assert "warning: --allow-net pypi lets the calls reach it, but no setup installs the dependencies" in said, said
    assert "requirements.txt declares: add --setup auto" in said


def test_the_run_s_own_lines_say_a_refusal_whole_at_80_columns(tmp_path, run_label):
    """The lines a run prints as it ends cut a call's output at its first line, but never why a call was
    refused: that wraps under itself, nothing cut, no line wider than the terminal or padded."""
    harness = Harness(tmp_path / "sessions", run_label)
    model = tmp_path / "model.json"
    refused = {"name": "write_file", "arguments": {"path": "tests/test_ops.py", "content": "x = 1\n"}}
    model.write_text(json.dumps({"turns": [{"text": "Edit.", "tool_calls": [refused]}, {"text": "Done."}]}))
    done = harness(*run_args(f"scripted:{model}", verify=None, json_out=False), env={"COLUMNS": "80"})
    lines = done.stdout.splitlines()
    said = " ".join(done.stdout.split())
    assert "ERROR[denied]: tests/test_ops.py is read-only in this session (rule read-only-path). Do not retry" in said
    assert "choose an allowed path or program, or another approach." in said, done.stdout
    trace = lines[: next(n for n, line in enumerate(lines) if "╭" in line)]  # the lines above the result's panel
    assert trace and all(len(line) <= 80 and line == line.rstrip() for line in trace), trace


def test_a_session_is_named_by_its_folder_as_view_takes_it(ran, tmp_path):
    folder = str(ran.state_dir / "out")
    elsewhere = {"HARNESS_STATE_DIR": str(tmp_path / "other")}  # the folder names its session whole
    by_id = ran("show", "out", "--step", "1").stdout
    assert ran("show", folder, "--step", "1", env=elsewhere).stdout == by_id
    full = ran("show", folder, "--step=1", "--verbose", env=elsewhere)  # the full command line
    assert full.code == 0 and "line 99" in full.stdout
    assert ran("show", folder, "--json", env=elsewhere).json()["session_id"] == "out"
    assert ran("diff", folder, env=elsewhere).code == 0
    assert "session out changed nothing" in ran("export", folder, env=elsewhere).stderr, "it found the session"
    missing = ran("show", str(tmp_path / "nothing-here"))
    assert missing.code == 66 and "is not a session's folder" in missing.stderr


def test_rollback_resume_export_and_show_agree(tmp_path, run_label):
    fix = (EXAMPLE.parent / "calc-fix.yaml").read_text()
    again = """
  - text: "Fixing it again from the rolled-back state."
    tool_calls:
      - name: apply_patch
        arguments:
          path: calc/ops.py
          old_text: "    \\"\\"\\"Return the sum of a and b.\\"\\"\\"\\n    return a - b\\n"
          new_text: "    \\"\\"\\"Return the sum of a and b.\\"\\"\\"\\n    return a + b\\n"
  - text: "Fixed again."
"""
    model = tmp_path / "model.yaml"
    model.write_text(fix + again)
    harness = Harness(tmp_path / "sessions", run_label)
    assert harness.run(f"scripted:{model}", session="rb").json()["outcome"] == "verified"
    rolled = harness("rollback", "rb", "--to", "2")
    assert rolled.code == 0 and "`harness resume rb --follow-up TEXT` goes on from there" in " ".join(
        rolled.stdout.split()
    )
    shown = " ".join(harness("show", "rb").stdout.split())
    assert "rolled back: restored the state after step 2 after it ended verified" in shown, shown
    exported = harness("export", "rb")
    assert exported.code == 64 and "changed nothing" in exported.stderr, "the patch is the rolled-back state's"
    refused = harness("resume", "rb")
    assert refused.code != 0 and "--follow-up TEXT" in refused.stderr
    went_on = harness("resume", "rb", "--follow-up", "Fix it again.", "--json")
    assert went_on.code == 0 and went_on.json()["outcome"] == "verified", went_on.stdout + went_on.stderr
    assert "+    return a + b" in harness("export", "rb").stdout, "it went on from the rolled-back state"
