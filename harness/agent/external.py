"""Turns from outside harness's own model: the tool calls an MCP client or a hosted agent makes, each
given to the loop as a model turn, each result handed back to its caller once the loop recorded it.

harness's loop is the one place a call is gated, hooked, run in a fresh container, recorded and
snapshotted, and where "done" is decided. A client that brings its own model (an MCP client) or an
agent that brings its own loop (Claude Code over ACP) still makes calls: `ExternalTurns` is the
provider the loop asks for its next turn. It waits for the next call (or calls), returns them as one
turn, and when the loop's record of a call is written (it observes the trajectory) that caller's wait
ends with the record. A hosted agent also reports what it did itself (an edit in its own container):
those arrive as calls named `agent.TOOL`, recorded as they were reported (`Reported`, the registry's
wrapper) so each is a step with its snapshot. The agent's own words and the end of its prompt end a
turn without calls; the conversation's next user message (verification's failure, a Stop hook's
refusal) is what the agent is prompted with next.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from harness.errors import ModelError, ModelUnavailable
from harness.policy.decision import Decision
from harness.tools.registry import ToolContext, ToolResult
from harness.trajectory import ToolRecord
from harness.types import Message, ModelTurn, Reasoning, ToolCall, ToolSchema, Usage

REPORTED = "agent."
"""The prefix of a call a hosted agent made inside its own container and reported (`agent.Edit`)."""


class Prompter(Protocol):
    """Who is prompted with the conversation's user messages (a hosted agent's session)."""

    def prompt(self, text: str, task: str = "") -> None:
        """Start a prompt turn with text, the conversation's newest user message (returns at once; its
        events come to ExternalTurns); task is its first (the task), for a session that starts anew."""
        ...

    def cancel(self) -> None: ...


@dataclass
class Report:
    """What a hosted agent reported of a call it made itself."""

    text: str
    is_error: bool = False
    wrote: bool = False
    decision: Decision | None = None
    duration_ms: int = 0


@dataclass
class _Between:
    """Work to do on the loop's thread between two steps (no call in flight): a session tool."""

    work: Callable[[], Any]
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None


@dataclass
class _Waiting:
    call: ToolCall
    done: threading.Event = field(default_factory=threading.Event)
    record: ToolRecord | None = None


