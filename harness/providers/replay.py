"""`replay:SESSION_DIR` — answer with the model turns a recorded session received, in order.

The turn served is chosen by how many assistant messages the conversation already holds, not by a
call counter, so a replayed run that is itself resumed after a crash continues at the right turn.
Replayed turns cost nothing: usage and cost are zeroed (the original run was billed already).
When the recording runs out, the model answers with a final text and no tool call.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from harness.errors import ConfigError, ModelBadResponse
from harness.providers.config import ProviderConfig
from harness.providers.factory import register_provider
from harness.trajectory import TRAJECTORY_FILE, read_records
from harness.types import Message, ModelTurn, ToolSchema, Usage, is_summary_request, turns_so_far

EXHAUSTED_TEXT = "The recorded session has no more turns."


def recorded_summaries(session_dir: Path, agent: str | None = None) -> dict[int, str]:
    """The summaries a session's model (or its sub-agent's) wrote, by the model turn they summarise through."""
    records = read_records(session_dir, agent)
    return {record.through_turn: record.text for record in records if record.kind == "summary"}


def recorded_turns(session_dir: Path, agent: str | None = None) -> list[ModelTurn]:
    """The model turns of a session (or of one of its sub-agents) in step order (the last record wins
    for a step)."""
    by_step: dict[int, ModelTurn] = {}
    for record in read_records(session_dir, agent):
        if record.kind == "turn":
            by_step[record.step] = record.turn
    return [by_step[step] for step in sorted(by_step)]


class ReplayProvider:
    """Serves a recorded session's model turns."""

    def __init__(
        self, turns: Sequence[ModelTurn], *, name: str = "replay", summaries: dict[int, str] | None = None
    ) -> None:
        self.name = name
        self.folder: Path | None = None
        """The recorded session (its sub-agents' turns are read from it when they start)."""
        self.turns = [turn.model_copy(update={"usage": Usage(), "cost_usd": 0.0, "retries": 0}) for turn in turns]
        self.summaries = dict(summaries or {})

    @classmethod
    def from_session(cls, session_dir: Path) -> ReplayProvider:
        if not (Path(session_dir) / TRAJECTORY_FILE).is_file():
            raise ConfigError(f"replay: no recorded trajectory in {session_dir}")
        folder = Path(session_dir)
        provider = cls(recorded_turns(folder), name=f"replay:{session_dir}", summaries=recorded_summaries(folder))
        provider.folder = folder
        return provider

    def for_agent(self, agent: str) -> ReplayProvider:
        """The recorded turns of sub-agent `agent` (a run replayed with its tree answers each child as
        it was answered)."""
        if self.folder is None:
            return ReplayProvider([], name=f"{self.name}#{agent}")
        turns, summaries = recorded_turns(self.folder, agent), recorded_summaries(self.folder, agent)
        return ReplayProvider(turns, name=f"{self.name}#{agent}", summaries=summaries)

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema],
        *,
        max_tokens: int,
        timeout_s: float | None = None,
    ) -> ModelTurn:
        if is_summary_request(messages):
            found = re.match(r"Model turns 1-(\d+)", messages[-1].content)
            text = self.summaries.get(int(found.group(1))) if found else None
            if text is None:
                raise ModelBadResponse("replay: the recorded session made no summary at this point")
            return ModelTurn(text=text, stop_reason="end_turn", model="replay")
        index = turns_so_far(messages)
        if index < len(self.turns):
            return self.turns[index]
        return ModelTurn(text=EXHAUSTED_TEXT, stop_reason="end_turn", model="replay")


def _factory(target: str, config: ProviderConfig, api_key: str | None) -> ReplayProvider:
    # The CLI resolves a session id to its directory before building the provider.
    return ReplayProvider.from_session(Path(target).expanduser())


register_provider("replay", _factory)
