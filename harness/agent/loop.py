"""The agent loop: `Agent.run()` — a while loop with a hard step limit and the only try/except ladder.

One step: prepare the context, ask the model, record its turn (write-ahead, fsynced) BEFORE any
tool runs, run each tool call (each recorded by call id as it completes), commit a session snapshot
when something was written, then write the state file atomically (the step's commit point).
A turn without tool calls ends the model's part; then the verify command decides. No tool call or
verification gets more than the wall clock left (recovery.py picks up a run that stopped mid-step).
Stops are exceptions carrying their payload; the trajectory is closed in a `finally`.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from harness import storage
from harness.agent import recovery
from harness.agent.budget import Budget
from harness.agent.context import Context, stable
from harness.agent.guard import DENIED, ReadOnlyGuard
from harness.agent.hooks import GATING, HOOK_NOTE, HookOutcome, Hooks
from harness.agent.outcome import FINAL_OUTCOMES, RunResult, RunState, infra_cause, machine_cause, outcome_kind
from harness.agent.prompt import obstacle_line
from harness.agent.repetition import NOTE
from harness.agent.seams import Provider, RegistryLike, Sandbox, SessionLike, VerifierLike
from harness.agent.verify import VerifyResult, feedback
from harness.causes import Cause
from harness.config import RepetitionConfig
from harness.errors import LimitReached, ModelError, SessionError, Stop
from harness.storage import is_storage_failure
from harness.tools.registry import ToolContext, ToolResult, error_text
from harness.trajectory import (
    DelegateRecord,
    EventRecord,
    OutcomeRecord,
    StepRecord,
    SummaryRecord,
    ToolRecord,
    Trajectory,
    TurnRecord,
    VerifyRecord,
    write_state,
)
from harness.types import Message, ModelTurn, Outcome, ToolCall
from sandbox.errors import SandboxError
from sandbox.layout import SessionFolder
from sandbox.spec import SandboxSpec

TOOL_FAILURE_STREAK = 3


WORKSPACE_FULL = (
    "\n\nNOTE from the harness: workspace full: the session's workspace quota ({quota} bytes) is used up, "
    "so writes fail with 'No space left on device'. Remove what you made that is not needed (build "
    "output, caches, large test data) before going on."
)


class Agent:
    """Drives one session's model through the tool menu until verification decides."""

    def __init__(
        self,
        *,
        provider: Provider,
        registry: RegistryLike,
        tool_context: ToolContext,
        session: SessionLike,
        sandbox: Sandbox,
        verifier: VerifierLike | None,
        verify_spec: Callable[[], SandboxSpec],
        checks: Sequence[VerifierLike] = (),
        budget: Budget,
        context: Context,
        trajectory: Trajectory,
        state: RunState,
        max_turn_tokens: int = 4096,
        max_verify_rounds: int = 3,
        repetition: RepetitionConfig | None = None,
        on_phase: Callable[[str], None] = lambda phase: None,
        secrets: Sequence[str] = (),
        guard: ReadOnlyGuard | None = None,
        hooks: Hooks | None = None,
        unchecked: str = "no verify command: the model's account was not checked",
    ) -> None:
        self.provider, self.registry, self.tool_context = provider, registry, tool_context
        self.unchecked = unchecked
        """The outcome's detail when there is no verifier (a sub-agent's: its parent checks the work)."""
        self.guard = guard
        """Puts back what a step changed in read-only paths no mount covers (globs, paths made later)."""
        self.hooks = hooks if hooks else None
        """The lifecycle hooks (harness.agent.hooks: the user's, a repository's with --repo-hooks);
        None when none is configured."""
        self.session, self.sandbox, self.verifier, self.verify_spec = session, sandbox, verifier, verify_spec
        self.checks = list(checks)
        """Layers after verify (a linter, a type check, a scan): verified only when every one passes."""
        self.budget, self.context, self.trajectory, self.state = budget, context, trajectory, state
        self.max_turn_tokens, self.max_verify_rounds = max_turn_tokens, max_verify_rounds
        self.repetition = repetition or RepetitionConfig()
        self.on_phase, self.secrets = on_phase, secrets
        self.tools = registry.schemas()
        if not state.context.entries:
            state.context = context.state()  # a new run: the pinned head is part of the starting state
        self._committed = state.model_copy(deep=True)
        """The state as of the last commit point: what a resume must start from."""
        self.keep_workspace = False
        self._follow_up: str | None = None
        """A hosted agent's run: its workspace is as the agent left it, and stays so on a resume
        (harness.agent.recovery), since the agent remembers making its own edits."""

    def run(self) -> RunResult:
        outcome: Outcome = "interrupted"
        detail, evidence, cause = "", None, None
        try:
            pending = recovery.restore(self.session, self.state, self.trajectory, keep_workspace=self.keep_workspace)
            self._session_start(resumed=pending is not None or self.state.step > 0)
            if pending is not None:
                self._take_turn(pending.step, pending.turn, attempt=pending.attempt, reuse=pending.reuse)
            self._take_follow_up()
            while True:
                if self.state.awaiting_verify:
                    self.budget.check_halted()  # (another attempt verified first: no verification of this one)
                    self._verify()
                    continue
                self.budget.check()
                self._step(self.state.step + 1)
        except Stop as stop:
            outcome, detail, evidence = stop.outcome, stop.detail, stop.evidence
        except ModelError as error:
            self.budget.charge(error.usage, error.cost_usd)  # failed calls are billed too
            self._save()  # safe: a failed call added nothing to the conversation
            outcome, detail, cause = "model_error", f"{type(error).__name__}: {error}", machine_cause(error)
            remaining = self.budget.remaining_s()
            if remaining is not None and remaining < self.budget.limits.min_call_s:  # cut short by the wall clock
                outcome, detail, cause = "limit:wall_clock", f"the model call ran into the wall clock ({detail})", None
        except SandboxError as error:
            outcome, detail, cause = "infra_error", f"{type(error).__name__}: {error}", infra_cause(error)
        except OSError as error:
            if not is_storage_failure(error):
                detail = f"internal error {type(error).__name__}: {error}"
                raise
            outcome, detail = "state_error", storage.describe(error, self.session.dir)
        except KeyboardInterrupt:
            if self.tool_context.delegator is not None:
                self.tool_context.delegator.stop()  # sub-agents in other threads end at their next step
            self.sandbox.close()  # kills the container of the call in flight
            outcome, detail = (
                "interrupted",
                self.budget.halt_reason() or "stopped by Ctrl-C; resume with `harness resume`",
            )
        except BaseException as error:  # a bug: record it (the run stays resumable), then let it surface
            detail = f"internal error {type(error).__name__}: {error}"
            raise
        finally:
            result = self._finish(outcome, detail, evidence, cause)
        return result

    # --- one step -------------------------------------------------------------------------------

    def _step(self, step: int) -> None:
        messages = self._prepared(step)
        self.trajectory.append_request(step, messages, self.tools, self.context.estimate_tokens(self.tools))
        deadline = self.budget.deadline()  # the model call (and its retries) ends with the wall clock
        turn: ModelTurn = self.provider.complete(
            messages, self.tools, max_tokens=self.max_turn_tokens, timeout_s=deadline.left_s
        )
        self.on_phase("model_answered")
        self.trajectory.append(TurnRecord(step=step, turn=turn), durable=True)
        self.on_phase("turn_recorded")
        self._take_turn(step, turn, attempt=0, reuse={})

    def _prepared(self, step: int) -> list[Message]:
        """The messages of the next call: folded (second tier) and, when that is not enough,
        summarised (third tier) by a separate, metered model call."""
        messages = self.context.prepare(self.tools)
        if self.context.last_fold:
            self.trajectory.append(EventRecord(event="context_folded", detail=self.context.last_fold))
        if not self.context.needs_summary:
            return messages
        before = self.context.estimate_tokens(self.tools)
        request = self.context.summary_request()
        deadline = self.budget.deadline()
        try:
            turn = self.provider.complete(
                request, [], max_tokens=self.context.config.summary_max_tokens, timeout_s=deadline.left_s
            )
        except ModelError as error:
            self.budget.charge(error.usage, error.cost_usd)
            raise LimitReached("context", f"~{before} tokens and the summary call failed ({error})") from None
        self.budget.charge(turn.usage, turn.cost_usd)
        if not turn.text.strip():
            raise LimitReached("context", f"~{before} tokens and the summary came back empty")
        through, excluded = self.context.apply_summary(turn.text)
        self.trajectory.append(
            SummaryRecord(
                step=step,
                through_turn=through,
                text=turn.text,
                excluded=excluded,
                input_tokens=turn.usage.input_tokens,
                output_tokens=turn.usage.output_tokens,
                cost_usd=turn.cost_usd,
                before_tokens=before,
                after_tokens=self.context.estimate_tokens(self.tools),
            ),
            durable=True,
        )
        return self.context.prepare(self.tools)  # a context still too big after it ends limit:context

    def _take_turn(self, step: int, turn: ModelTurn, attempt: int, reuse: dict[str, ToolRecord]) -> None:
        self.budget.charge_turn(turn)
        self.budget.charge_step()
        self.context.observe_usage(turn.usage.input_tokens)
        self.context.add_turn(turn)
        if not turn.tool_calls:
            obstacle = obstacle_line(turn.text)
            if obstacle:  # asked for in the final reply (see the system prompt); the report groups them
                self.trajectory.append(EventRecord(event="obstacle", detail=obstacle))
            refused = self._stop_hooks(step, turn)
            self.state.awaiting_verify = refused is None
            if refused is not None:  # a Stop hook wants more work first: the model hears why
                self.context.add_user(refused)
            self._commit(step, wrote=False, committed_image=None)
            return
        wrote, image, repeated = False, None, None
        for call, record in zip(turn.tool_calls, self._run_calls(step, turn.tool_calls, attempt, reuse), strict=False):
            seen = stable(record.text, call.name)  # what the model reads, and what a repetition is judged by
            self.state.repetition = self.state.repetition.observe(step, call, seen)
            verdict = self.state.repetition.verdict(self.repetition)
            text = seen + NOTE.format(what=verdict[1]) if verdict is not None else seen
            full = self.session.workspace_full()
            if full:
                text += WORKSPACE_FULL.format(quota=full)
            self.context.add_tool_result(call, text, record.is_error)
            repeated = verdict if verdict is not None and verdict[0] == "stuck" else repeated
            self._observe_failure(record)
            wrote = wrote or record.wrote
            if record.envelope is not None and record.envelope.committed_image:
                image = record.envelope.committed_image
        denied = self.guard.check() if self.guard is not None and wrote else []
        if denied:
            self.trajectory.append(EventRecord(event="read_only_restored", detail=", ".join(denied)))
            self.context.add_user(DENIED.format(paths=", ".join(denied[:20])))
        self._commit(step, wrote=wrote, committed_image=image)
        if repeated is not None:
            recent = self.state.repetition
            evidence = [f"step {s}: {label}" for s, label in zip(recent.steps[-6:], recent.labels[-6:], strict=True)]
            raise Stop("stuck", repeated[1], evidence)
        if self.state.streak.count >= TOOL_FAILURE_STREAK:
            streak = self.state.streak
            raise Stop("stuck", f"{streak.name} failed {streak.count} times in a row", streak.evidence)

    def _run_calls(
        self, step: int, calls: list[ToolCall], attempt: int, reuse: dict[str, ToolRecord]
    ) -> list[ToolRecord]:
        """Run the calls segment by segment as the registry schedules them; each segment's records
        are appended as soon as it completes (calls a resume already has results for are reused)."""
        records: list[ToolRecord | None] = [reuse.get(call.id) for call in calls]
        pending = [index for index, record in enumerate(records) if record is None]
        for segment in self.registry.segments([calls[i] for i in pending]):
            self._execute(step, calls, [pending[i] for i in segment], attempt, records)
        return [record for record in records if record is not None]

    def _execute(
        self, step: int, calls: list[ToolCall], batch: list[int], attempt: int, records: list[ToolRecord | None]
    ) -> None:
        context = dataclasses.replace(self.tool_context, deadline=self.budget.deadline(), step=step)
        blocked: dict[int, ToolResult] = {}
        if self.hooks is not None:
            for index in batch:
                calls[index], refusal = self._pre_tool(step, calls[index])
                if refusal is not None:
                    blocked[index] = refusal
        allowed = [index for index in batch if index not in blocked]
        try:
            ran = dict(zip(allowed, self.registry.execute_turn([calls[i] for i in allowed], context), strict=False))
        except KeyboardInterrupt:  # Ctrl-C, SIGTERM, a client's cancel: the record says what was cut short
            names = ", ".join(f"{calls[i].name} ({calls[i].id})" for i in allowed) or "none"
            detail = f"step {step}: killed in flight: {names}; the step is not complete, a resume runs its calls again"
            self.trajectory.append(EventRecord(event="calls_interrupted", detail=detail), durable=True)
            raise
        self.on_phase("calls_returned")  # before their records: a sub-agent stopped meanwhile records none
        for index in batch:
            result = blocked.get(index) or ran[index]
            if self.hooks is not None and index in ran:
                result = self._post_tool(step, calls[index], result)
            record = ToolRecord.of(step, attempt, calls[index], result)
            records[index] = record
            self.trajectory.append(record)
        self.on_phase("mid_tool")

    # --- hooks ----------------------------------------------------------------------------------

    def _hook(self, event: str, payload: dict[str, Any], step: int) -> HookOutcome:
        assert self.hooks is not None
        outcome = self.hooks.run(event, payload, step=step, deadline=self.budget.deadline())
        for record in outcome.records:
            self.trajectory.append(record, durable=event in GATING)  # a decision is written before it acts
        return outcome

    def _pre_tool(self, step: int, call: ToolCall) -> tuple[ToolCall, ToolResult | None]:
        """PreToolUse: the call as the hooks leave it (their updatedInput goes through the gate like
        the model's own), or the result of a call they blocked."""
        if self.hooks is None or call.parse_error is not None or not self.hooks.wanted("PreToolUse", call.name):
            return call, None  # a call whose arguments did not parse never runs: nothing to ask about
        payload = {"tool_name": call.name, "tool_input": call.arguments, "tool_use_id": call.id}
        outcome = self._hook("PreToolUse", {**payload, "snapshot_id": self._snapshot_id()}, step)
        if outcome.blocked:
            text = error_text("hook_blocked", f"the hook `{outcome.hook}` blocked {call.name}: {outcome.reason}")
            return call, ToolResult(
                call_id=call.id,
                name=call.name,
                text=_with_context(text, outcome),
                is_error=True,
                error_kind="hook_blocked",
            )
        if outcome.updated_input is not None:
            call = call.model_copy(update={"arguments": outcome.updated_input, "raw_arguments": None})
        return call, None

    def _post_tool(self, step: int, call: ToolCall, result: ToolResult) -> ToolResult:
        """PostToolUse (an observer): the hooks get the whole envelope; what they say back is added to
        the result the model reads."""
        if self.hooks is None or not self.hooks.wanted("PostToolUse", call.name):
            return result
        envelope = result.envelope.model_dump(mode="json") if result.envelope is not None else None
        response = {
            "text": result.text,
            "is_error": result.is_error,
            "error_kind": result.error_kind,
            "envelope": envelope,
        }
        payload = {
            "tool_name": call.name,
            "tool_input": call.arguments,
            "tool_use_id": call.id,
            "tool_response": response,
        }
        outcome = self._hook("PostToolUse", {**payload, "snapshot_id": self._snapshot_id()}, step)
        return result.model_copy(update={"text": _with_context(result.text, outcome)}) if outcome.context else result

    def _stop_hooks(self, step: int, turn: ModelTurn) -> str | None:
        """Stop, before verification decides: None to go on, else what the model is told instead."""
        if self.hooks is None or not self.hooks.wanted("Stop"):
            return None
        payload = {"stop_hook_active": self.state.stop_refused, "last_assistant_message": turn.text}
        outcome = self._hook("Stop", payload, step)
        self.state.stop_refused = outcome.blocked
        if not outcome.blocked:
            return None
        return _with_context(
            f"NOTE from the harness: the Stop hook `{outcome.hook}` refused to stop: {outcome.reason}", outcome
        )

    def _session_start(self, *, resumed: bool) -> None:
        if self.hooks is None or not self.hooks.wanted("SessionStart"):
            return
        outcome = self._hook("SessionStart", {"source": "resume" if resumed else "startup"}, self.state.step)
        if outcome.context:
            self.context.add_user("Context from a SessionStart hook:\n" + "\n".join(outcome.context))

    def _snapshot_id(self) -> str | None:
        return getattr(self.session, "last_tree", None)

    def _observe_failure(self, record: ToolRecord) -> None:
        """The tool circuit breaker's memory: consecutive failures of the same tool."""
        first_line = record.text.splitlines()[0] if record.text.strip() else f"{record.name}: {record.error_kind}"
        self.state.streak = self.state.streak.after(record.name, record.is_error, first_line, TOOL_FAILURE_STREAK)

    def _commit(self, step: int, *, wrote: bool, committed_image: str | None) -> None:
        """Snapshot (when anything changed), record the step, then write the state: the commit point."""
        snapshot_id, before = None, self.state.snapshot_step
        self.on_phase("mid_snapshot")
        if wrote or committed_image:
            # run_command always reports wrote=True: a step whose tree and image did not change is not recorded.
            record = self.session.commit_step(
                note=f"agent step {step}", committed_image=committed_image, skip_unchanged=True
            )
            snapshot_id = record.tree
            self.state.snapshot_step = self.session.step
        self.on_phase("after_snapshot")
        spent = self.budget.spent()
        self.trajectory.append(
            StepRecord(
                step=step,
                snapshot_step=self.state.snapshot_step,
                snapshot_id=snapshot_id,
                wrote=wrote,
                changed=self.state.snapshot_step != before,
                input_tokens=spent.input_tokens,
                output_tokens=spent.output_tokens,
                cost_usd=spent.cost_usd,
            ),
            durable=True,
        )
        self.state.step = step
        self._save()

    # --- verification ---------------------------------------------------------------------------

    def _verify(self) -> None:
        if self.verifier is None:
            raise Stop("unverified", self.unchecked)
        spec = self.budget.deadline().cap(self.verify_spec())  # before the round is counted: a stop spends none
        self.state.verify_rounds += 1
        rounds = self.state.verify_rounds
        result, layer = self.verifier.run(self.session.workspace, spec), "verify"
        self._record_round(rounds, result, layer)
        if result.passed:
            for number, check in enumerate(self.checks, start=1):
                result, layer = check.run(self.session.workspace, spec), f"check {number} of {len(self.checks)}"
                self._record_round(rounds, result, layer)
                if not result.passed:
                    break
            else:
                passed = f"; {len(self.checks)} check(s) passed" if self.checks else ""
                raise Stop("verified", f"`{self.verifier_command()}` exited 0{passed}")
        cause = f"; {result.cause}" if result.cause else ""
        if rounds >= self.max_verify_rounds:
            what = f"`{result.command}`" + ("" if layer == "verify" else f" ({layer})")
            raise Stop("failed_verification", f"{what} still fails after {rounds} round(s){cause}", result.failing)
        if self.state.last_failing == result.failing:
            raise Stop("stuck", f"the same tests failed in 2 verification rounds in a row{cause}", result.failing)
        self.state.last_failing = result.failing
        self.state.awaiting_verify = False
        self.context.add_user(feedback(result, rounds, self.max_verify_rounds, layer))
        self._save()

    def verifier_command(self) -> str:
        return getattr(self.verifier, "command", "verify")

    def _record_round(self, rounds: int, result: VerifyResult, layer: str) -> None:
        self.trajectory.append(
            VerifyRecord(
                round=rounds,
                layer=layer,
                command=result.command,
                passed=result.passed,
                exit_code=result.exit_code,
                status=result.status,
                failing=result.failing,
                duration_ms=result.duration_ms,
                output=result.output,
                cause=result.cause,
            ),
            durable=True,
        )

    # --- between steps -------------------------------------------------------------------------

    def follow_up(self, text: str) -> None:
        """A user's next request in the same conversation (a resumed run's): the model reads it once the
        last step is complete (a step cut short finishes first: its calls' results come before it)."""
        self._follow_up = text

    def _take_follow_up(self) -> None:
        if self._follow_up is None:
            return
        self.context.add_user(self._follow_up)
        self.state.awaiting_verify = False  # a new request: the model goes on before anything is verified
        self.trajectory.append(EventRecord(event="follow_up", detail=self._follow_up[:2000]), durable=True)
        self._follow_up = None
        self._save()

    def roll_back(self, to: int) -> str:
        """The workspace and image as they were after run step `to`, as a snapshot of their own; the
        next step goes on from there (its record says so). Between two steps only: a served session's
        `rollback`, run on the loop's thread while it waits for the next call. What it did, in a line."""
        from harness.steps import StepMap

        steps = StepMap.of(Path(self.session.dir), self.state.session_id, self.session.step)
        self.session.rollback(steps.snapshot(to), note=f"rollback to the state after step {to}")
        self.state.snapshot_step = self.session.step
        said = f"restored the state after step {to}; the next step goes on from there"
        self.trajectory.append(EventRecord(event="rolled_back", detail=said), durable=True)
        self._save()
        return said

    # --- bookkeeping ----------------------------------------------------------------------------

    def _save(self) -> None:
        self.state.context = self.context.state()
        self.state.spent = self.budget.spent()
        write_state(self.session.dir, self.state, self.secrets)
        self._committed = self.state.model_copy(deep=True)

    def _finish(self, outcome: Outcome, detail: str, evidence: Any, cause: Cause | None) -> RunResult:
        patch_path = None
        try:
            patch = self.session.export_patch()
            patch_path = SessionFolder(Path(self.session.dir)).patch
            patch_path.write_text(patch, encoding="utf-8")
        except Exception as error:  # noqa: BLE001 - a failed export must not hide the run's outcome
            detail = f"{detail} (patch export failed: {error})".strip()
        spent = self.budget.spent()
        if self.hooks is not None and self.hooks.wanted("SessionEnd"):
            with contextlib.suppress(OSError):  # an observer: the run's outcome stands whatever it does
                self._hook("SessionEnd", {"reason": outcome, "detail": detail}, self.state.step)
        result = RunResult.of(
            self.state,
            outcome,
            detail,
            evidence,
            spent,
            patch=str(patch_path) if patch_path else None,
            session_dir=str(self.session.dir),
            cause=cause,
            subagent_steps=self._subagent_steps(),
        )
        try:
            self.trajectory.append(
                OutcomeRecord(
                    outcome=outcome, detail=detail, evidence=evidence, exit_code=result.exit_code, cause=result.cause
                ),
                durable=True,
            )
            # Interrupted, model/sandbox errors and limits stay resumable; a decided outcome is final.
            # The state written is the last committed one (never a half-done step), plus the result.
            final = self._committed.model_copy(
                update={"finished": outcome_kind(outcome) in FINAL_OUTCOMES, "result": result}
            )
            final.spent = final.spent.model_copy(update={"elapsed_s": spent.elapsed_s})
            write_state(self.session.dir, final, self.secrets)
        except OSError as error:
            if not is_storage_failure(error):
                raise
            # The disk failed while recording the end: the last committed state stays as it was
            # (resumable), and the result says why the end is not on record.
            result = RunResult.of(
                self.state,
                "state_error",
                storage.describe(error, self.session.dir),
                evidence,
                spent,
                patch=None,
                session_dir=str(self.session.dir),
            )
        finally:
            with contextlib.suppress(OSError):  # closing flushes: a full disk already said so above
                self.trajectory.close()
        return result

    def _subagent_steps(self) -> int:
        """The steps of this agent's sub-agents, theirs included (0 without delegation)."""
        if self.tool_context.delegator is None:
            return 0
        with contextlib.suppress(OSError, SessionError):
            ended = [r for r in self.trajectory.records() if isinstance(r, DelegateRecord) and r.phase == "end"]
            return sum(r.steps for r in ended)
        return 0


def _with_context(text: str, outcome: HookOutcome) -> str:
    """A text with the context hooks gave the model after it."""
    if not outcome.context:
        return text
    return text + HOOK_NOTE + "\n".join(outcome.context)