class ExternalTurns:
    """The provider of a loop whose turns come from outside (see the module)."""

    def __init__(self, model: str = "external", prompter: Prompter | None = None) -> None:
        self.name = model
        self.prompter = prompter
        self._cond = threading.Condition()
        self._queued: list[_Waiting] = []
        self._given: dict[str, _Waiting] = {}
        self.reports: dict[str, Report] = {}
        self._text: list[str] = []
        self._thought: list[str] = []
        self._ended: str | None = None
        self._in_flight = False
        self._seen = 0
        self._usage = Usage()
        self._cost = 0.0
        self._charged = (Usage(), 0.0)
        self._cost_known = True
        self._failure: ModelError | None = None
        self._closed: str | None = None
        self._finished: str | None = None
        self._finish_told = False
        self._between: list[_Between] = []
        self._ids = itertools.count(1)

    # --- what comes from outside (other threads) ---------------------------------------------

    def call(self, name: str, arguments: dict[str, Any], call_id: str | None = None) -> ToolRecord | None:
        """One call, as the loop runs it: blocks until its record is written; None when the run ended
        first (the call never ran)."""
        waiting = _Waiting(ToolCall(id=call_id or f"ext_{next(self._ids)}", name=name, arguments=arguments))
        return waiting.record if self._handed(self._queued, waiting) else None

    def reported(self, call_id: str, name: str, arguments: dict[str, Any], report: Report) -> None:
        """A call the agent made itself and reports ended: a step of its own (returns at once). Its id is
        the agent's made unique in the run (an agent may number its calls anew in each session)."""
        with self._cond:
            if self._closed is not None:
                return
            ident = f"{call_id}.{next(self._ids)}"
            self.reports[ident] = report
            self._queued.append(_Waiting(ToolCall(id=ident, name=REPORTED + name, arguments=arguments)))
            self._cond.notify_all()

    def between(self, work: Callable[[], Any]) -> Any:
        """work's result, run on the loop's thread while it waits for the next call (between two steps:
        nothing in flight, the last step committed); its exception raised here. None when the run ended
        first (work never ran)."""
        job = _Between(work)
        if not self._handed(self._between, job):
            return None
        if job.error is not None:
            raise job.error
        return job.result

    def _handed(self, queue: list[Any], item: _Waiting | _Between) -> bool:
        """Put item on queue for the loop and wait until it is done; False when the run ended first."""
        with self._cond:
            if self._closed is not None:
                return False
            queue.append(item)
            self._cond.notify_all()
        while not item.done.wait(0.5):
            with self._cond:
                if self._closed is not None and not item.done.is_set():
                    return False
        return True

    def finish(self, why: str) -> None:
        """The side that made the calls is gone (an MCP client disconnected): once the calls it left
        are run, the next turn ends the model's part (the loop verifies); a turn after that ends the
        session."""
        with self._cond:
            self._finished = why
            self._text.append(f"({why})")
            self._cond.notify_all()

    def say(self, text: str) -> None:
        """The agent's words (what it tells the user), as they stream."""
        with self._cond:
            self._text.append(text)

    def think(self, text: str) -> None:
        """What the agent reasoned or planned, as it streams: the next turn's reasoning."""
        with self._cond:
            self._thought.append(text)

    def ended(self, stop_reason: str) -> None:
        """The prompt in flight ended (the agent's stop reason)."""
        with self._cond:
            self._ended, self._in_flight = stop_reason, False
            self._cond.notify_all()

    def charge(self, usage: Usage, cost_usd: float, known: bool = True) -> None:
        """Model traffic the agent made (the gateway's record), billed with the next turn."""
        with self._cond:
            self._usage, self._cost = self._usage + usage, self._cost + cost_usd
            self._charged = (self._charged[0] + usage, self._charged[1] + cost_usd)
            self._cost_known = self._cost_known and known

    def unbilled(self) -> tuple[Usage, float]:
        """The model traffic charged since the last turn (the next turn bills it)."""
        with self._cond:
            return self._usage, self._cost

    def charged(self) -> tuple[Usage, float]:
        """All the model traffic charged so far, billed or not (it only grows)."""
        with self._cond:
            return self._charged

    def fail(self, error: ModelError) -> None:
        """The agent or its connection failed: the loop's next wait raises it."""
        with self._cond:
            self._failure = error
            self._cond.notify_all()

    def close(self, why: str = "the run ended") -> None:
        """No more turns: every caller still waiting gets None."""
        with self._cond:
            self._closed = why
            for waiting in [*self._queued, *self._given.values()]:
                waiting.done.set()
            for job in self._between:
                job.done.set()
            self._between = []
            self._cond.notify_all()

    def _run_between(self) -> bool:
        """Run the oldest work waiting for a moment between steps (on the loop's thread); False: none."""
        with self._cond:
            if not self._between:
                return False
            job = self._between.pop(0)
        try:
            job.result = job.work()
        except BaseException as error:  # noqa: BLE001 - handed to its caller, raised there
            job.error = error
        job.done.set()
        return True

    # --- the trajectory's observer -----------------------------------------------------------

    def observe(self, record: Any) -> None:
        if isinstance(record, ToolRecord):
            with self._cond:
                waiting = self._given.pop(record.call_id, None)
            if waiting is not None:
                waiting.record = record
                waiting.done.set()

    # --- the provider ------------------------------------------------------------------------

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema],
        *,
        max_tokens: int,
        timeout_s: float | None = None,
    ) -> ModelTurn:
        """The next turn: the oldest call waiting (one call, one step), or the agent's words once its
        prompt ended. A new user message since the last turn prompts the agent first."""
        fresh = [m for m in messages[self._seen :] if m.role == "user" and m.content.strip()]
        task = next((m.content for m in messages if m.role == "user" and m.content.strip()), "")
        self._seen = len(messages)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            if fresh and self.prompter is not None and not self._in_flight:
                self._ended, self._in_flight = None, True
                self.prompter.prompt(fresh[-1].content, task)
        with self._cond:
            while not self._queued and self._ended is None and self._failure is None and self._closed is None:
                if self._between:
                    self._cond.release()
                    try:
                        self._run_between()
                    finally:
                        self._cond.acquire()
                    continue
                if self._finished is not None:
                    if self._finish_told:
                        raise ModelUnavailable(f"the session's caller is gone: {self._finished}")
                    self._finish_told, self._ended = True, "end_turn"
                    break
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise ModelUnavailable("the agent made no call and said nothing within the run's wall clock")
                self._cond.wait(min(left, 1.0) if left is not None else 1.0)
            if self._failure is not None:
                failure, self._failure = self._failure, None
                raise failure
            if self._closed is not None and not self._queued:
                raise ModelUnavailable(f"the agent's session ended: {self._closed}")
            calls, self._queued = self._queued[:1], self._queued[1:]
            for waiting in calls:
                self._given[waiting.call.id] = waiting
            text, self._text = "".join(self._text), []
            thought, self._thought = "".join(self._thought).strip(), []
            usage, cost, known = self._usage, self._cost, self._cost_known
            self._usage, self._cost, self._cost_known = Usage(), 0.0, True
            stop = "tool_use" if calls else "end_turn"
            if not calls:
                self._ended = None
        return ModelTurn(
            text=text,
            tool_calls=[w.call for w in calls],
            stop_reason=stop,
            usage=usage,
            cost_usd=cost,
            cost_known=known,
            model=self.name,
            reasoning=Reasoning(text=thought) if thought else None,
        )


class Reported:
    """The registry as a hosted agent's run sees it: calls it reported (`agent.TOOL`) are recorded as
    reported, with the decision harness gave when the agent asked; every other call runs for real."""

    def __init__(self, registry: Any, turns: ExternalTurns) -> None:
        self.registry, self.turns = registry, turns

    def schemas(self) -> list[ToolSchema]:
        return self.registry.schemas()

    def segments(self, calls: Sequence[ToolCall]) -> list[list[int]]:
        return [[index] for index in range(len(calls))]  # one at a time, in the order they happened

    def execute_turn(self, calls: list[ToolCall], ctx: ToolContext) -> list[ToolResult]:
        results = []
        for call in calls:
            if not call.name.startswith(REPORTED):
                results += self.registry.execute_turn([call], ctx)
                continue
            report = self.turns.reports.pop(call.id, None) or Report(
                text="the agent made this call itself; its report was lost when harness stopped", wrote=True
            )
            results.append(
                ToolResult(
                    call_id=call.id, name=call.name, text=report.text, is_error=report.is_error,
                    error_kind="tool_error" if report.is_error else None, decision=report.decision,
                    wrote=report.wrote, duration_ms=report.duration_ms,
                )
            )  # fmt: skip
        return results


def answered(record: ToolRecord | None, closed: Callable[[], str]) -> tuple[str, bool]:
    """(text, is_error) a caller gets for its call's record (or for none: why the run ended)."""
    if record is None:
        return f"harness did not run this call: {closed()}", True
    return record.text, record.is_error
