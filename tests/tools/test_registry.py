"""Registry on its own: schemas, validation, error kinds, gate + approval, turn ordering.

Execution goes through FakeSandbox (host subprocess) with spec.workdir set to the host workspace,
so the real runner script runs; the Docker path is covered in test_tools_docker.py.
"""

from __future__ import annotations

import io
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from rich.console import Console

from harness.deadline import Deadline
from harness.policy.approve import InteractiveApprover, UnattendedApprover, UnattendedConfig
from harness.policy.gate import Gate, GateConfig, GateRequest
from harness.tools.builtin import default_registry, make_context
from harness.tools.registry import ToolContext
from harness.types import ToolCall
from sandbox.envelope import Envelope
from sandbox.fake import FakeSandbox
from sandbox.spec import Mount, SandboxSpec


class CountingSandbox:
    """FakeSandbox that records how many calls were in flight at once."""

    def __init__(self) -> None:
        self.inner, self.lock = FakeSandbox(), threading.Lock()
        self.active = self.peak = 0

    def run(
        self,
        argv: Sequence[str],
        *,
        workspace: Path,
        spec: SandboxSpec,
        mounts: Sequence[Mount] = (),
        stdin: bytes | None = None,
        commit_changes: bool = False,
        refill: bool = True,
    ) -> Envelope:
        with self.lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
        try:
            time.sleep(0.05)  # widen the window so overlapping calls overlap
            return self.inner.run(argv, workspace=workspace, spec=spec, mounts=mounts, stdin=stdin)
        finally:
            with self.lock:
                self.active -= 1

    def prewarm(self, **_: object) -> None: ...

    def quiesce(self) -> None: ...

    def close(self) -> None: ...


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "src" / "a.py").write_text("A = 1\n")
    (root / "tests" / "test_a.py").write_text("def test_a():\n    assert True\n")
    return root


def context(ws: Path, sandbox: object | None = None, **gate: object) -> ToolContext:
    spec = SandboxSpec(image="fake", workdir=str(ws), timeout_s=30)
    return make_context(sandbox or FakeSandbox(), ws, spec, Gate(GateConfig(**gate)))


def call(name: str, cid: str = "c1", **arguments: object) -> ToolCall:
    return ToolCall(id=cid, name=name, arguments=arguments)


REGISTRY = default_registry()


def test_schemas_forbid_extra_properties_and_render_for_both_providers() -> None:
    schemas = {s.name: s for s in REGISTRY.schemas()}
    assert set(schemas) == {
        "read_file",
        "list_dir",
        "search_code",
        "apply_patch",
        "write_file",
        "run_command",
        "run_tests",
        "git_status",
        "git_diff",
        "git_log",
    }
    for schema in schemas.values():
        assert schema.parameters["additionalProperties"] is False
        assert "Do NOT use" in schema.description and "Use it" in schema.description
        assert schema.openai()["function"]["parameters"] == schema.anthropic()["input_schema"]
    read = schemas["read_file"].parameters
    assert read["required"] == ["path"] and read["properties"]["start_line"]["minimum"] == 1


def test_model_visible_error_kinds(ws: Path) -> None:
    ctx = context(ws)
    bad_json = ToolCall(id="j", name="read_file", raw_arguments="{path:", parse_error="Expecting value")
    results = REGISTRY.execute_turn(
        [
            bad_json,
            call("rm_rf", "u"),
            call("read_file", "x", path="src/a.py", extra=1),
            call("list_dir", "d", depth=9),
            call("read_file", "g", path="../etc/passwd"),
        ],
        ctx,
    )
    kinds = [r.error_kind for r in results]
    assert kinds == ["invalid_json", "unknown_tool", "invalid_arguments", "invalid_arguments", "denied"]
    for result in results:
        assert result.is_error and result.text.startswith(f"ERROR[{result.error_kind}]: ")
        assert result.text.rstrip().endswith(".")
    assert results[4].decision is not None and results[4].decision.rule == "path-syntax"
    assert "read_file, list_dir" in results[1].text


def test_happy_read_and_results_in_call_order(ws: Path) -> None:
    results = REGISTRY.execute_turn([call("read_file", "1", path="src/a.py"), call("list_dir", "2")], context(ws))
    assert [r.call_id for r in results] == ["1", "2"]
    assert results[0].text == "OK read_file src/a.py: lines 1-1 of 1\n     1\tA = 1"
    assert not results[0].is_error and not results[0].wrote and results[0].decision.action == "allow"


def test_reads_run_concurrently_and_writes_alone_in_order(ws: Path) -> None:
    box = CountingSandbox()
    ctx = context(ws, box)
    reads = [call("read_file", f"r{i}", path="src/a.py") for i in range(3)]
    REGISTRY.execute_turn(reads, ctx)
    assert box.peak >= 2
    box.peak = 0
    turn = [
        call("write_file", "w", path="src/b.py", content="B = 1\n"),
        call("read_file", "r", path="src/b.py"),
        call("apply_patch", "p", path="src/b.py", old_text="B = 1", new_text="B = 2"),
        call("read_file", "r2", path="src/b.py"),
    ]
    results = REGISTRY.execute_turn(turn, ctx)
    assert [r.wrote for r in results] == [True, False, True, False]
    assert results[1].text.endswith("B = 1") and results[3].text.endswith("B = 2")
    assert box.peak == 1


