"""`harness replay SESSION`: re-issue a session's recorded tool calls on a fresh copy of its original
repository and report, step by step, where the results diverge.

A regression check for changes to the harness itself: same calls, same repository, so any change in
what a tool returns comes from the harness (or the image). Timings are masked before comparing.
The replay is a new session (`<id>-replay-<n>`) next to the original, kept for inspection.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from harness.agent.hooks import HOOK_NOTE
from harness.agent.seams import RegistryLike, SessionLike
from harness.tools.registry import ToolContext
from harness.trajectory import ToolRecord, read_records
from harness.types import ToolCall

_VOLATILE = (
    (re.compile(r"duration=\d+ms"), "duration=<ms>"),
    (re.compile(r"\b\d+(?:\.\d+)?s\b"), "<s>"),
    (re.compile(r"\b\d+ ?ms\b"), "<ms>"),
)


class ReplayedCall(BaseModel):
    model_config = ConfigDict(extra="forbid")

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


def recorded_calls(session_dir: Path) -> list[ToolRecord]:
    """The tool records that count, in order: for a step re-executed on resume, the last attempt."""
    final: dict[tuple[int, str], ToolRecord] = {}
    for record in read_records(session_dir):
        if record.kind == "tool":
            final[(record.step, record.call_id)] = record  # later attempts replace earlier ones
    return list(final.values())


def reissue(
    calls: list[ToolRecord], original_id: str, session: SessionLike, registry: RegistryLike, context: ToolContext
) -> ReplayReport:
    """Re-run the recorded calls in order in a fresh session (one step each recorded step that wrote);
    compare the model-visible text. The session and tool context come from the composition root."""
    report: list[ReplayedCall] = []
    for step in sorted({record.step for record in calls}):
        wrote = False
        for record in (r for r in calls if r.step == step):
            if record.error_kind == "hook_blocked":  # the recorded decision stands: the hook is not run again
                report.append(_compare(record, record.text))
                continue
            # a hook's updatedInput is in the record's arguments: what ran is what is re-issued
            call = ToolCall(id=record.call_id, name=record.name, arguments=record.arguments)
            [result] = registry.execute_turn([call], context)
            report.append(_compare(record, result.text))
            wrote = wrote or result.wrote
        if wrote:
            session.commit_step(note=f"replay of step {step}", skip_unchanged=True)
    return ReplayReport(
        original=original_id,
        session_id=Path(session.dir).name,
        steps=report,
        diverged=sum(1 for r in report if not r.same),
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
        step=record.step, call_id=record.call_id, name=record.name, same=before == after, first_difference=difference
    )
