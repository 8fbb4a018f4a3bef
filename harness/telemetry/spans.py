"""A run's spans, made from its trajectory as it is written: the run (`invoke_agent harness`), each
model call (`chat MODEL`, GenAI semantic conventions), each tool call (`execute_tool NAME`) and each
verification round; a sub-agent's `invoke_agent dN` span under its `execute_tool delegate`, its own
calls under it. Every record the loop appends passes through `RunSpans.observe`, so run,
resume and a batch's worker make the same spans without the loop knowing.

Nothing the model or the repository wrote is an attribute unless `content` is on; keys never are
(the run's secrets are scrubbed from content too)."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.providers.vendor import ModelSpec
from harness.telemetry import export
from harness.telemetry.config import TelemetryConfig

if TYPE_CHECKING:
    from opentelemetry.trace import Span

    from harness.trajectory import ToolRecord, TurnRecord, VerifyRecord

PROVIDERS = {
    "openai": "openai",
    "openai-responses": "openai",
    "anthropic": "anthropic",
    "bedrock": "aws.bedrock",
    "vertex": "gcp.vertex_ai",
}
"""gen_ai.provider.name by model prefix; harness's offline models are `harness.<prefix>`."""
FAILED_OUTCOMES = frozenset({"model_error", "infra_error", "state_error"})
CONTENT_CHARS = 16_000


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


@dataclass
class _Agent:
    """The spans in progress of one agent of the run (its own, or a sub-agent's)."""

    context: Any
    """The context its spans are children of (its invoke_agent span)."""
    span: Span | None = None
    """A sub-agent's invoke_agent span (the run's own is `RunSpans.run`)."""
    request_ts: float | None = None
    request_messages: list[Any] = field(default_factory=list)
    tools: list[tuple[Span, float]] = field(default_factory=list)
    """Tool spans of the step in progress: ended when the step's snapshot is known."""