def test_writes_disabled_and_read_only_area(ws: Path) -> None:
    denied = REGISTRY.execute(call("write_file", path="src/x.py", content=""), context(ws, allow_writes=False))
    assert denied.error_kind == "denied" and denied.decision.rule == "writes-disabled"
    ro = REGISTRY.execute(call("apply_patch", path="tests/test_a.py", old_text="True", new_text="False"), context(ws))
    assert ro.error_kind == "denied" and ro.decision.rule == "read-only-path"
    diff = "--- a/tests/test_a.py\n+++ b/tests/test_a.py\n@@ -2 +2 @@\n-    assert True\n+    assert 1\n"
    assert REGISTRY.execute(call("apply_patch", diff=diff), context(ws)).decision.rule == "read-only-path"


def test_apply_patch_argument_combinations(ws: Path) -> None:
    both = REGISTRY.execute(call("apply_patch", path="src/a.py", old_text="A", new_text="B", diff="x"), context(ws))
    missing = REGISTRY.execute(call("apply_patch", path="src/a.py"), context(ws))
    assert both.error_kind == missing.error_kind == "invalid_arguments"


def test_ask_goes_to_unattended_approver_and_is_denied_after_timeout(ws: Path, tmp_path: Path) -> None:
    approvals = tmp_path / "approvals"
    ctx = context(ws, ask_programs=["echo"], allowed_programs=["ls"])
    ctx.approver = UnattendedApprover(UnattendedConfig(approvals_dir=approvals, timeout_s=0.3, poll_s=0.05))
    result = REGISTRY.execute(call("run_command", "ask-1", command="echo hi"), ctx)
    assert result.error_kind == "denied" and result.decision.rule == "command-ask/unattended-timeout"
    assert (approvals / "ask-1.request.json").exists() and (approvals / "ask-1.decision.json").exists()
    assert '"deny"' in (approvals / "ask-1.decision.json").read_text()


def test_unattended_wait_never_outlasts_the_wall_clock_left(ws: Path, tmp_path: Path) -> None:
    approvals = tmp_path / "approvals"
    ctx = context(ws, ask_programs=["echo"], allowed_programs=["ls"])
    ctx.approver = UnattendedApprover(UnattendedConfig(approvals_dir=approvals, timeout_s=30, poll_s=0.05))
    ctx.deadline = Deadline(0.2)  # what the run has left: not the 30 s the approver would wait
    started = time.monotonic()
    result = REGISTRY.execute(call("run_command", "ask-2", command="echo hi"), ctx)
    assert time.monotonic() - started < 5
    assert result.error_kind == "denied" and "no approval within 0.2s" in result.text
    assert '"timeout_s": 0.2' in (approvals / "ask-2.request.json").read_text()


def test_unattended_answer_file_allows(tmp_path: Path) -> None:
    approver = UnattendedApprover(UnattendedConfig(approvals_dir=tmp_path, timeout_s=5, poll_s=0.02))
    request = GateRequest(tool="run_command", tier="exec", command="make")
    timer = threading.Timer(0.1, lambda: (tmp_path / "c9.answer").write_text("allow\n"))
    timer.start()
    from harness.policy.gate import Decision

    decision = approver.decide(request, Decision(action="ask", rule="command-ask", reason="r"), "c9")
    timer.join()
    assert decision.action == "allow" and decision.rule == "command-ask/unattended"


def test_interactive_approver_reads_the_injected_stream(ws: Path) -> None:
    out = io.StringIO()
    ctx = context(ws, ask_programs=["echo"])
    ctx.approver = InteractiveApprover(Console(file=out, force_terminal=False), stream=io.StringIO("y\n"))
    allowed = REGISTRY.execute(call("run_command", command="echo approved"), ctx)
    assert allowed.decision.action == "allow" and "approved" in allowed.text
    assert "approval needed" in out.getvalue() and "echo approved" in out.getvalue()
    ctx.approver = InteractiveApprover(Console(file=io.StringIO()), stream=io.StringIO("n\n"))
    assert REGISTRY.execute(call("run_command", command="echo no"), ctx).error_kind == "denied"


def test_ask_without_approver_is_denied(ws: Path) -> None:
    result = REGISTRY.execute(
        call("run_command", command="echo x"), context(ws, ask_programs=["echo"], allowed_programs=[])
    )
    assert result.error_kind == "denied" and "no approver" in result.text


def test_run_command_exit_code_first_and_timeout(ws: Path) -> None:
    ctx = context(ws, allowed_programs=["ls", "sleep"])
    listed = REGISTRY.execute(call("run_command", command="ls src"), ctx)
    assert listed.text.startswith("exit_code=0 status=ok") and "a.py" in listed.text
    missing = REGISTRY.execute(call("run_command", command="ls nope"), ctx)
    assert missing.text.startswith("exit_code=2 status=exit_nonzero") and not missing.is_error
    slow = REGISTRY.execute(call("run_command", command="sleep 5", timeout=1), ctx)
    assert slow.error_kind == "timeout" and slow.text.startswith("ERROR[timeout]: ")
