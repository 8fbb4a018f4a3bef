"""The run's wall clock as each call sees it: the one form every bound on a call is derived from.

The budget hands out a `Deadline` when a call is about to start (`Budget.deadline()`); a tool call's
or verification's spec is capped by it (`cap`), an unattended approval waits at most `left_s`, and
the model call (with its retries) gets `left_s` as its total timeout.
"""

from __future__ import annotations

from dataclasses import dataclass

from sandbox.spec import SandboxSpec


@dataclass(frozen=True)
class Deadline:
    """Seconds of wall clock left when a call starts; None when the run has no wall-clock limit."""

    left_s: float | None = None

    def cap(self, spec: SandboxSpec) -> SandboxSpec:
        """The spec with its timeout never beyond what is left."""
        if self.left_s is None or spec.timeout_s <= self.left_s:
            return spec
        return spec.model_copy(update={"timeout_s": self.left_s})

    def seconds(self, wanted_s: float) -> float:
        """wanted_s, or less when less is left."""
        return wanted_s if self.left_s is None else min(wanted_s, self.left_s)


UNLIMITED = Deadline()
