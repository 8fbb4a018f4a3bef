"""The Protocols the agent loop is written against: what it needs of each collaborator, nothing more.

The real implementations (`Registry`, `Verifier`, `sandbox.session.Session`, the providers,
`DockerSandbox`/`FakeSandbox`) do not inherit from these; they match them by shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from harness.agent.verify import VerifyResult
from harness.providers.protocol import Provider
from harness.tools.registry import ToolContext, ToolResult
from harness.types import ToolCall, ToolSchema
from sandbox.spec import Sandbox, SandboxSpec

__all__ = ["Provider", "RegistryLike", "Sandbox", "SessionLike", "VerifierLike"]


class Snapshot(Protocol):
    """A committed session step (`sandbox.session.session.StepRecord`)."""

    step: int
    tree: str
    """Content id of the workspace tree."""


class SessionLike(Protocol):
    """What the loop needs of a session (`sandbox.session.session.Session`)."""

    @property
    def dir(self) -> Path: ...
    @property
    def workspace(self) -> Path: ...
    @property
    def step(self) -> int: ...

    def commit_step(
        self, note: str = "", committed_image: str | None = None, *, skip_unchanged: bool = False
    ) -> Snapshot: ...
    def rollback(self, to: int, note: str | None = None) -> Any: ...
    def reset_workspace(self) -> None: ...
    def export_patch(self) -> str: ...
    def workspace_full(self) -> int | None: ...


class RegistryLike(Protocol):
    """The tool menu (`harness.tools.registry.Registry`)."""

    def segments(self, calls: Sequence[ToolCall]) -> list[list[int]]: ...
    def schemas(self) -> list[ToolSchema]: ...
    def execute_turn(self, calls: list[ToolCall], ctx: ToolContext) -> list[ToolResult]: ...


class VerifierLike(Protocol):
    """Decides 'done' (`harness.agent.verify.Verifier`)."""

    def run(self, workspace: Path, spec: SandboxSpec) -> VerifyResult: ...
