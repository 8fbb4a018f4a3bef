"""One step numbering a person sees everywhere.

`harness show` numbers a run's model steps 1..N. Snapshots are taken only when a step wrote
something, so the session's snapshot log has its own numbers. Here the two meet: "step N" means the
state of the workspace after model step N (step 0 is the import), and each step maps to the snapshot
that holds that state. `diff`, `rollback` and `session show` speak in these steps; a session that
never had a run (`harness exec --session`, `harness tool`) numbers its steps as its snapshots.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness import readback
from sandbox.errors import StepOutOfRange


@dataclass(frozen=True)
class StepMap:
    """Run step → snapshot step for one session (identity when the session had no run)."""

    session_id: str
    snapshots: dict[int, int]
    """After run step N the workspace is snapshot snapshots[N]; empty when there was no run."""
    last_snapshot: int

    @classmethod
    def of(cls, session_dir: Path, session_id: str, last_snapshot: int) -> StepMap:
        """The map of a session folder (the trajectory's step records of its own agent, read as plain
        JSON; a resumed step's last record wins)."""
        snapshots: dict[int, int] = {}
        for record in readback.records(session_dir, agent=None):
            step, snapshot = record.get("step"), record.get("snapshot_step")
            if record.get("kind") == "step" and isinstance(step, int) and isinstance(snapshot, int):
                snapshots[step] = snapshot
        if snapshots:
            snapshots.setdefault(0, 0)
        return cls(session_id, snapshots, last_snapshot)

    @property
    def has_run(self) -> bool:
        return bool(self.snapshots)

    @property
    def last_step(self) -> int:
        return max(self.snapshots) if self.snapshots else self.last_snapshot

    def snapshot(self, step: int) -> int:
        """The snapshot holding the state after step; StepOutOfRange when there is no such step."""
        if not self.has_run:
            if not 0 <= step <= self.last_snapshot:
                raise StepOutOfRange(
                    f"session {self.session_id} has steps 0..{self.last_snapshot}; there is no step {step}"
                )
            return step
        if step not in self.snapshots:
            raise StepOutOfRange(
                f"session {self.session_id} has steps 0..{self.last_step} (as `harness show` numbers them); "
                f"there is no step {step}"
            )
        return self.snapshots[step]

    def steps_at(self, snapshot: int) -> list[int]:
        """The run steps whose state a snapshot holds (several when steps wrote nothing)."""
        if not self.has_run:
            return [snapshot]
        return [step for step, held in sorted(self.snapshots.items()) if held == snapshot]
