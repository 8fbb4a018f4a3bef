"""Every built-in tool and every error kind through the REAL sandbox (DockerSandbox), plus escapes."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

import pytest

from harness.policy.approve import UnattendedApprover, UnattendedConfig
from harness.policy.gate import Decision, Gate, GateConfig, GateRequest, Rule
from harness.tools.builtin import default_registry, make_context
from harness.tools.registry import ToolContext, ToolResult
from harness.types import ToolCall
from sandbox.docker.containers import DockerSandbox
from sandbox.spec import SandboxSpec

pytestmark = [pytest.mark.docker, pytest.mark.timeout(180)]
REGISTRY = default_registry()
PROGRAMS = ["ls", "cat", "touch", "echo", "git", "sleep", "true", "mkdir"]


def ctx_for(box: DockerSandbox, ws: Path, *, output_ceiling: int = 256 * 1024**2, **gate: object) -> ToolContext:
    spec = SandboxSpec(
        image="py311", timeout_s=20, output_ceiling=output_ceiling, labels={"harness.test": uuid.uuid4().hex[:8]}
    )
    config = GateConfig(**{"allowed_programs": PROGRAMS, **gate})
    return make_context(box, ws, spec, Gate(config), test_command="python3 -m pytest")


def run(ctx: ToolContext, name: str, **arguments: object) -> ToolResult:
    return REGISTRY.execute(ToolCall(id=f"c-{uuid.uuid4().hex[:6]}", name=name, arguments=arguments), ctx)


def test_read_file_happy_stable_and_truncated(box: DockerSandbox, repo_ws: Path) -> None:
    ctx = ctx_for(box, repo_ws)
    first, second = run(ctx, "read_file", path="calc/ops.py"), run(ctx, "read_file", path="calc/ops.py")
    assert first.text == second.text
    assert first.text.splitlines()[:2] == ["OK read_file calc/ops.py: lines 1-6 of 6", "     1\tdef add(a, b):"]
    (repo_ws / "calc" / "long.py").write_text("".join(f"x{n} = {n}\n" for n in range(1, 901)))
    long = run(ctx, "read_file", path="calc/long.py")
    assert long.text.endswith("[TRUNCATED: lines 1-800 of 900 shown; continue with start_line=801]")
    matching = run(ctx, "read_file", path="calc/long.py", pattern=r"^x45\d = ", context=0)
    assert (
        matching.text.splitlines()[0]
        == "OK read_file calc/long.py: 10 line(s) match '^x45\\d = ' (lines 1-900 of 900 searched)"
    )
    assert matching.text.splitlines()[1] == "   450\tx450 = 450"
    (repo_ws / "blob.bin").write_bytes(b"\x00\x01binary")
    binary = run(ctx, "read_file", path="blob.bin")
    assert binary.error_kind == "execution_error" and "binary file" in binary.text


def test_list_dir_and_search_code(box: DockerSandbox, repo_ws: Path) -> None:
    ctx = ctx_for(box, repo_ws)
    listing = run(ctx, "list_dir").text.splitlines()
    assert "calc/" in listing and "  ops.py" in listing and "tests/" in listing
    assert "debug.log" not in listing and ".git/" not in listing
    found = run(ctx, "search_code", pattern=r"def \w+\(", glob="*.py")
    assert "calc/ops.py:1:def add(a, b):" in found.text and "calc/ops.py:5:def sub(a, b):" in found.text
    assert run(ctx, "search_code", pattern="nothing_like_this").text.startswith("OK search_code: no matches")
    assert run(ctx, "search_code", pattern="(unclosed").error_kind == "invalid_arguments"
    (repo_ws / "calc" / "many.py").write_text("hit = 1\n" * 40)
    for n in range(6):
        (repo_ws / "calc" / f"m{n}.py").write_text("hit = 1\n" * 40)
    capped = run(ctx, "search_code", pattern="hit")
    assert capped.text.splitlines()[-1].startswith("[TRUNCATED: 200 of 280 matching lines shown")


def test_apply_patch_write_file_and_diff(box: DockerSandbox, repo_ws: Path) -> None:
    ctx = ctx_for(box, repo_ws)
    fixed = run(
        ctx,
        "apply_patch",
        path="calc/ops.py",
        old_text="def add(a, b):\n    return a - b",
        new_text="def add(a, b):\n    return a + b",
    )
    assert fixed.text.startswith("OK apply_patch calc/ops.py") and fixed.wrote
    assert "return a + b" in (repo_ws / "calc" / "ops.py").read_text()
    zero = run(ctx, "apply_patch", path="calc/ops.py", old_text="return a * b", new_text="x")
    several = run(ctx, "apply_patch", path="calc/ops.py", old_text="(a, b)", new_text="(x)")
    assert zero.error_kind == several.error_kind == "execution_error" and zero.text != several.text
    assert "not found" in zero.text and "matches 2 times" in several.text
    diff = "--- a/calc/ops.py\n+++ b/calc/ops.py\n@@ -5,2 +5,2 @@\n def sub(a, b):\n-    return a - b\n+    return a - b  # ok\n"
    assert run(ctx, "apply_patch", diff=diff).text.startswith("OK apply_patch: calc/ops.py")
    created = run(ctx, "write_file", path="calc/mul.py", content="def mul(a, b):\n    return a * b\n")
    assert created.text.startswith("OK write_file calc/mul.py: created")
    assert "overwrite=true" in run(ctx, "write_file", path="calc/mul.py", content="").text
    status = run(ctx, "git_status")
    assert " M calc/ops.py" in status.text and "?? calc/mul.py" in status.text
    assert "+    return a + b" in run(ctx, "git_diff", path="calc").text
    assert "initial import" in run(ctx, "git_log", max_count=5).text


def test_run_command_and_read_only_tests_mount(box: DockerSandbox, repo_ws: Path) -> None:
    ctx = ctx_for(box, repo_ws, allowed_programs=[*PROGRAMS, "python3"])
    listed = run(ctx, "run_command", command="ls calc")
    assert listed.text.startswith("exit_code=0 status=ok") and "ops.py" in listed.text
    failed = run(ctx, "run_command", command="ls missing")
    assert failed.text.startswith("exit_code=2 status=exit_nonzero") and not failed.is_error
    # the gate allows touch/python, but tests/ is mounted read-only: the edit cannot happen
    touched = run(ctx, "run_command", command="touch tests/test_ops.py tests/new.py")
    assert touched.text.startswith("exit_code=1") and "Read-only file system" in touched.text
    edited = run(ctx, "run_command", command="python3 -c \"open('tests/test_ops.py', 'a').write('# cheat')\"")
    assert edited.envelope.exit_code != 0 and "Read-only file system" in edited.text
    assert "cheat" not in (repo_ws / "tests" / "test_ops.py").read_text()
    assert not (repo_ws / "tests" / "new.py").exists()
    assert run(ctx, "run_command", command="git status --short").text.startswith("exit_code=0")


def test_run_command_timeout_and_output_limit(box: DockerSandbox, repo_ws: Path) -> None:
    ctx = ctx_for(box, repo_ws, output_ceiling=64 * 1024)
    slow = run(ctx, "run_command", command="sleep 30", timeout=1)
    assert slow.error_kind == "timeout" and slow.text.startswith("ERROR[timeout]: ")
    trapping = ctx_for(box, repo_ws, allowed_programs=[*PROGRAMS, "python3"])
    trapped = run(
        trapping,
        "run_command",
        command="python3 -c 'import signal,time; signal.signal(15, signal.SIG_IGN); time.sleep(30)'",
        timeout=1,
    )
    assert trapped.error_kind == "timeout" and "the timeout you asked for" in trapped.text, trapped.text
    flood = run(ctx, "run_command", command="cat /dev/zero")
    assert flood.error_kind == "output_limit" and flood.text.startswith("ERROR[output_limit]: ")


def test_run_tests_reports_failures_only(box: DockerSandbox, repo_ws: Path) -> None:
    ctx = ctx_for(box, repo_ws)
    result = run(ctx, "run_tests")
    lines = result.text.splitlines()
    assert lines[0].startswith("exit_code=1 status=exit_nonzero")
    assert lines[1].startswith("FAILED tests/test_ops.py::test_add at ")
    assert "assert -1 == 5" in lines[1]
    assert lines[2].startswith("1 failed, 1 passed")
    assert len(lines) == 3
    only = run(ctx, "run_tests", selector="tests/test_ops.py::test_zero")
    assert only.text.splitlines()[0].startswith("exit_code=0") and "1 passed" in only.text
    assert run(ctx, "run_tests", selector="--co").error_kind == "invalid_arguments"


@pytest.mark.parametrize(
    "name,arguments,kind",
    [
        ("read_file", {"path": "/etc/passwd"}, "denied"),
        ("read_file", {"path": "../../etc/passwd"}, "denied"),
        ("read_file", {"path": "calc\uff0fops.py"}, "denied"),
        ("read_file", {"path": ".git/config"}, "denied"),
        ("write_file", {"path": "tests/test_new.py", "content": "x"}, "denied"),
        ("apply_patch", {"path": "tests/test_ops.py", "old_text": "== 5", "new_text": "== -1"}, "denied"),
        ("run_command", {"command": "sh -c 'cat /etc/passwd'"}, "denied"),
        ("run_command", {"command": "env PATH=/tmp ls"}, "denied"),
        ("run_command", {"command": "python3 -c \"import os; os.system('id')\""}, "denied"),
        ("run_command", {"command": "git commit -am x"}, "denied"),
        ("read_file", {"path": "calc/nope.py"}, "execution_error"),
        ("read_file", {"path": "calc/ops.py", "bogus": 1}, "invalid_arguments"),
        ("fetch_url", {"url": "http://x"}, "unknown_tool"),
    ],
)
def test_error_kinds(box: DockerSandbox, repo_ws: Path, name: str, arguments: dict, kind: str) -> None:
    result = run(ctx_for(box, repo_ws), name, **arguments)
    assert result.error_kind == kind and result.text.startswith(f"ERROR[{kind}]: "), result.text
    assert "== 5" in (repo_ws / "tests" / "test_ops.py").read_text()


def test_invalid_json_is_answered(box: DockerSandbox, repo_ws: Path) -> None:
    call = ToolCall(id="j", name="read_file", raw_arguments='{"path": ', parse_error="unexpected end")
    result = REGISTRY.execute(call, ctx_for(box, repo_ws))
    assert result.error_kind == "invalid_json" and result.decision is None


def test_symlinked_directory_out_of_the_workspace(box: DockerSandbox, repo_ws: Path) -> None:
    os.symlink("/etc", repo_ws / "etc_link")
    os.symlink("../../../../../../etc/passwd", repo_ws / "calc" / "passwd.py")
    ctx = ctx_for(box, repo_ws)
    for path in ("etc_link/passwd", "calc/passwd.py"):
        result = run(ctx, "read_file", path=path)
        assert result.error_kind == "denied" and "outside /workspace" in result.text
    assert run(ctx, "write_file", path="etc_link/evil", content="x").error_kind == "denied"
    assert run(ctx, "list_dir", path="etc_link").error_kind == "denied"


class SwapThenAllow:
    """An approver that, between the gate's check and the call, swaps a directory for a symlink."""

    def __init__(self, target: Path, outside: str) -> None:
        self.target, self.outside = target, outside

    def decide(
        self, request: GateRequest, decision: Decision, call_id: str, *, within_s: float | None = None
    ) -> Decision:
        shutil.move(self.target, self.target.with_name("moved"))
        os.symlink(self.outside, self.target)
        return Decision(action="allow", rule="test-swap", reason="swapped after the check")


