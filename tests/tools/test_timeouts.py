"""Per-tool timeouts: reads get seconds, tests minutes, the rest the sandbox's timeout; a tool's own
timeout never passes the run's wall clock."""

from __future__ import annotations

import uuid
from pathlib import Path

from harness.config import DEFAULT_TOOL_TIMEOUTS, RunConfig
from harness.deadline import Deadline
from harness.policy.gate import Gate, GateConfig
from harness.tools.builtin import default_registry, make_context
from harness.types import ToolCall
from sandbox.fake import FakeSandbox
from sandbox.spec import SandboxSpec


def test_a_tools_timeout_comes_from_its_name_or_tier_and_the_wall_clock_caps_it(tmp_path: Path) -> None:
    ctx = make_context(FakeSandbox(), tmp_path, SandboxSpec(timeout_s=120), Gate(GateConfig()))
    ctx.timeouts = {"read": 30.0, "run_tests": 1800.0}
    assert ctx.for_tool("read_file", "read").call_spec().timeout_s == 30
    assert ctx.for_tool("run_tests", "exec").call_spec().timeout_s == 1800
    assert ctx.for_tool("run_command", "exec").call_spec().timeout_s == 120  # no entry: the sandbox's
    ctx.deadline = Deadline(left_s=10.0)
    assert ctx.for_tool("run_tests", "exec").call_spec().timeout_s == 10  # never past the wall clock
    assert RunConfig().tools.timeouts == DEFAULT_TOOL_TIMEOUTS


def test_a_call_past_its_tools_timeout_ends_as_a_timeout(tmp_path: Path) -> None:
    ctx = make_context(
        FakeSandbox(), tmp_path, SandboxSpec(timeout_s=120), Gate(GateConfig(allowed_programs=["sleep"]))
    )
    ctx.timeouts = {"exec": 1.0}
    call = ToolCall(id=f"c-{uuid.uuid4().hex[:6]}", name="run_command", arguments={"command": "sleep 5"})
    result = default_registry().execute(call, ctx)
    assert result.envelope is not None and result.envelope.status == "timeout"
    assert result.envelope.limits.timeout_s == 1.0 and result.duration_ms < 4000