class RunSpans:
    """Turns one run's trajectory records into spans, as they are appended (a sub-agent's under the
    `delegate` call that started it)."""

    def __init__(
        self,
        config: TelemetryConfig,
        *,
        session_id: str,
        model: str,
        task: str,
        resumed: bool,
        parent: Mapping[str, str] | None = None,
        secrets: Sequence[str] = (),
        agent: str = "harness",
    ) -> None:
        """agent: the agent the run's span is of (a hosted one by its name: `opencode`)."""
        self.config, self.session_id, self.secrets = config, session_id, [s for s in secrets if s]
        spec = ModelSpec.of(model)
        self.provider_name = PROVIDERS.get(spec.prefix, f"harness.{spec.prefix or 'unknown'}")
        self.model = (Path(spec.target).name if spec.vendor.file_target else spec.target) or model
        """The model's name (a scripted or reference file by its name only: no host path in a span)."""
        self._tracer = export.tracer(config)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": agent,
            "gen_ai.conversation.id": session_id,
            "gen_ai.provider.name": self.provider_name,
            "gen_ai.request.model": self.model,
            "harness.session.id": session_id,
            "harness.resumed": resumed,
        }
        if config.content:
            attributes["harness.task"] = self._text(task)
        self.run = self._tracer.start_span(
            f"invoke_agent {agent}", context=export.parent(parent or {}), attributes=attributes
        )
        self._agents: dict[str | None, _Agent] = {None: _Agent(_context_of(self.run))}
        self._delegating: dict[tuple[str | None, str], Span] = {}
        """Open `delegate` call spans by (delegating agent, call id): its sub-agent's spans are their children."""
        self._totals: dict[str, Any] = {}
        self._ended = False

    # --- the records ------------------------------------------------------------------------------

    def observe(self, record: Any) -> None:
        """One appended trajectory record (never raises: telemetry must not stop a run)."""
        if self._ended:
            return
        with contextlib.suppress(Exception):
            handler = getattr(self, f"_on_{record.kind}", None)
            if handler is not None:
                handler(record)

    def _agent(self, record: Any) -> _Agent:
        return self._agents.get(record.agent) or self._agents[None]

    def _on_request(self, record: Any) -> None:
        agent = self._agent(record)
        agent.request_ts = record.ts
        agent.request_messages = record.messages if self.config.content else []

    def _on_turn(self, record: TurnRecord) -> None:
        turn, agent = record.turn, self._agent(record)
        started = agent.request_ts if agent.request_ts is not None else record.ts - turn.latency_ms / 1000
        agent.request_ts = None
        usage = turn.usage
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": self.provider_name,
            "gen_ai.system": self.provider_name,
            "gen_ai.request.model": self.model,
            "gen_ai.conversation.id": self.session_id,
            "gen_ai.response.finish_reasons": [turn.stop_reason],
            "gen_ai.usage.input_tokens": usage.input_tokens,
            "gen_ai.usage.output_tokens": usage.output_tokens,
            "gen_ai.usage.cache_read.input_tokens": usage.cached_input_tokens,
            "gen_ai.usage.cache_creation.input_tokens": usage.cache_write_tokens,
            "gen_ai.usage.reasoning.output_tokens": usage.reasoning_tokens,
            "harness.cost_usd": turn.cost_usd,
            "harness.cost_known": turn.cost_known,
            "harness.retries": turn.retries,
            "harness.usage.estimated": usage.estimated,
            "harness.step": record.step,
            "harness.tool_calls": len(turn.tool_calls),
        }
        if turn.model:
            attributes["gen_ai.response.model"] = turn.model
        if self.config.content:
            attributes["gen_ai.input.messages"] = self._json(
                [m.model_dump(mode="json") for m in agent.request_messages]
            )
            output = {"text": turn.text, "tool_calls": [c.model_dump(mode="json") for c in turn.tool_calls]}
            attributes["gen_ai.output.messages"] = self._json([output])
            if turn.retry_reasons:
                attributes["harness.retry_reasons"] = [self._text(r) for r in turn.retry_reasons]
        if record.agent is not None:
            attributes["harness.agent"] = record.agent
        span = self._tracer.start_span(
            f"chat {self.model}", context=agent.context, start_time=_ns(started), attributes=attributes
        )
        span.end(end_time=_ns(record.ts))

    def _on_tool(self, record: ToolRecord) -> None:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": record.name,
            "gen_ai.tool.call.id": record.call_id,
            "gen_ai.tool.type": "function",
            "harness.step": record.step,
            "harness.attempt": record.attempt,
            "harness.tool.duration_ms": record.duration_ms,
            "harness.tool.is_error": record.is_error,
            "harness.tool.wrote": record.wrote,
        }
        if record.error_kind:
            attributes["harness.tool.error_kind"] = record.error_kind
        if record.decision is not None:
            attributes["harness.gate.decision"] = record.decision.action
            attributes["harness.gate.rule"] = record.decision.rule
        envelope = record.envelope
        if envelope is not None:
            attributes.update(
                {
                    "harness.tool.exit_code": envelope.exit_code,
                    "harness.tool.status": envelope.status,
                    "harness.tool.bytes_out": envelope.stdout_bytes + envelope.stderr_bytes,
                    "harness.tool.truncated": envelope.truncated,
                    "harness.sandbox.runtime": envelope.runtime,
                    "harness.sandbox.image": envelope.image_id,
                }
            )
            if envelope.status in ("timeout", "oom_killed", "output_limit"):
                attributes["harness.tool.limit"] = envelope.status
        if self.config.content:
            attributes["gen_ai.tool.call.arguments"] = self._json(record.arguments)
            attributes["gen_ai.tool.call.result"] = self._text(record.text)
        if record.agent is not None:
            attributes["harness.agent"] = record.agent
        agent = self._agent(record)
        span = self._delegating.pop((record.agent, record.call_id), None)
        if span is not None:  # a delegate call: its span opened when the sub-agent started
            span.set_attributes(attributes)
        else:
            started = record.ts - record.duration_ms / 1000
            span = self._tracer.start_span(
                f"execute_tool {record.name}", context=agent.context, start_time=_ns(started), attributes=attributes
            )
        if record.is_error:
            _error(span, record.error_kind or "tool error")
        agent.tools.append((span, record.ts))

    def _on_delegate(self, record: Any) -> None:
        """A sub-agent started: the delegate call's span opens now and the sub-agent's span under it;
        it ended: its span ends with its outcome and spend."""
        if record.phase == "start":
            call = self._tracer.start_span(
                "execute_tool delegate", context=self._agent(record).context, start_time=_ns(record.ts)
            )
            self._delegating[(record.agent, record.call_id)] = call
            span = self._tracer.start_span(
                f"invoke_agent {record.child}",
                context=_context_of(call),
                start_time=_ns(record.ts),
                attributes={
                    "gen_ai.operation.name": "invoke_agent",
                    "gen_ai.agent.name": f"harness {record.child}",
                    "gen_ai.conversation.id": record.session,
                    "harness.agent": record.child,
                    "harness.session.id": record.session,
                    **{f"harness.reserve.{k}": v for k, v in record.reserve.items() if v is not None},
                },
            )
            self._agents[record.child] = _Agent(_context_of(span), span)
            return
        agent = self._agents.pop(record.child, None)
        if agent is None or agent.span is None:
            return
        self._end_tools(agent)
        agent.span.set_attributes(
            {
                "harness.outcome": record.outcome,
                "harness.change": record.change,
                "harness.steps": record.steps,
                "gen_ai.usage.input_tokens": record.input_tokens,
                "gen_ai.usage.output_tokens": record.output_tokens,
                "harness.cost_usd": record.cost_usd,
            }
        )
        if record.outcome in FAILED_OUTCOMES:
            _error(agent.span, record.outcome)
        agent.span.end(end_time=_ns(record.ts))

    def _on_step(self, record: Any) -> None:
        if record.agent is None:
            self._totals = {
                "harness.steps": record.step,
                "gen_ai.usage.input_tokens": record.input_tokens,
                "gen_ai.usage.output_tokens": record.output_tokens,
                "harness.cost_usd": record.cost_usd,
            }
        self._end_tools(self._agent(record), record.snapshot_id, record.snapshot_step)

    def _end_tools(self, agent: _Agent, snapshot_id: str | None = None, snapshot_step: int | None = None) -> None:
        """End the step's tool spans, with the snapshot the step committed (none for a step cut short)."""
        for span, ended in agent.tools:
            if snapshot_id:
                span.set_attribute("harness.snapshot.id", snapshot_id)
            if snapshot_step is not None:
                span.set_attribute("harness.snapshot.step", snapshot_step)
            span.end(end_time=_ns(ended))
        agent.tools = []

    def _on_verify(self, record: VerifyRecord) -> None:
        attributes: dict[str, Any] = {
            "harness.verify.round": record.round,
            "harness.verify.layer": record.layer,
            "harness.verify.command": record.command,
            "harness.verify.passed": record.passed,
            "harness.verify.exit_code": record.exit_code,
            "harness.verify.status": record.status,
            "harness.verify.failing_count": len(record.failing),
        }
        if self.config.content:
            attributes["harness.verify.failing"] = [self._text(f) for f in record.failing[:100]]
        self._span_of("verify", record, attributes)

    def _span_of(self, name: str, record: Any, attributes: dict[str, Any], error: str | None = None) -> None:
        """An ended span for a record that took `duration_ms` up to its timestamp (marked an error)."""
        started = record.ts - record.duration_ms / 1000
        context = self._agent(record).context
        span = self._tracer.start_span(name, context=context, start_time=_ns(started), attributes=attributes)
        if error:
            _error(span, error)
        span.end(end_time=_ns(record.ts))

    def _on_hook(self, record: Any) -> None:
        """A span per hook run, beside the calls it gated (the command line is configuration, not content)."""
        attributes: dict[str, Any] = {
            "harness.hook.event": record.event,
            "harness.hook.command": record.command,
            "harness.hook.verdict": record.verdict,
            "harness.hook.place": record.place,
            "harness.hook.duration_ms": record.duration_ms,
            "harness.step": record.step,
        }
        if record.exit_code is not None:
            attributes["harness.hook.exit_code"] = record.exit_code
        if record.tool_name:
            attributes.update({"gen_ai.tool.name": record.tool_name, "gen_ai.tool.call.id": record.call_id or ""})
        if record.updated_input is not None:
            attributes["harness.hook.updated_input"] = True
        if self.config.content and record.reason:
            attributes["harness.hook.reason"] = self._text(record.reason)
        failed = record.verdict in ("block", "failed")
        self._span_of(f"hook {record.event}", record, attributes, f"hook {record.verdict}" if failed else None)

    def _on_outcome(self, record: Any) -> None:
        if record.agent is not None:  # a sub-agent's: its span ends with its DelegateRecord (end)
            self._end_tools(self._agent(record))
            return
        self._end_tools(self._agents[None])  # the tool spans of a step that never committed end with the run
        self.run.set_attributes(
            {**self._totals, "harness.outcome": record.outcome, "harness.exit_code": record.exit_code}
        )
        if record.cause:
            self.run.set_attribute("harness.cause", record.cause)
        if record.outcome in FAILED_OUTCOMES:
            _error(self.run, record.outcome)
        self.close(record.ts)

    # --- the end ----------------------------------------------------------------------------------

    def close(self, at: float | None = None) -> None:
        """End every open span (a run that stopped without an outcome is marked so) and send them."""
        if self._ended:
            return
        self._ended = True
        with contextlib.suppress(Exception):
            for agent in self._agents.values():
                self._end_tools(agent)
                if agent.span is not None:  # a sub-agent cut short with the run
                    agent.span.set_attribute("harness.outcome", "incomplete")
                    agent.span.end(end_time=_ns(at if at is not None else time.time()))
            for call in self._delegating.values():
                call.end(end_time=_ns(at if at is not None else time.time()))
            if at is None:
                self.run.set_attributes({**self._totals, "harness.outcome": "incomplete"})
            self.run.end(end_time=_ns(at if at is not None else time.time()))
            export.flush(self.config)

    def _text(self, text: str) -> str:
        for secret in self.secrets:
            text = text.replace(secret, "***")
        return text[:CONTENT_CHARS]

    def _json(self, value: Any) -> str:
        return self._text(json.dumps(value, ensure_ascii=False, default=str))


def _context_of(span: Span) -> Any:
    from opentelemetry import trace

    return trace.set_span_in_context(span)


def _error(span: Span, description: str) -> None:
    from opentelemetry.trace import Status, StatusCode

    span.set_status(Status(StatusCode.ERROR, description))
