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
