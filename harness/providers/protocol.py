"""The provider seam: what the loop needs of a model.

Provider-specific wire formats stop at this boundary: a provider takes provider-neutral messages
and tool schemas and returns a typed `ModelTurn`. Providers never read environment variables; the
caller passes the key in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from harness.types import Message, ModelTurn, ToolSchema


class Provider(Protocol):
    """A model that answers a conversation with one assistant turn."""

    name: str

    def complete(
        self,
        messages: Sequence[Message],
        tools: Sequence[ToolSchema],
        *,
        max_tokens: int,
        timeout_s: float | None = None,
    ) -> ModelTurn:
        """Return the next assistant turn; raise a `harness.errors.ModelError` on failure.

        `timeout_s` bounds the whole call, retries and their waits included (the run's wall clock
        left); None leaves the provider's own timeout."""
        ...
