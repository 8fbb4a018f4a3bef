"""Fixtures for provider tests: a wire server per test, a recording (non-sleeping) sleep, a tool."""

from __future__ import annotations

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
