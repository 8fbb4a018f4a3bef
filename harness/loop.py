"""The agent loop: `Agent.run()` — a while loop with a hard step limit and the only try/except ladder.

One step: prepare the context, ask the model, record its turn (write-ahead, fsynced) BEFORE any
tool runs, run each tool call (each recorded by call id as it completes), commit a session snapshot
when something was written, then write the state file atomically (the step's commit point).
A turn without tool calls ends the model's part; then the verify command decides.
Stops are exceptions carrying their payload; the trajectory is closed in a `finally`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Protocol, Sequence

from pydantic import BaseModel

from harness.budget import Budget
from harness.context import Context
from harness.errors import ModelError, Stop
from harness.outcome import RunResult, RunState, ToolStreak, exit_code_for_outcome
from harness.trajectory import (EventRecord, OutcomeRecord, RequestRecord, StepRecord, ToolRecord, Trajectory,
                                TurnRecord, VerifyRecord, read_records, write_state)
from harness.types import Message, ModelTurn, ToolCall
from harness.verify import Verifier, feedback
from sandbox.errors import SandboxError

TOOL_FAILURE_STREAK = 3
PATCH_FILE = "change.patch"
FINAL_OUTCOMES = frozenset({"verified", "unverified", "failed_verification", "stuck"})


class SessionLike(Protocol):
    """What the loop needs of a session (`sandbox.session.Session`)."""

    dir: Path
    workspace: Path
    step: int

    def commit_step(self, note: str = "", committed_image: str | None = None) -> Any: ...
    def rollback(self, to: int) -> Any: ...
    def reset_workspace(self) -> None: ...
    def export_patch(self) -> str: ...


class Agent:
    """Drives one session's model through the tool menu until verification decides."""

    def __init__(self, *, provider: Any, registry: Any, tool_context: Any, session: SessionLike, sandbox: Any,
                 verifier: Verifier | None, verify_spec: Callable[[], Any], budget: Budget, context: Context,
                 trajectory: Trajectory, state: RunState, max_turn_tokens: int = 4096, max_verify_rounds: int = 3,
                 on_phase: Callable[[str], None] = lambda phase: None, secrets: Sequence[str] = ()) -> None:
        self.provider, self.registry, self.tool_context = provider, registry, tool_context
        self.session, self.sandbox, self.verifier, self.verify_spec = session, sandbox, verifier, verify_spec
        self.budget, self.context, self.trajectory, self.state = budget, context, trajectory, state
        self.max_turn_tokens, self.max_verify_rounds = max_turn_tokens, max_verify_rounds
        self.on_phase, self.secrets = on_phase, secrets
        self.tools = registry.schemas()
        self._sent: list[Message] = []
        if not state.context.entries:
            state.context = context.state()  # a new run: the pinned head is part of the starting state
        self._committed = state.model_copy(deep=True)
        """The state as of the last commit point: what a resume must start from."""

    def run(self) -> RunResult:
        outcome, detail, evidence = "interrupted", "", None
        try:
            self._resume_pending()
            while True:
                if self.state.awaiting_verify:
                    self._verify()
                    continue
                self.budget.check()
                self._step(self.state.step + 1)
        except Stop as stop:
            outcome, detail, evidence = stop.outcome, stop.detail, stop.evidence
        except ModelError as error:
            self.budget.charge(error.usage, error.cost_usd)  # failed calls are billed too
            self._save()  # safe: a failed call added nothing to the conversation
            outcome, detail = "model_error", f"{type(error).__name__}: {error}"
        except SandboxError as error:
            outcome, detail = "sandbox_error", f"{type(error).__name__}: {error}"
        except KeyboardInterrupt:
            self.sandbox.close()  # kills the container of the call in flight
            outcome, detail = "interrupted", "stopped by Ctrl-C; resume with `harness resume`"
        except BaseException as error:  # a bug: record it (the run stays resumable), then let it surface
            detail = f"internal error {type(error).__name__}: {error}"
            raise
        finally:
            result = self._finish(outcome, detail, evidence)
        return result

    # --- one step -------------------------------------------------------------------------------

    def _step(self, step: int) -> None:
        messages = self.context.prepare(self.tools)
        self._record_request(step, messages)
        turn: ModelTurn = self.provider.complete(messages, self.tools, max_tokens=self.max_turn_tokens)
        self.on_phase("model_answered")
        self.trajectory.append(TurnRecord(step=step, turn=turn), durable=True)
        self.on_phase("turn_recorded")
        self._take_turn(step, turn, attempt=0, reuse={})

    def _take_turn(self, step: int, turn: ModelTurn, attempt: int, reuse: dict[str, ToolRecord]) -> None:
        self.budget.charge_turn(turn)
        self.budget.charge_step()
        self.context.observe_usage(turn.usage.input_tokens)
        self.context.add_turn(turn)
        if not turn.tool_calls:
            self.state.awaiting_verify = True
            self._commit(step, wrote=False, committed_image=None)
            return
        wrote, image = False, None
        for call, record in zip(turn.tool_calls, self._run_calls(step, turn.tool_calls, attempt, reuse)):
            self.context.add_tool_result(call, record.text, record.is_error)
            self._observe_failure(record)
            wrote = wrote or record.wrote
            if record.envelope is not None and record.envelope.committed_image:
                image = record.envelope.committed_image
        self._commit(step, wrote=wrote, committed_image=image)
        if self.state.streak.count >= TOOL_FAILURE_STREAK:
            streak = self.state.streak
            raise Stop("stuck", f"{streak.name} failed {streak.count} times in a row", streak.evidence)

    def _run_calls(self, step: int, calls: list[ToolCall], attempt: int,
                   reuse: dict[str, ToolRecord]) -> list[ToolRecord]:
        """Run the calls in batches that end at each write (reads within a batch run concurrently);
        each batch's records are appended as soon as it completes."""
        records: list[ToolRecord | None] = [None] * len(calls)
        batch: list[int] = []
        for index, call in enumerate(calls):
            if call.id in reuse:
                records[index] = reuse[call.id]
                continue
            batch.append(index)
            if not self._is_read(call):
                self._execute(step, calls, batch, attempt, records)
                batch = []
        if batch:
            self._execute(step, calls, batch, attempt, records)
        return [record for record in records if record is not None]

    def _is_read(self, call: ToolCall) -> bool:
        tool = getattr(self.registry, "tools", {}).get(call.name)
        return tool is None or getattr(tool, "tier", "") == "read"

    def _execute(self, step: int, calls: list[ToolCall], batch: list[int], attempt: int,
                 records: list[ToolRecord | None]) -> None:
        results = self.registry.execute_turn([calls[i] for i in batch], self.tool_context)
        for index, result in zip(batch, results):
            call = calls[index]
            record = ToolRecord(step=step, attempt=attempt, call_id=call.id, name=call.name,
                                arguments=call.arguments, decision=_plain(result.decision),
                                envelope=result.envelope, text=result.text, is_error=result.is_error,
                                error_kind=result.error_kind, duration_ms=result.duration_ms, wrote=result.wrote)
            self.trajectory.append(record)
            records[index] = record
        self.on_phase("mid_tool")

    def _observe_failure(self, record: ToolRecord) -> None:
        """The tool circuit breaker's memory: consecutive failures of the same tool."""
        first_line = record.text.splitlines()[0] if record.text.strip() else f"{record.name}: {record.error_kind}"
        streak = self.state.streak
        if not record.is_error:
            self.state.streak = ToolStreak()
        elif streak.name == record.name:
            streak.count += 1
            streak.evidence = (streak.evidence + [first_line])[-TOOL_FAILURE_STREAK:]
        else:
            self.state.streak = ToolStreak(name=record.name, count=1, evidence=[first_line])

    def _commit(self, step: int, *, wrote: bool, committed_image: str | None) -> None:
        """Snapshot (when anything changed), record the step, then write the state: the commit point."""
        snapshot_id = None
        self.on_phase("mid_snapshot")
        if wrote or committed_image:
            record = self.session.commit_step(note=f"agent step {step}", committed_image=committed_image)
            snapshot_id = _snapshot_id(record)
            self.state.snapshot_step = self.session.step
        self.on_phase("after_snapshot")
        spent = self.budget.spent()
        self.trajectory.append(StepRecord(step=step, snapshot_step=self.state.snapshot_step, snapshot_id=snapshot_id,
                                          wrote=wrote, input_tokens=spent.input_tokens,
                                          output_tokens=spent.output_tokens, cost_usd=spent.cost_usd), durable=True)
        self.state.step = step
        self._save()

    # --- verification ---------------------------------------------------------------------------

    def _verify(self) -> None:
        if self.verifier is None:
            raise Stop("unverified", "no verify command: the model's account was not checked")
        self.state.verify_rounds += 1
        rounds = self.state.verify_rounds
        result = self.verifier.run(self.session.workspace, self.verify_spec())
        self.trajectory.append(VerifyRecord(round=rounds, passed=result.passed, exit_code=result.exit_code,
                                            status=result.status, failing=result.failing,
                                            duration_ms=result.duration_ms, output=result.output), durable=True)
        if result.passed:
            raise Stop("verified", f"`{result.command}` exited 0")
        if rounds >= self.max_verify_rounds:
            raise Stop("failed_verification", f"`{result.command}` still fails after {rounds} round(s)", result.failing)
        if self.state.last_failing == result.failing:
            raise Stop("stuck", "the same tests failed in 2 verification rounds in a row", result.failing)
        self.state.last_failing = result.failing
        self.state.awaiting_verify = False
        self.context.add_user(feedback(result, rounds, self.max_verify_rounds))
        self._save()

    # --- resume ---------------------------------------------------------------------------------

    def _resume_pending(self) -> None:
        """After a crash: restore the last complete step's workspace and finish a recorded turn once."""
        records = read_records(self.session.dir)
        if not any(r.kind == "turn" or r.kind == "step" for r in records):
            return
        if self.session.step == self.state.snapshot_step:
            self.session.reset_workspace()  # drop half-done writes of the interrupted step
        else:
            self.session.rollback(self.state.snapshot_step)  # a snapshot was taken but never recorded
        pending = [r for r in records if r.kind == "turn" and r.step == self.state.step + 1]
        if not pending:
            self.trajectory.append(EventRecord(event="resumed", detail=f"after step {self.state.step}"))
            return
        done = [r for r in records if r.kind == "tool" and r.step == self.state.step + 1]
        attempt = 1 + max((r.attempt for r in done), default=-1)
        # Reads that completed are reused; writes are re-applied to the restored workspace, once.
        reuse = {r.call_id: r for r in done if not r.wrote}
        self.trajectory.append(EventRecord(event="resumed", detail=f"re-executing the tools of step "
                                           f"{self.state.step + 1} ({len(reuse)} reused)"))
        self._take_turn(self.state.step + 1, pending[-1].turn, attempt=attempt, reuse=reuse)

    # --- bookkeeping ----------------------------------------------------------------------------

    def _record_request(self, step: int, messages: list[Message]) -> None:
        base = 0
        while base < min(len(messages), len(self._sent)) and messages[base] == self._sent[base]:
            base += 1
        self.trajectory.append(RequestRecord(step=step, base=base, messages=messages[base:],
                                             tools=[t.name for t in self.tools],
                                             estimated_tokens=self.context.estimate_tokens(self.tools)))
        self._sent = list(messages)

    def _save(self) -> None:
        self.state.context = self.context.state()
        self.state.spent = self.budget.spent()
        write_state(self.session.dir, self.state, self.secrets)
        self._committed = self.state.model_copy(deep=True)

    def _finish(self, outcome: str, detail: str, evidence: Any) -> RunResult:
        patch_path = None
        try:
            patch = self.session.export_patch()
            patch_path = Path(self.session.dir) / PATCH_FILE
            patch_path.write_text(patch, encoding="utf-8")
        except Exception as error:  # a failed export must not hide the run's outcome
            detail = f"{detail} (patch export failed: {error})".strip()
        spent = self.budget.spent()
        result = RunResult(
            session_id=self.state.session_id, outcome=outcome, detail=detail, evidence=evidence,
            exit_code=exit_code_for_outcome(outcome), verified=outcome == "verified", steps=self.state.step,
            tokens={"input": spent.input_tokens, "output": spent.output_tokens, "cached": spent.cached_input_tokens},
            cost_usd=round(spent.cost_usd, 6), elapsed_s=round(spent.elapsed_s, 3),
            verify_rounds=self.state.verify_rounds, patch=str(patch_path) if patch_path else None,
            session_dir=str(self.session.dir))
        self.trajectory.append(OutcomeRecord(outcome=outcome, detail=detail, evidence=evidence,
                                             exit_code=result.exit_code), durable=True)
        # Interrupted, model/sandbox errors and limits stay resumable; a decided outcome is final.
        # The state written is the last committed one (never a half-done step), plus the result.
        final = self._committed.model_copy(update={"finished": outcome in FINAL_OUTCOMES, "result": result})
        final.spent = final.spent.model_copy(update={"elapsed_s": spent.elapsed_s})
        write_state(self.session.dir, final, self.secrets)
        self.trajectory.close()
        return result


def _plain(value: Any) -> Any:
    return value.model_dump(mode="json") if isinstance(value, BaseModel) else value


def _snapshot_id(record: Any) -> str | None:
    for name in ("snapshot_id", "commit", "tree", "id"):
        value = getattr(record, name, None)
        if value:
            return str(value)
    return None
