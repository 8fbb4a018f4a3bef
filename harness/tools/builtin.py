"""The built-in tool menu: the file tools (`files`), the command tools (`commands`), and the helpers
they share (`calls`). There is no commit, push or branch tool: those stay with a person.
"""

from __future__ import annotations

from pathlib import Path

from harness.policy.approve import Approver
from harness.policy.gate import Gate
from harness.tools.calls import RUNNER_STDOUT_CAP, context_mounts
from harness.tools.commands import git_diff, git_log, git_status, run_command, run_tests
from harness.tools.files import apply_patch, list_dir, read_file, search_code, write_file
from harness.tools.registry import Registry, ToolContext
from sandbox.spec import Sandbox, SandboxSpec

__all__ = ["BUILTIN_TOOLS", "RUNNER_STDOUT_CAP", "context_mounts", "default_registry", "make_context"]

BUILTIN_TOOLS = (
    read_file,
    list_dir,
    search_code,
    apply_patch,
    write_file,
    run_command,
    run_tests,
    git_status,
    git_diff,
    git_log,
)


def make_context(
    sandbox: Sandbox,
    workspace: Path,
    spec: SandboxSpec,
    gate: Gate,
    approver: Approver | None = None,
    test_command: list[str] | str | None = None,
    commit_changes: bool = False,
) -> ToolContext:
    """A ToolContext with the runner and the read-only areas mounted (the only way mounts are set)."""
    return ToolContext(
        sandbox=sandbox,
        workspace=Path(workspace),
        spec=spec,
        gate=gate,
        approver=approver,
        mounts=tuple(context_mounts(Path(workspace), gate.config.read_only_paths)),
        test_command=test_command,
        commit_changes=commit_changes,
    )


def default_registry() -> Registry:
    """The registry of every built-in tool."""
    return Registry(BUILTIN_TOOLS)
