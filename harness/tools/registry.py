"""The tool registry: the menu's schemas for the provider, and validated, gated, scheduled execution.

Tools are typed functions (`harness.tools.schema`). Every call goes: parse -> validate -> gate
(-> approver on `ask`) -> run; failures come back as `ERROR[kind]: ...` text, never exceptions,
except SandboxError (the sandbox could not run at all), which the loop decides about.
"""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from harness.deadline import UNLIMITED, Deadline
from harness.errors import ToolError
from harness.policy.approve import Approver
from harness.policy.gate import Decision, Gate
from harness.tools.schema import Outcome, Tool, ToolFunction, build_tool, tool
from harness.types import ToolCall, ToolSchema
from sandbox import stopping
from sandbox.envelope import Envelope
from sandbox.spec import Mount, Sandbox, SandboxSpec

__all__ = ["Outcome", "Registry", "ToolContext", "ToolFunction", "ToolResult", "error_text", "tool"]

ErrorKind = Literal[
    "invalid_json",
    "invalid_arguments",
    "unknown_tool",
    "denied",
    "timeout",
    "output_limit",
    "execution_error",
    "tool_error",
    "mcp_server_down",
    "hook_blocked",
]

NEXT_STEP: dict[str, str] = {
    "invalid_json": "Send the arguments again as one valid JSON object.",
    "invalid_arguments": "Fix the arguments to match the tool's schema and call it again.",
    "unknown_tool": "Call one of the tools listed in the tool menu.",
    "denied": "Do not retry the same call; choose an allowed path or program, or another approach.",
    "timeout": "Run something smaller (narrow the selector or command) or pass a larger timeout.",
    "output_limit": "Narrow the command so it prints less (filter or select what you need).",
    "execution_error": "Read the message, adjust the call, and try again.",
    "tool_error": "The tool reported this failure itself: read it, adjust the arguments, and try again.",
    "mcp_server_down": "Its tools cannot be used in this run: do the work with the other tools.",
    "hook_blocked": "Do not retry the same call: the hook's reason says what it refuses; take another approach.",
}


def error_text(kind: str, what: str) -> str:
    """`ERROR[kind]: <what happened>. <what to do next>` (the next step is added when missing)."""
    what = what.strip().rstrip(".")
    first, _, rest = what.partition("\n")
    has_next = bool(re.search(r"\. [A-Z][^.]*$", first))
    line = f"ERROR[{kind}]: {first}." + ("" if has_next else " " + NEXT_STEP[kind])
    return line + ("\n" + rest if rest else "")


class ToolResult(BaseModel):
    """What one tool call produced; `text` is exactly what the model sees."""

    model_config = ConfigDict(extra="forbid")

    call_id: str
    name: str
    text: str
    is_error: bool = False
    error_kind: ErrorKind | None = None
    decision: Decision | None = None
    """The gate's decision (after approval); None when the call never reached the gate."""
    envelope: Envelope | None = None
    duration_ms: int = 0
    wrote: bool = False
    """The call may have changed the workspace (the session commits a step)."""


@dataclass
class ToolContext:
    """Everything a tool needs; nothing here is reachable from a tool's parameters."""

    sandbox: Sandbox
    workspace: Path
    spec: SandboxSpec
    gate: Gate
    approver: Approver | None = None
    mounts: Sequence[Mount] = ()
    """Extra mounts for every call (the runner, read-only areas): see builtin.context_mounts."""
    test_command: list[str] | str | None = None
    commit_changes: bool = False
    """Writable-root session: calls that may change the container filesystem (run_command, run_tests)
    ask the sandbox to commit it; the new image comes back as `envelope.committed_image`."""
    follow: Callable[[], SandboxSpec] | None = None
    """The session's current spec, read at each call (a writable-root session's image moves with its
    steps); None means `spec` never changes."""

    deadline: Deadline = UNLIMITED
    """The run's wall clock left when this turn's calls started: caps each call's timeout and how
    long an unattended approval waits."""
    timeouts: dict[str, float] = field(default_factory=dict)
    """Seconds a call may take, by tool name or tier (`read`, `write`, `exec`); a tool in neither
    gets the spec's timeout. Always capped by the wall clock left."""
    call_timeout_s: float | None = None
    """This call's own timeout (set by the registry from `timeouts` before the tool runs)."""
    step: int = 0
    """The agent's step whose calls these are (set by the loop)."""
    call_id: str = ""
    """The call being run (set by the registry before the tool runs)."""
    delegator: Any = None
    """Starts sub-agents (`harness.agent.delegate.Delegator`) when the run allows them; None otherwise."""

    def call_spec(self) -> SandboxSpec:
        """The spec this call runs with: its tool's timeout, never beyond the wall clock left."""
        spec = self.follow() if self.follow is not None else self.spec
        if self.call_timeout_s is not None:
            spec = spec.model_copy(update={"timeout_s": self.call_timeout_s})
        return self.deadline.cap(spec)

    def for_tool(self, name: str, tier: str) -> ToolContext:
        """This context for one call of tool `name` (its timeout from `timeouts`)."""
        seconds = self.timeouts.get(name, self.timeouts.get(tier))
        return self if seconds is None else dataclasses.replace(self, call_timeout_s=seconds)

    @property
    def allow_writes(self) -> bool:
        return self.gate.config.allow_writes

    @property
    def read_only_paths(self) -> list[str]:
        return self.gate.config.read_only_paths


@dataclass
class _Ready:
    tool: Tool
    args: BaseModel
    decision: Decision
    started: float = field(default_factory=time.perf_counter)


