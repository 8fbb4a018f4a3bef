"""A gate decision as the trajectory records it: importable without the gate's rule engine (pathspec,
the argv parser), so reading a session's records stays light."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

Action = Literal["allow", "deny", "ask"]


class Decision(BaseModel):
    """What the gate decided for one call, and which rule decided it (logged with the step)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    action: Action
    rule: str
    reason: str
