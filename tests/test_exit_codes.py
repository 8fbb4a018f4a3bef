"""One table of exit codes: every error class and every map carries a member of `ExitCode`, no number
has two meanings, and the documented table lists exactly the enum."""

from __future__ import annotations

import re
from pathlib import Path

from harness.agent.outcome import OUTCOME_EXIT_CODES, exit_code_for_outcome
from harness.cli import tool_cmds
from harness.errors import ExitCode as HarnessExitCode
from harness.types import Outcome, OutcomeKind
from sandbox.exit_code import ExitCode

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTED = ROOT / "docs" / "cli.md"


def documented_table() -> dict[int, str]:
    text = DOCUMENTED.read_text(encoding="utf-8")
    table = text[text.index("| code | meaning |") :]
    rows = re.findall(r"^\| (\d+) \| (.+) \|$", table.split("\n\n", 1)[0], flags=re.MULTILINE)
    return {int(code): meaning for code, meaning in rows}


def test_the_documented_table_is_the_enum() -> None:
    documented = documented_table()
    assert sorted(documented) == sorted(int(code) for code in ExitCode)


def test_harness_and_sandbox_share_one_enum() -> None:
    assert HarnessExitCode is ExitCode


def test_no_number_has_two_meanings() -> None:
    values = [int(code) for code in ExitCode]
    assert len(values) == len(set(values))  # an IntEnum alias would hide a second name for one number
    assert len(ExitCode.__members__) == len(values)


def test_every_map_is_built_from_the_enum() -> None:
    assert all(isinstance(code, ExitCode) for code in OUTCOME_EXIT_CODES.values())
    assert set(OUTCOME_EXIT_CODES) == set(OutcomeKind.__args__)
    assert all(isinstance(exit_code_for_outcome(outcome), ExitCode) for outcome in Outcome.__args__)
    assert all(isinstance(code, ExitCode) for code in tool_cmds.TOOL_EXIT.values())


def test_harness_tool_codes_mean_nothing_else() -> None:
    """`harness tool` once answered a denied call with 77 (a rejected key) and an invalid one with 65 (a
    patch that no longer applies)."""
    tool_codes = set(tool_cmds.TOOL_EXIT.values())
    others = {ExitCode.PATCH_CONFLICT, ExitCode.MODEL_AUTH, ExitCode.USAGE, ExitCode.NOT_FOUND}
    assert tool_codes.isdisjoint(others)
    assert {ExitCode.TOOL_INVALID, ExitCode.TOOL_DENIED} <= tool_codes
