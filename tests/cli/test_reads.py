"""Which forms of the read commands the quick path takes (`harness.cli.reads.parse`): the plain ones
and their common options; anything else goes to the full command line, which says its usage errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.cli import reads


@pytest.mark.parametrize(
    ("argv", "command", "arguments", "values", "flags"),
    [
        (["show", "s1"], "show", ["s1"], {}, set()),
        (["show", "--state-dir", "/x", "s1"], "show", ["s1"], {"--state-dir": "/x"}, set()),
        (["show", "s1", "-v"], "show", ["s1"], {}, {"-v"}),
        (["show", "s1", "--step", "2", "--verbose"], "show", ["s1"], {"--step": "2"}, {"--verbose"}),
        (["session", "list", "--state-dir=/x"], "session list", [], {"--state-dir": "/x"}, set()),
        (
            ["session", "list", "-n", "5", "--outcome", "stuck", "-l"],
            "session list",
            [],
            {"-n": "5", "--outcome": "stuck"},
            {"-l"},
        ),
        (["diff", "s1", "--from", "2", "--to=3"], "diff", ["s1"], {"--from": "2", "--to": "3"}, set()),
        (["export", "s1", "-o", "p", "--no-check"], "export", ["s1"], {"-o": "p"}, {"--no-check"}),
        (["export", "s1", "--format", "patch"], "export", ["s1"], {"--format": "patch"}, set()),
        (["report", "b1"], "report", ["b1"], {}, set()),
        (
            ["report", "b1", "b2", "--format=json", "-o", "r"],
            "report",
            ["b1", "b2"],
            {"--format": "json", "-o": "r"},
            set(),
        ),
    ],
)
def test_the_plain_forms_are_taken(argv, command, arguments, values, flags):
    assert reads.parse(argv) == reads.Plain(command, arguments, values, flags)


@pytest.mark.parametrize(
    "argv",
    [
        ["show"],  # typer says the argument is missing
        ["show", "s1", "s2"],
        ["show", "s1", "--json"],
        ["show", "--help"],
        ["show", "s1", "--state-dir"],
        ["show", "s1", "--state-dir="],
        ["show", "s1", "--state-dir", "/a", "--state-dir", "/b"],
        ["session", "list", "--json"],
        ["session", "list", "--limit=-1"],  # typer's own words for a value below its minimum
        ["session", "list", "--limit", "2", "-n", "3"],
        ["session", "show", "s1"],
        ["diff", "s1", "--from", "x"],  # typer's own words for a bad number
        ["diff", "s1", "--from", "-1"],
        ["diff", "s1", "--json"],
        ["export", "s1", "--format", "atif"],
        ["export", "s1", "-o", "a", "--output", "b"],
        ["export", "s1", "--check", "--no-check"],
        ["export", "s1", "--", "x"],
        ["report"],
        ["report", "b1", "--format", "html"],  # the pages: the full command
        ["report", "b1", "--state-dir", "x"],
        ["run", "s1"],
    ],
)
def test_anything_else_goes_to_the_full_command_line(argv):
    assert reads.parse(argv) is None


def test_a_state_directory_path_is_a_path():
    plain = reads.parse(["show", "s1", "--state-dir", "~/state"])
    assert plain is not None and Path(plain.values["--state-dir"]) == Path("~/state")


@pytest.mark.parametrize("columns", [80, 120])
def test_session_list_through_the_cli_one_line_a_session_its_task_wrapping_under_itself(tmp_path, columns):
    """`harness session list` as a person runs it, at 80 and 120 columns: one line a session (its task
    wrapping under itself when it must, nothing cut, no padded line), a fork's origin under it,
    --outcome and --limit; the quick path and the full command line print the same."""
    import json
    import os

    from tests.cli_process import run_cli

    runs = {
        "night-1": ("verified", 1.0, None),
        "night-2": ("limit:cost", 2.0, None),
        "fork-1": ("stuck", 3.0, "night-1"),
    }
    for name, (outcome, created, parent) in runs.items():
        (tmp_path / name).mkdir()
        info = {"id": name, "repo": "/srv/repos/boltons", "created": created}
        if parent:
            info["parent"] = {"session": parent, "step": 4}
        (tmp_path / name / "session.json").write_text(json.dumps(info))
        state = {"session_id": name, "task": "Fix iterutils.remap so that nested mappings keep their order as given",
                 "model": "anthropic:claude-sonnet-4-6", "finished": True, "result": {"outcome": outcome}}  # fmt: skip
        (tmp_path / name / "state.json").write_text(json.dumps(state))
    env = {**os.environ, "COLUMNS": str(columns)}
    listed = run_cli(["session", "list", "--state-dir", str(tmp_path)], env=env)
    lines = listed.stdout.splitlines()
    assert listed.returncode == 0 and all(len(line) <= columns and line == line.rstrip() for line in lines), lines
    firsts = [line for line in lines if line[:4].isdigit()]
    assert [line.split()[2:4] for line in firsts] == [["night-1", "verified"], ["night-2", "limit:cost"],
                                                      ["fork-1", "stuck"]]  # fmt: skip
    assert "forked from night-1 at step 4" in listed.stdout
    assert "keep their order as given" in " ".join(listed.stdout.split()), "the task whole"
    narrowed = run_cli(["session", "list", "--state-dir", str(tmp_path), "--outcome", "limit", "-n", "1"], env=env)
    assert [line.split()[2] for line in narrowed.stdout.splitlines() if line[:4].isdigit()] == ["night-2"]
    full = run_cli(
        ["session", "list", "--state-dir", str(tmp_path), "--outcome", "limit", "-n", "1", "--long", "--long"], env=env
    )  # fmt: skip  (an option twice: the full command line)
    assert full.returncode == 0 and "/srv/repos/boltons" in full.stdout and "night-2" in full.stdout
