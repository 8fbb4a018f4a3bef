"""Pick a run up where it stopped: restore the workspace of the last complete step and find the turn
that was recorded (write-ahead) but never committed, so its tools run once more.

The state file marks the last commit point; anything the trajectory holds beyond it is a step the
crash cut short. Its reads that completed are reused; its writes are re-applied to the restored
workspace, once.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.agent.outcome import RunState
from harness.agent.seams import SessionLike
from harness.trajectory import EventRecord, ToolRecord, Trajectory
from harness.types import ModelTurn


@dataclass
class PendingTurn:
    """A recorded turn whose step never committed."""

    step: int
    turn: ModelTurn
    attempt: int
    """1 + the last attempt recorded for this step's tools (each re-execution is numbered)."""
    reuse: dict[str, ToolRecord] = field(default_factory=dict)
    """Completed read results by call id: not run again."""


def restore(
    session: SessionLike, state: RunState, trajectory: Trajectory, *, keep_workspace: bool = False
) -> PendingTurn | None:
    """Bring the workspace back to the state's snapshot and return the turn left to finish, if any.

    A fresh run (nothing recorded yet) is left alone. The resume is noted in the trajectory.
    keep_workspace: the workspace is as a hosted agent left it, and the agent remembers making it so
    (its own edits cannot be made again by harness): it stays, and the next step snapshots it.
    """
    records = trajectory.records()  # a sub-agent's own, in its parent's file
    if not any(r.kind == "turn" or r.kind == "step" for r in records):
        return None
    if keep_workspace:
        pass
    elif session.step == state.snapshot_step:
        session.reset_workspace()  # drop half-done writes of the interrupted step
    else:
        session.rollback(state.snapshot_step)  # a snapshot was taken but never recorded
    step = state.step + 1
    pending = [r for r in records if r.kind == "turn" and r.step == step]
    if not pending:
        trajectory.append(EventRecord(event="resumed", detail=f"after step {state.step}"))
        return None
    done = [r for r in records if r.kind == "tool" and r.step == step]
    reuse = {r.call_id: r for r in done if not r.wrote}
    trajectory.append(
        EventRecord(event="resumed", detail=f"re-executing the tools of step {step} ({len(reuse)} reused)")
    )
    return PendingTurn(
        step=step, turn=pending[-1].turn, attempt=1 + max((r.attempt for r in done), default=-1), reuse=reuse
    )