class Registry:
    """The fixed tool menu: schemas for the provider, validated and gated execution for the loop."""

    def __init__(self, tools: Iterable[ToolFunction], max_parallel: int = 4, extra: Iterable[Tool] = ()) -> None:
        self.tools = {t.name: t for t in map(build_tool, tools)}
        self.tools.update({t.name: t for t in extra})  # the project's declared tools
        self.max_parallel = max_parallel

    def schemas(self) -> list[ToolSchema]:
        return [t.schema() for t in self.tools.values()]

    def execute(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        """One call, start to finish."""
        return self.execute_turn([call], ctx)[0]

    def segments(self, calls: Sequence[ToolCall]) -> list[list[int]]:
        """How a turn's calls are scheduled (the one place that decides it): indices in runs of
        reads, each run closed by the write or exec call that follows it. The reads of a segment run
        concurrently (separate containers); its closing call waits for them and runs alone, so every
        call sees the writes of the calls before it. Calls of a `together` tool side by side form a
        segment of their own and run at once (sub-agents: each works on a branch of its own). An unknown tool counts as a read (it fails at once)."""
        segments: list[list[int]] = [[]]
        together = False
        for index, call in enumerate(calls):
            known = self.tools.get(call.name)
            joins = known is not None and known.together
            if segments[-1] and joins != together:  # calls that run together share a segment of their own
                segments.append([])
            together = joins
            segments[-1].append(index)
            if known is not None and known.tier != "read" and not joins:
                segments.append([])
        return [segment for segment in segments if segment]

    def execute_turn(self, calls: list[ToolCall], ctx: ToolContext) -> list[ToolResult]:
        """All calls of one model turn, segment by segment; results in call order. Each call is
        validated and gated just before its segment runs."""
        results: list[ToolResult] = []
        pool = ThreadPoolExecutor(max_workers=self.max_parallel)
        try:
            for segment in self.segments(calls):
                results += self._run_segment(pool, [calls[i] for i in segment], ctx)
        except BaseException:  # Ctrl-C: the loop stops what still runs; this thread does not wait for it
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
        return results

    def _run_segment(self, pool: ThreadPoolExecutor, calls: list[ToolCall], ctx: ToolContext) -> list[ToolResult]:
        prepared = [self._prepare(call, ctx) for call in calls]
        results: list[ToolResult | None] = [p if isinstance(p, ToolResult) else None for p in prepared]
        ready = [(i, p) for i, p in enumerate(prepared) if isinstance(p, _Ready)]
        reads = [(i, p) for i, p in ready if p.tool.tier == "read" or p.tool.together]
        rest = [(i, p) for i, p in ready if p.tool.tier != "read" and not p.tool.together]
        if len(reads) == 1:
            rest.insert(0, reads.pop())
        futures = {i: pool.submit(self._run, calls[i], p, ctx) for i, p in reads}
        for index, future in futures.items():
            results[index] = future.result()
        for index, item in rest:
            results[index] = self._run(calls[index], item, ctx)
        return [r for r in results if r is not None]

    def _prepare(self, call: ToolCall, ctx: ToolContext) -> ToolResult | _Ready:
        started = time.perf_counter()

        def fail(kind: str, what: str, decision: Decision | None = None) -> ToolResult:
            return ToolResult(
                call_id=call.id,
                name=call.name,
                text=error_text(kind, what),
                is_error=True,
                error_kind=kind,
                decision=decision,
                duration_ms=int((time.perf_counter() - started) * 1000),
            )

        if call.parse_error is not None:
            return fail("invalid_json", f"the arguments for {call.name} are not valid JSON ({call.parse_error})")
        selected = self.tools.get(call.name)
        if selected is None:
            return fail("unknown_tool", f"there is no tool named {call.name!r}; the tools are {', '.join(self.tools)}")
        try:
            args = selected.args_model.model_validate(call.arguments)
            request = selected.request(args)
        except ValidationError as error:
            problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in error.errors())
            return fail("invalid_arguments", f"{call.name}: {problems}")
        except ToolError as error:
            return fail(error.kind, str(error))
        except ValueError as error:  # an argument the tool's own parsing rejects
            return fail("invalid_arguments", f"{call.name}: {error}")
        decision = ctx.gate.check(request)
        if decision.action == "ask":
            decision = (
                ctx.approver.decide(request, decision, call.id, within_s=ctx.deadline.left_s)
                if ctx.approver is not None
                else Decision(action="deny", rule=decision.rule, reason=decision.reason + "; no approver configured")
            )
        if decision.action != "allow":
            return fail("denied", f"{decision.reason} (rule {decision.rule})", decision)
        return _Ready(selected, args, decision, started)

    def _run(self, call: ToolCall, ready: _Ready, ctx: ToolContext) -> ToolResult:
        base = dict(call_id=call.id, name=call.name, decision=ready.decision)
        try:
            args = {k: getattr(ready.args, k) for k in type(ready.args).model_fields}
            for_call = dataclasses.replace(ctx.for_tool(ready.tool.name, ready.tool.tier), call_id=call.id)
            with stopping.running(call.id):  # its caller may stop it by this id (sandbox.stopping)
                outcome = ready.tool.fn(for_call, **args)
        except ToolError as error:
            return ToolResult(
                **base,
                text=error_text(error.kind, str(error)),
                is_error=True,
                error_kind=error.kind,
                envelope=error.envelope,
                duration_ms=int((time.perf_counter() - ready.started) * 1000),
            )
        return ToolResult(
            **base,
            text=outcome.text,
            envelope=outcome.envelope,
            wrote=outcome.wrote,
            duration_ms=int((time.perf_counter() - ready.started) * 1000),
        )
