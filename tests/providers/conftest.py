"""Fixtures for provider tests: a wire server per test, a recording (non-sleeping) sleep, a tool."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from harness.types import Message, ToolSchema
from tests.providers.wire_server import WireServer

KEY = "sk-test-SECRET0123456789abcdef"
TOOL = ToolSchema(
    name="read_file",
    description="Read a file.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)
PROMPT = [Message(role="system", content="You fix bugs."), Message(role="user", content="Fix calc.")]


def stalled_for(error: BaseException) -> float:
    """The stall bound an error says applied ("no data for 0.496s"): what the call had left, so a
    little under the limit it was given once the test's own set-up has used some of it."""
    found = re.search(r"no data for ([0-9.]+)s", str(error))
    assert found, f"not a stall: {error}"
    return float(found.group(1))


class SleepRecorder:
    """Injectable sleep: records the waits instead of sleeping them."""

    def __init__(self) -> None:
        self.waits: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.waits.append(seconds)


@pytest.fixture
def wire() -> Iterator[WireServer]:
    with WireServer() as server:
        yield server


@pytest.fixture
def sleeps() -> SleepRecorder:
    return SleepRecorder()