def test_symlink_swapped_between_check_and_use(box: DockerSandbox, repo_ws: Path) -> None:
    ctx = ctx_for(box, repo_ws, rules=[Rule(name="ask-calc", action="ask", paths=["calc/"])])
    ctx.approver = SwapThenAllow(repo_ws / "calc", "/etc")
    read = run(ctx, "read_file", path="calc/passwd")
    assert read.decision.rule == "test-swap" and read.error_kind == "denied"
    assert "root:" not in read.text


def test_unattended_ask_is_denied_after_timeout(box: DockerSandbox, repo_ws: Path, tmp_path: Path) -> None:
    ctx = ctx_for(box, repo_ws, ask_programs=["echo"])
    ctx.approver = UnattendedApprover(
        UnattendedConfig(approvals_dir=tmp_path / "approvals", timeout_s=0.2, poll_s=0.05)
    )
    result = run(ctx, "run_command", command="echo should-not-run")
    assert result.error_kind == "denied" and "no approval within 0.2s" in result.text
    assert list((tmp_path / "approvals").glob("*.decision.json"))


def test_concurrent_reads_in_one_turn_keep_call_order(box: DockerSandbox, repo_ws: Path) -> None:
    ctx = ctx_for(box, repo_ws)
    calls = [
        ToolCall(id="a", name="read_file", arguments={"path": "calc/ops.py"}),
        ToolCall(id="b", name="list_dir", arguments={"path": "calc"}),
        ToolCall(id="c", name="write_file", arguments={"path": "calc/n.py", "content": "N = 1\n"}),
        ToolCall(id="d", name="read_file", arguments={"path": "calc/n.py"}),
    ]
    results = REGISTRY.execute_turn(calls, ctx)
    assert [r.call_id for r in results] == ["a", "b", "c", "d"]
    assert results[3].text.endswith("     1\tN = 1")
