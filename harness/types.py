"""Typed values that cross component boundaries on the host side (no loose dicts)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class ToolCall(BaseModel):
    """One tool call requested by the model."""

    model_config = ConfigDict(extra="forbid")

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    """Parsed arguments (after a safe JSON repair, when one was needed)."""
    raw_arguments: str | None = None
    """The argument text as the model sent it, when it was not valid JSON."""
    parse_error: str | None = None
    """Set when the arguments could not be parsed even after repair: answered as `invalid_json`."""
    provider_data: dict[str, Any] = Field(default_factory=dict)
    """Opaque fields the server attached to this call (Gemini's `extra_content` with its thought
    signature, a Responses item id), echoed back exactly with the call; kept through the trajectory,
    resume and replay."""


class Usage(BaseModel):
    """Token usage of one model call, normalised across providers.

    input_tokens counts every prompt token, cached or not (OpenAI's prompt_tokens; for Anthropic it is
    input_tokens + cache_read_input_tokens + cache_creation_input_tokens). cached_input_tokens is
    the part of input_tokens read from a prompt cache; cache_write_tokens the part written to one.
    """

    model_config = ConfigDict(extra="forbid")

    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    """The part of output_tokens the model spent reasoning, when the server reports it."""
    estimated: bool = False
    """The server reported no usage: harness counted (providers.counting), so part of this is an estimate."""

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cached_input_tokens=self.cached_input_tokens + other.cached_input_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            estimated=self.estimated or other.estimated,
        )


OutcomeKind = Literal[
    "verified",
    "unverified",
    "failed_verification",
    "stuck",
    "limit",
    "model_error",
    "state_error",
    "infra_error",
    "interrupted",
    "incomplete",
]
"""How a run ended, the limit apart (`limit` stands for every `limit:<which>`); `incomplete` is
what is shown of a run that recorded no end (still running, or killed before it could)."""

LimitKind = Literal["steps", "tokens", "cost", "wall_clock", "context"]
"""Which budget a `limit` outcome spent."""

Outcome = Literal[
    "verified",
    "unverified",
    "failed_verification",
    "stuck",
    "limit:steps",
    "limit:tokens",
    "limit:cost",
    "limit:wall_clock",
    "limit:context",
    "model_error",
    "state_error",
    "infra_error",
    "interrupted",
    "incomplete",
]
"""An outcome as records, results and reports spell it: the kind, and for a limit which one."""

StopReason = Literal["end_turn", "tool_use", "max_tokens", "content_filter", "refusal", "other"]


class Reasoning(BaseModel):
    """What a reasoning model thought before it answered, kept so it can be sent back as its protocol
    requires: OpenAI-compatible servers' `reasoning_content` text, Anthropic's `thinking` and
    `redacted_thinking` blocks exactly as they came (with their signatures)."""

    model_config = ConfigDict(extra="forbid")

    text: str = ""
    """The reasoning as text (for people, and for servers that take `reasoning_content` back)."""
    blocks: list[dict[str, Any]] = Field(default_factory=list)
    """Items to send back unchanged, in order: Anthropic content blocks of type thinking /
    redacted_thinking, or Responses API output items (reasoning items with their encrypted content,
    and the places of the turn's message and function calls among them). Each protocol sends back
    only the kinds it knows."""
    extra: dict[str, Any] = Field(default_factory=dict)
    """Opaque fields a server added to the assistant message itself (Gemini's `extra_content` and
    `thought_signature`), echoed back exactly on that message."""

    def __bool__(self) -> bool:
        return bool(self.text or self.blocks or self.extra)


class Rollout(BaseModel):
    """A turn's tokens as the server sampled them (`--rollout`), kept beside the turn for trainers and
    never put back into the conversation: each completion token's text and log-probability, and the
    token ids where the server gives them (vLLM's and SGLang's `return_token_ids`; llama-cpp-python's
    server gives none)."""

    model_config = ConfigDict(extra="forbid")

    tokens: list[str] = Field(default_factory=list)
    logprobs: list[float] = Field(default_factory=list)
    completion_ids: list[int] | None = None
    prompt_ids: list[int] | None = None


class ModelTurn(BaseModel):
    """One assistant turn: what the model said and which tools it asked for."""

    model_config = ConfigDict(extra="forbid")

    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    stop_reason: StopReason = "end_turn"
    usage: Usage = Field(default_factory=Usage)
    cost_usd: float = Field(0.0, ge=0, allow_inf_nan=False)
    """Cost of this turn including failed/retried attempts; 0 when unknown (recorded as such). Never
    NaN or infinite: a budget compares against it, and the record is JSON."""
    cost_known: bool = True
    """False when the model has no known price: cost_usd is 0 and should be flagged, not trusted."""
    latency_ms: int = 0
    model: str = ""
    retries: int = 0
    retry_reasons: list[str] = Field(default_factory=list)
    """Why each retry happened (the error's first line), oldest first."""
    refusal: str = ""
    """The model's refusal text, when it refused (stop_reason `refusal`); also in `text`."""
    reasoning: Reasoning | None = None
    """What the model reasoned before answering (reasoning models), None when nothing was sent."""
    repairs: list[str] = Field(default_factory=list)
    """What the adapter had to make safe in what the model sent (e.g. lone surrogates replaced)."""
    rollout: Rollout | None = Field(None, exclude_if=lambda value: value is None)
    """The sampled tokens (`--rollout`, an OpenAI-compatible server that returns logprobs); None
    otherwise, and then left out of the record."""


Role = Literal["system", "user", "assistant", "tool"]


class Message(BaseModel):
    """One message of the conversation in provider-neutral form."""

    model_config = ConfigDict(extra="forbid")

    role: Role
    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    """Assistant messages only."""
    reasoning: Reasoning | None = None
    """Assistant messages only: the turn's reasoning, sent back as the provider's protocol requires."""
    tool_call_id: str | None = None
    """Tool messages only: which call this answers."""
    name: str | None = None
    """Tool messages only: the tool's name."""
    is_error: bool = False
    """Tool messages only: the call failed (Anthropic's is_error)."""


class ToolSchema(BaseModel):
    """A tool as the model sees it: name, description, JSON schema of its arguments."""

    model_config = ConfigDict(extra="forbid")

    name: str
    description: str
    parameters: dict[str, Any]

    def openai(self) -> dict[str, Any]:
        """OpenAI chat-completions `tools` entry."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def anthropic(self) -> dict[str, Any]:
        """Anthropic Messages `tools` entry."""
        return {"name": self.name, "description": self.description, "input_schema": self.parameters}


SUMMARY_REQUEST = "[harness: summarise the conversation]"
"""The first line of the system prompt of a summary request (the third context tier): canned
models (scripted, replay) recognise a summary request by it."""
SUMMARY_MARK = re.compile(r"^\[harness summary of model turns 1-(\d+)\]")
"""The first line of the message that replaced the older middle of a conversation."""


def is_summary_request(messages: Sequence[Message]) -> bool:
    return bool(messages) and messages[0].role == "system" and messages[0].content.startswith(SUMMARY_REQUEST)


def turns_so_far(messages: Sequence[Message]) -> int:
    """Model turns the conversation has had: the assistant messages in it, plus those a summary replaced
    (canned models index their turns by it, so a summary does not make them repeat themselves)."""
    summarised = 0
    for message in messages:
        if message.role == "user":
            found = SUMMARY_MARK.match(message.content)
            if found:
                summarised = int(found.group(1))
    return summarised + sum(1 for message in messages if message.role == "assistant")
