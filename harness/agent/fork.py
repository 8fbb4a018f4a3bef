"""Where a fork starts: the parent's trajectory through step K, and the conversation exactly as the
parent would have sent it next, so the fork's first request repeats the parent's prefix byte for
byte (a provider's prompt cache serves it) before the new model (and a hint) take over.

Pure: records in, records and a run state out; `harness.assembly.fork_session` writes them, `resume_run` runs the fork.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from harness.agent.context import Context, ContextState, Entry, call_label
from harness.agent.outcome import RunState
from harness.errors import UsageError
from harness.trajectory import RequestRecord, StepRecord, ToolRecord, TurnRecord, VerifyRecord
from harness.types import ToolCall, is_summary_request

if TYPE_CHECKING:
    from harness.config import ContextConfig


@dataclass(frozen=True)
class ForkStart:
    """What a fork begins with."""

    records: list[Any]
    """The parent's trajectory records through step K (its later steps and its outcome left out)."""
    state: RunState
    """The run state after step K: the step numbers, the context, the verify rounds so far."""
    snapshot_step: int


def fork_start(
    records: Sequence[Any], at: int, *, session_id: str, model: str, config: ContextConfig, hint: str | None = None
) -> ForkStart:
    """The start of a fork of a run at its step `at` (UsageError when the run has no such step)."""
    steps = {r.step: r for r in records if isinstance(r, StepRecord)}
    if at not in steps and at != 0:
        last = max(steps, default=0)
        raise UsageError(f"the run has steps 0..{last}; there is no step {at} to fork at")
    prefix = []
    for record in records:
        if record.kind == "outcome" or getattr(record, "step", -1) > at:
            break
        prefix.append(record)
    start = next((r for r in records if r.kind == "start"), None)
    if start is None:
        raise UsageError("the session recorded no run: there is nothing to fork")
    context = _context(records, at, config)
    if hint:
        context.add_user(hint)
    rounds = {r.round for r in prefix if isinstance(r, VerifyRecord)}
    failing = next((r.failing for r in reversed(prefix) if isinstance(r, VerifyRecord) and not r.passed), None)
    snapshot = steps[at].snapshot_step if at in steps else 0
    state = RunState(
        session_id=session_id,
        task=start.task,
        model=model,
        step=at,
        snapshot_step=snapshot,
        context=context.state(),
        verify_rounds=len(rounds),
        last_failing=failing,
    )
    return ForkStart(prefix, state, snapshot)


def _context(records: Sequence[Any], at: int, config: ContextConfig) -> Context:
    """The conversation after step `at`: the parent's next request when it made one (exactly what it
    sent), else its last request of step `at` with that step's turn and results added as the loop adds them."""
    sent: list[Any] = []
    requests: dict[int, list[Any]] = {}
    for record in records:
        if isinstance(record, RequestRecord):
            sent = [*sent[: record.base], *record.messages]
            if is_summary_request(sent):
                continue
            if record.step == at:  # its last request
                requests[at] = list(sent)
            elif record.step == at + 1 and at + 1 not in requests:  # the next step's first
                requests[at + 1] = list(sent)
    system, task = _head(records, requests)
    if at + 1 in requests:
        return _of(config, system, task, requests[at + 1])
    if at == 0:
        return Context(config, system, task)
    if at not in requests:
        raise UsageError(f"step {at} made no request on record: it cannot be forked")
    context = _of(config, system, task, requests[at])
    turns = [r for r in records if isinstance(r, TurnRecord) and r.step == at]
    if turns:
        turn = turns[-1].turn
        context.add_turn(turn)
        done = {r.call_id: r for r in records if isinstance(r, ToolRecord) and r.step == at}  # the last attempt wins
        for call in turn.tool_calls:
            if call.id in done:
                context.add_tool_result(call, done[call.id].text, done[call.id].is_error)
    return context


def _head(records: Sequence[Any], requests: dict[int, list[Any]]) -> tuple[str, str]:
    first = next(iter(requests.values()), None) or next(
        ([*r.messages] for r in records if isinstance(r, RequestRecord)), []
    )
    if len(first) < 2:
        raise UsageError("the run's first request is not on record: it cannot be forked")
    return first[0].content, first[1].content


def _of(config: ContextConfig, system: str, task: str, messages: list[Any]) -> Context:
    calls: dict[str, ToolCall] = {c.id: c for m in messages for c in m.tool_calls}
    entries = []
    for message in messages:
        call = calls.get(message.tool_call_id or "")
        label = call_label(call) if message.role == "tool" and call is not None else ""
        lines = message.content.count("\n") + 1 if message.role == "tool" else 0
        entries.append(Entry(message=message, label=label, lines=lines))
    return Context(config, system, task, ContextState(entries=entries))
