"""Sub-agents: the `delegate` tool, and the Delegator that runs a child under a reserve of its parent's
budget, on a branch of its parent's snapshots, in its parent's trajectory.

- **Budget**: a child's limits are taken out of what its parent has left (less the unused reserves of
  the children running now) and every charge of the child counts against every enclosing budget
  (`Budget.reserve`), so the tree never passes the run's limits; what a child does not use is its
  parent's again when it ends.
- **Files**: a child is a session forked from its parent's (its objects shared, nothing copied) whose
  first step is the parent's workspace at the call; when it ends, the paths it changed are taken over
  into the parent's workspace (one step of the parent: the delegating call writes), unless the parent
  changed one of them since in another way, which is reported as a conflict and nothing is applied.
- **Records**: a `DelegateRecord` (start) before the child's first record, the child's records with
  `agent` set to its name, a `DelegateRecord` (end) with its outcome, change and spend.
- **Resume**: a crash leaves the parent's turn recorded and its delegating call unfinished; the resume
  runs that call again, which finds the start record by call id, opens the child's session and runs
  the child on from its own last step (or, if it had ended, applies its change again).
- **Caps**: `[delegate] depth` levels below the run's agent, `at_once` children running across the tree.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from harness.agent.budget import Budget, Reserve
from harness.agent.outcome import RunResult, RunState
from harness.errors import ToolError
from harness.tools.registry import Outcome, ToolContext, tool
from harness.trajectory import DelegateRecord, Record, Trajectory, TurnRecord

if TYPE_CHECKING:
    from harness.agent.loop import Agent
    from harness.config import DelegateConfig, LimitsConfig
    from sandbox.session.session import Session

DIFF_CHARS = 12_000
"""The child's diff in the delegating agent's result: head and tail beyond this."""


@dataclass
class Tree:
    """What every delegator of one run shares: the caps and the children running now."""

    config: DelegateConfig
    running: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    stopped: threading.Event = field(default_factory=threading.Event)
    """Set when the person stops the run: every sub-agent ends at its next step."""


@dataclass
class Child:
    """What the composition root builds a child agent from."""

    name: str
    session: Session
    """The child's session (a fork of the delegating agent's)."""
    state: RunState
    trajectory: Trajectory
    budget: Budget
    delegator: Delegator | None
    """The child's own delegator (None at the depth cap: its `delegate` calls are refused)."""


@dataclass
class Branching:
    """How children's sessions are made and opened (the composition root's, over sandbox.session)."""

    fork: Callable[[Session, str, str, int], Session]
    """(parent session, child session id, child name, the parent's run step) -> a session whose steps
    are the parent's so far."""
    open: Callable[[str], Session]
    """child session id -> that session, at its last step."""


