"""`harness replay SESSION`: re-issue a session's recorded tool calls on a fresh copy of its original
repository and report, step by step, where the results diverge.

A regression check for changes to the harness itself: same calls, same repository, so any change in
what a tool returns comes from the harness (or the image). Timings are masked before comparing.
The replay is a new session (`<id>-replay-<n>`) next to the original, kept for inspection.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pydantic import BaseModel, ConfigDict

from harness.agent.hooks import HOOK_NOTE
from harness.agent.seams import RegistryLike
from harness.tools.registry import ToolContext
from harness.trajectory import EVERY_AGENT, DelegateRecord, ToolRecord, read_records
from harness.types import ToolCall

if TYPE_CHECKING:
    from sandbox.session.session import Session

_VOLATILE = (
    (re.compile(r"duration=\d+ms"), "duration=<ms>"),
    (re.compile(r"\b\d+(?:\.\d+)?s\b"), "<s>"),
    (re.compile(r"\b\d+ ?ms\b"), "<ms>"),
)


class ReplayedCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent: str | None = None
    """The sub-agent whose call it was (None: the run's own agent)."""
    step: int
    call_id: str
    name: str
    same: bool
    first_difference: str = ""
    """`- recorded line` / `+ replayed line` of the first differing line."""


class ReplayReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    original: str
    session_id: str
    steps: list[ReplayedCall]
    diverged: int


def normalise(text: str) -> str:
    for pattern, replacement in _VOLATILE:
        text = pattern.sub(replacement, text)
    return text


class Branches(Protocol):
    """What re-issuing a sub-agent's calls needs of the replay's session (`sandbox.session.Session`)."""

    def tree_now(self) -> str: ...
    def restore_tree(self, tree: str) -> None: ...
    def graft(self, tree: str, source: str, paths: list[str]) -> str: ...
    def changed_paths(self, a: str, b: str) -> list[str]: ...


@dataclass
class Recorded:
    """A session's recorded calls, every agent's, and how its sub-agents ended."""

    calls: dict[str | None, list[ToolRecord]]
    """The tool records that count, by agent, in order: for a step re-executed on resume, the last attempt."""
    delegated: dict[tuple[str | None, str], DelegateRecord]
    """Each sub-agent's end, by (delegating agent, call id)."""

    def __bool__(self) -> bool:
        return bool(self.calls.get(None))


def recorded_calls(session_dir: Path) -> Recorded:
    """The calls of a session's run and of its sub-agents."""
    final: dict[tuple[str | None, int, str], ToolRecord] = {}
    delegated: dict[tuple[str | None, str], DelegateRecord] = {}
    for record in read_records(session_dir, EVERY_AGENT):
        if record.kind == "tool":
            final[(record.agent, record.step, record.call_id)] = record  # later attempts replace earlier ones
        elif isinstance(record, DelegateRecord) and record.phase == "end":
            delegated[(record.agent, record.call_id)] = record
    calls: dict[str | None, list[ToolRecord]] = {}
    for record in final.values():
        calls.setdefault(record.agent, []).append(record)
    return Recorded(calls, delegated)


def reissue(
    recorded: Recorded, original_id: str, session: Session, registry: RegistryLike, context: ToolContext
) -> ReplayReport:
    """Re-run the recorded calls in order in a fresh session (one step each recorded step that wrote);
    compare the model-visible text. A sub-agent's calls are re-issued where its delegate call was, on
    the workspace it started from, and its change is kept only when the run applied it. The session
    and tool context come from the composition root."""
    report: list[ReplayedCall] = []
    replay = _Replay(recorded, session, registry, context, report)
    for step in sorted({record.step for record in recorded.calls.get(None, [])}):
        if replay.agent_step(None, step):
            session.commit_step(note=f"replay of step {step}", skip_unchanged=True)
    return ReplayReport(
        original=original_id,
        session_id=Path(session.dir).name,
        steps=report,
        diverged=sum(1 for r in report if not r.same),
    )


@dataclass
class _Replay:
    recorded: Recorded
    session: Session
    registry: RegistryLike
    context: ToolContext
    report: list[ReplayedCall]

    def agent_step(self, agent: str | None, step: int) -> bool:
        """Re-issue one step of an agent's calls; whether anything may have written."""
        wrote, base = False, None
        for record in (r for r in self.recorded.calls.get(agent, []) if r.step == step):
            end = self.recorded.delegated.get((agent, record.call_id))
            if end is not None:  # a sub-agent: its calls, on the workspace the calls of its turn started from
                base = base or self.session.tree_now()
                self._subagent(record, end, base)
                wrote = True
                continue
            base = None  # calls after it see what the sub-agents of the turn gave back
            if record.error_kind == "hook_blocked" or record.name == "delegate":
                # the recorded decision stands: the hook is not run again, a refused delegation not asked again
                self.report.append(_compare(record, record.text))
                continue
            # a hook's updatedInput is in the record's arguments: what ran is what is re-issued
            call = ToolCall(id=record.call_id, name=record.name, arguments=record.arguments)
            [result] = self.registry.execute_turn([call], self.context)
            self.report.append(_compare(record, result.text))
            wrote = wrote or result.wrote
        return wrote

    def _subagent(self, record: ToolRecord, end: DelegateRecord, base: str) -> None:
        session: Branches = self.session
        merged = session.tree_now()
        session.restore_tree(base)
        for step in sorted({r.step for r in self.recorded.calls.get(end.child, [])}):
            self.agent_step(end.child, step)
        mine = session.tree_now()
        changed = sorted(p for p in session.changed_paths(base, mine) if not p.endswith("/"))
        session.restore_tree(session.graft(merged, mine, changed) if end.change == "applied" else merged)
        same = changed == sorted(end.paths)
        said = (
            ""
            if same
            else f"- changed {', '.join(end.paths) or 'nothing'} | + changed {', '.join(changed) or 'nothing'}"
        )
        self.report.append(
            ReplayedCall(
                agent=record.agent,
                step=record.step,
                call_id=record.call_id,
                name=record.name,
                same=same,
                first_difference=said[:300],
            )
        )


def free_id(sessions: Path, stem: str) -> str:
    """The first `<stem>-<n>` that names no session folder yet."""
    number = 1
    while (sessions / f"{stem}-{number}").exists():
        number += 1
    return f"{stem}-{number}"


def _compare(record: ToolRecord, text: str) -> ReplayedCall:
    recorded = record.text.split(HOOK_NOTE)[0]  # what a PostToolUse hook added is the hook's, not the tool's
    before, after = normalise(recorded).splitlines(), normalise(text.split(HOOK_NOTE)[0]).splitlines()
    difference = ""
    if before != after:
        delta = [
            line
            for line in difflib.unified_diff(before, after, lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))
        ]
        difference = " | ".join(delta[:2])[:300]
    return ReplayedCall(
        agent=record.agent,
        step=record.step,
        call_id=record.call_id,
        name=record.name,
        same=before == after,
        first_difference=difference,
    )
