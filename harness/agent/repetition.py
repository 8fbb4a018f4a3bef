"""Loops are caught, not paid for: the same call with the same result several times in a row, or a
short cycle of calls repeating (A, B, A, B ...), first gets a note in the tool result the model
reads, then ends the run `stuck` with the evidence.

A call's fingerprint is its tool, its arguments and the text it returned, so re-reading a file that
changed is not a repetition; only the last few fingerprints are kept (in the run state, so a
resumed run goes on counting).
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from harness.types import ToolCall

if TYPE_CHECKING:
    from harness.config import RepetitionConfig

KEEP = 24


class Repetition(BaseModel):
    """The recent fingerprints (part of the run state) and the labels they stand for."""

    model_config = ConfigDict(extra="forbid")

    recent: list[str] = Field(default_factory=list)
    labels: list[str] = Field(default_factory=list)
    steps: list[int] = Field(default_factory=list)

    def observe(self, step: int, call: ToolCall, text: str) -> Repetition:
        """The memory after one more call; text is the result as the model reads it
        (`context.stable`: a duration is no change in the result)."""
        fingerprint = hashlib.sha256(
            json.dumps([call.name, call.arguments, call.raw_arguments, text], sort_keys=True, default=str).encode()
        ).hexdigest()[:16]
        label = f"{call.name}({', '.join(f'{k}={v!r}' for k, v in list(call.arguments.items())[:2])})"[:120]
        return Repetition(
            recent=([*self.recent, fingerprint])[-KEEP:],
            labels=([*self.labels, label])[-KEEP:],
            steps=([*self.steps, step])[-KEEP:],
        )

    def repeats(self) -> tuple[int, int]:
        """(period, times): the shortest cycle (1-3 calls) the recent calls end in, and how many times
        it repeated in a row; (1, 1) when nothing repeats."""
        best = (1, 1)
        for period in (1, 2, 3):
            if len(self.recent) < 2 * period:
                continue
            pattern, times = self.recent[-period:], 1
            while (
                len(self.recent) >= (times + 1) * period
                and self.recent[-(times + 1) * period : -times * period] == pattern
            ):
                times += 1
            if times > 1 and (best[1] == 1 or times * period > best[0] * best[1]):
                best = (period, times)
        return best

    def verdict(self, config: RepetitionConfig) -> tuple[str, str] | None:
        """("note" | "stuck", what to say), or None."""
        period, times = self.repeats()
        if period == 1:
            since = self.steps[-times] if times <= len(self.steps) else self.steps[0]
            what = f"this call returned the same result {times} times in a row (unchanged since step {since})"
            if times >= config.stuck_after:
                return "stuck", what
            if times >= config.note_after:
                return "note", what
            return None
        cycle = " → ".join(self.labels[-period:])
        what = f"the same {period} calls ({cycle}) repeated {times} times with the same results"
        if times >= config.cycle_stuck_after:
            return "stuck", what
        if times >= config.cycle_note_after:
            return "note", what
        return None


NOTE = "\n\nNOTE from the harness: {what}. Repeating it will not change the answer; try something else."