class Delegator:
    """Starts the sub-agents of one agent (the run's own, or a child's)."""

    def __init__(
        self,
        *,
        tree: Tree,
        depth: int,
        prefix: str,
        session: Session,
        trajectory: Trajectory,
        budget: Budget,
        branching: Branching,
        build: Callable[[Child], Agent],
        limits: LimitsConfig,
    ) -> None:
        self.tree, self.depth, self.prefix = tree, depth, prefix
        self.session, self.trajectory, self.budget = session, trajectory, budget
        self.branching, self.build, self.limits = branching, build, limits
        self._apply_lock = threading.Lock()

    # --- one delegation ---------------------------------------------------------------------------

    def run(self, ctx: ToolContext, task: str, ask: Reserve, apply: bool) -> Outcome:
        """Run a child to its end (or pick up the one this call started before a crash); what the
        delegating model reads back."""
        records = self.trajectory.records()
        mine = [r for r in records if isinstance(r, DelegateRecord) and r.call_id == ctx.call_id]
        start = next((r for r in mine if r.phase == "start"), None)
        end = next((r for r in mine if r.phase == "end"), None)
        if end is not None and start is not None:  # it ended before the crash: its change is applied again
            session = self.branching.open(start.session)
            conflicts = self._merge(start.base, session, end.paths) if end.change == "applied" else []
            if conflicts:
                end = end.model_copy(update={"change": "conflict", "conflicts": conflicts})
            return self._taken_over(start, session, end)
        if self.depth >= self.tree.config.depth:
            raise ToolError(
                "tool_error",
                f"sub-agents may go {self.tree.config.depth} level(s) deep and this agent is at that depth. "
                "Do the work yourself with the other tools.",
            )
        position = _position(records, ctx.step, ctx.call_id)
        at_once = self.tree.config.at_once
        if position >= at_once:
            raise ToolError(
                "tool_error",
                f"this is delegate call {position + 1} of the turn and the run allows {at_once} sub-agent(s) at once. "
                "Delegate fewer pieces in one turn, or do this one yourself.",
            )
        with self.tree.lock:
            if self.tree.running >= at_once:
                raise ToolError(
                    "tool_error",
                    f"{self.tree.running} sub-agent(s) are running in this run and it allows {at_once} at once. "
                    "Do this piece yourself, or delegate it once they have ended.",
                )
            self.tree.running += 1
        try:
            if start is not None:
                return self._resumed(start, apply)
            earlier = sum(
                1 for r in records if isinstance(r, DelegateRecord) and r.phase == "start" and r.step < ctx.step
            )
            return self._started(ctx, f"{self.prefix}d{earlier + position + 1}", task, ask, apply)
        finally:
            with self.tree.lock:
                self.tree.running -= 1

    def _started(self, ctx: ToolContext, name: str, task: str, ask: Reserve, apply: bool) -> Outcome:
        limits = self._limits(ask)
        base = self.session.tree_now()  # the workspace as the calls before this one left it
        session = self.branching.fork(self.session, f"{self.session.id}-{name.replace('.', '-')}", name, ctx.step)
        session.restore_tree(base)
        session.commit_step(note=f"delegated by {self.session.id} at its step {ctx.step}", skip_unchanged=True)
        start = DelegateRecord(
            phase="start",
            step=ctx.step,
            call_id=ctx.call_id,
            child=name,
            session=session.id,
            task=task,
            base=base,
            reserve={
                "max_steps": limits.max_steps,
                "max_tokens": limits.max_tokens,
                "max_cost_usd": limits.max_cost_usd,
                "timeout_min": limits.timeout_min,
            },
        )
        self.trajectory.append(start, durable=True)
        state = RunState(session_id=session.id, task=task, model="", snapshot_step=session.step)
        return self._ran(start, session, state, limits, apply)

    def _resumed(self, start: DelegateRecord, apply: bool) -> Outcome:
        from harness.trajectory import read_state

        session = self.branching.open(start.session)
        state = read_state(session.dir, RunState) or RunState(
            session_id=session.id, task=start.task, model="", snapshot_step=session.step
        )
        self.budget.add(state.spent)  # this agent's saved state predates the child's spending
        limits = self.limits.model_copy(update={key: value for key, value in start.reserve.items()})
        return self._ran(start, session, state, limits, apply)

    def _ran(
        self, start: DelegateRecord, session: Session, state: RunState, limits: LimitsConfig, apply: bool
    ) -> Outcome:
        budget = self.budget.reserve(limits, state.spent, halted=self.tree.stopped.is_set)
        trajectory = self.trajectory.child(start.child)
        try:
            if state.finished and state.result is not None:  # it ended; a crash came before its end record
                result = state.result
            else:
                below = self.for_child(start.child, session, trajectory, budget)
                result = self.build(Child(start.child, session, state, trajectory, budget, below)).run()
        finally:
            self.budget.release(budget)
        if self.tree.stopped.is_set():
            raise KeyboardInterrupt  # the person stopped the run (Ctrl-C), not only this child
        final = _final_text(trajectory)
        end = self._end(start, session, result, final, apply)
        return self._taken_over(start, session, end)

    def stop(self) -> None:
        """The person stopped the run (Ctrl-C): the sub-agents running in other threads end at their
        next step (their calls in flight end with the sandbox, which the loop closes)."""
        self.tree.stopped.set()

    def for_child(self, name: str, session: Session, trajectory: Trajectory, budget: Budget) -> Delegator:
        """The delegator of a child (it refuses at the depth cap)."""
        return Delegator(
            tree=self.tree,
            depth=self.depth + 1,
            prefix=f"{name}.",
            session=session,
            trajectory=trajectory,
            budget=budget,
            branching=self.branching,
            build=self.build,
            limits=budget.limits,
        )

    def _end(
        self, start: DelegateRecord, session: Session, result: RunResult, final: str, apply: bool
    ) -> DelegateRecord:
        """Take the child's change over (or not) and record its end."""
        changed = [p for p in session.changed_paths(start.base, session.last_tree) if not p.endswith("/")]
        change, conflicts = ("none" if not changed else "applied" if apply else "discarded"), []
        if change == "applied":
            conflicts = self._merge(start.base, session, changed)
            change = "conflict" if conflicts else "applied"
        tokens = result.tokens
        end = start.model_copy(
            update={
                "phase": "end",
                "ts": time.time(),
                "agent": None,
                "outcome": result.outcome,
                "detail": result.detail,
                "change": change,
                "paths": changed,
                "conflicts": conflicts,
                "final": final,
                "steps": result.steps + result.subagent_steps,
                "input_tokens": tokens.get("input", 0),
                "output_tokens": tokens.get("output", 0),
                "cost_usd": result.cost_usd,
            }
        )
        self.trajectory.append(end, durable=True)
        return end

    def _merge(self, base: str, child: Session, changed: list[str]) -> list[str]:
        """Apply the child's changed paths to this agent's workspace; the paths this agent changed
        since in another way (nothing applied then)."""
        with self._apply_lock:
            now = self.session.tree_now()
            mine = set(p for p in self.session.changed_paths(base, now) if not p.endswith("/"))
            differ = set(self.session.changed_paths(child.last_tree, now))
            conflicts = [p for p in changed if p in mine and p in differ]
            if conflicts:
                return conflicts
            self.session.restore_tree(self.session.graft(now, child.last_tree, changed))
            return []

    def _taken_over(self, start: DelegateRecord, session: Session, end: DelegateRecord) -> Outcome:
        """The result the delegating model reads: outcome, spend, what became of the change, the final
        message and the diff."""
        lines = [
            f"sub-agent {end.child} ended: {end.outcome}" + (f" ({end.detail})" if end.detail else ""),
            f"it used {end.steps} step(s), {end.input_tokens + end.output_tokens} tokens, ${end.cost_usd:.4f}",
        ]
        listed = ", ".join(end.paths[:20]) + (f" and {len(end.paths) - 20} more" if len(end.paths) > 20 else "")
        lines.append(
            {
                "applied": f"its change is applied to your workspace: {listed}",
                "conflict": "its change is NOT applied: you changed these paths since it started, differently: "
                + ", ".join(end.conflicts)
                + ". Its diff is below: apply what you want of it yourself.",
                "discarded": f"its change is discarded, as you asked (it changed: {listed})",
                "none": "it changed no file",
            }.get(end.change, "")
        )
        lines += ["its final message:", end.final.strip() or "(none)"]
        if end.paths:
            text = session.diff_trees(start.base, session.last_tree).text
            if len(text) > DIFF_CHARS:
                text = text[: DIFF_CHARS // 2] + "\n[... diff cut ...]\n" + text[-DIFF_CHARS // 2 :]
            lines += ["its diff:", text]
        return Outcome(text="\n".join(lines), wrote=end.change == "applied")

    def _limits(self, ask: Reserve) -> LimitsConfig:
        """The child's limits: what the model asked for (or the configured share of what is left),
        never more than what is left; ToolError when nothing is left to give."""
        left, share = self.budget.left(), self.tree.config.share
        if left.steps < 1:
            raise ToolError("tool_error", "no steps are left to give a sub-agent. Finish the task yourself.")

        def part(asked: float | None, available: float | None) -> float | None:
            if available is None:
                return asked
            return min(asked if asked is not None else available * share, available)

        steps = max(1, min(ask.steps or int(left.steps * share) or 1, left.steps))
        tokens, cost, seconds = (
            part(ask.tokens, left.tokens),
            part(ask.cost_usd, left.cost_usd),
            part(ask.seconds, left.seconds),
        )
        if (
            (tokens is not None and tokens < 1)
            or (cost is not None and cost <= 0)
            or (seconds is not None and seconds < 1)
        ):
            raise ToolError(
                "tool_error", "nothing is left of the run's budget to give a sub-agent. Finish the task yourself."
            )
        return self.limits.model_copy(
            update={
                "max_steps": steps,
                "max_tokens": int(tokens) if tokens is not None else None,
                "max_cost_usd": cost,
                "timeout_min": seconds / 60 if seconds is not None else None,
            }
        )


def _position(records: list[Record], step: int, call_id: str) -> int:
    """Where a delegate call stands among the delegate calls of its turn (names and the cap on children
    at once follow the turn's order, whichever thread starts first)."""
    turn = next((r.turn for r in reversed(records) if isinstance(r, TurnRecord) and r.step == step), None)
    ids = [c.id for c in turn.tool_calls if c.name == "delegate"] if turn is not None else []
    return ids.index(call_id) if call_id in ids else len(ids)


def _final_text(trajectory: Trajectory) -> str:
    turns = [r for r in trajectory.records() if isinstance(r, TurnRecord)]
    return next((r.turn.text for r in reversed(turns) if not r.turn.tool_calls), "")


@tool("exec", together=True)
def delegate(
    ctx: ToolContext,
    task: Annotated[str, Field(min_length=1, max_length=20_000)],
    steps: Annotated[int | None, Field(ge=1, le=10_000)] = None,
    tokens: Annotated[int | None, Field(ge=1)] = None,
    cost_usd: Annotated[float | None, Field(gt=0)] = None,
    minutes: Annotated[float | None, Field(gt=0)] = None,
    apply: bool = True,
) -> Outcome:
    """Hand one self-contained piece of the task to a sub-agent and wait for its result.

    The sub-agent starts with a fresh conversation (only your `task` text, no memory of yours), the
    same tools and permissions, and a copy of your workspace as it is now; its budget is taken out of
    what you have left and what it does not use comes back. The result gives its outcome, its final
    message and its diff; its change is applied to your workspace unless you changed the same files
    since (then nothing is applied and the conflict is named). Several delegate calls in one turn run
    at once, each on its own copy.
    Use it for a piece you can describe completely in words: investigating a module, a fix in an
    area you name. Do NOT use it for a one-line edit, to run the tests (run_tests) or to read a file.

    Args:
      task: everything the sub-agent needs to know: the goal, the files, what to leave alone, what to report.
      steps: model steps it may use (default: a share of what you have left).
      tokens: tokens it may use (default: a share of what you have left).
      cost_usd: USD it may spend (default: a share of what you have left).
      minutes: wall-clock minutes it may take (default: a share of what you have left).
      apply: false to keep its change out of your workspace (you still get its diff).
    """
    if ctx.delegator is None:
        raise ToolError("tool_error", "this run has no sub-agents. Do the work with the other tools.")
    ask = Reserve(steps=steps or 0, tokens=tokens, cost_usd=cost_usd, seconds=minutes * 60 if minutes else None)
    delegator: Delegator = ctx.delegator
    return delegator.run(ctx, task, ask, apply)
