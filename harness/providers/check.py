"""`harness models check`: is this endpoint usable by harness? One tiny request with one tool, through
the real SDK client: does it answer, stream, call the tool and report usage?"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from harness.errors import ConfigError, ModelAuthError
from harness.providers.config import ProviderConfig, RetryConfig
from harness.providers.factory import parse_spec
from harness.providers.pricing import PriceTable
from harness.providers.retry import RetryingProvider, RetryPolicy
from harness.types import Message, ToolSchema

VENDORS = ("openai", "anthropic")
_PING = ToolSchema(
    name="ping",
    description="Answer a connectivity check. Call it exactly once with text='pong'.",
    parameters={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
)
_PROMPT = [
    Message(role="system", content="You are a connectivity check. Always answer by calling the ping tool."),
    Message(role="user", content="Call the ping tool with text 'pong'."),
]


class CheckReport(BaseModel):
    """What `harness models check` found out about an endpoint."""

    model: str
    base_url: str
    streams: bool
    calls_tools: bool
    reports_usage: bool
    input_tokens: int
    output_tokens: int
    latency_ms: int
    stop_reason: str
    served_model: str
    retries: int = 0
    """Retries the one retry policy made (a 429 with Retry-After, a 5xx...)."""
    retry_reasons: list[str] = []
    """Why each retry happened."""


CHECK_RETRY = RetryConfig(
    max_retries_per_call=3, max_retries_per_session=3, initial_backoff_s=0.5, max_backoff_s=4.0, max_retry_after_s=10.0
)
"""The same policy as a run's, with a short budget: a check should answer in seconds."""


def check_endpoint(
    spec: str, *, base_url: str | None, api_key: str | None, key_variable: str, timeout_s: float
) -> CheckReport:
    """One tiny request with one tool to the endpoint of spec (openai: or anthropic: only)."""
    import httpx2

    from harness.providers.anthropic import AnthropicProvider
    from harness.providers.openai_compat import OpenAICompatProvider

    prefix, model = parse_spec(spec)
    if prefix not in VENDORS:
        raise ConfigError(f"models check needs an openai: or anthropic: model, not {prefix!r}")
    url = base_url
    config = ProviderConfig(
        model=model,
        base_url=url,
        timeout_s=timeout_s,
        stall_timeout_s=timeout_s,
        retry=CHECK_RETRY,
    )
    key = api_key
    if key is None and url is None:
        raise ModelAuthError(f"no API key: set {key_variable} (or pass --base-url for a local server)")
    seen: dict[str, Any] = {}

    def on_response(response: httpx2.Response) -> None:
        seen["content_type"] = response.headers.get("content-type", "")

    client = httpx2.Client(event_hooks={"response": [on_response]})
    cls = OpenAICompatProvider if prefix == "openai" else AnthropicProvider
    provider = RetryingProvider(
        cls(config, api_key=key, http_client=client),
        RetryPolicy(config.retry),
        PriceTable(config.prices, vendor=prefix),
    )
    turn = provider.complete(_PROMPT, [_PING], max_tokens=64, timeout_s=timeout_s + CHECK_RETRY.max_retry_after_s)
    return CheckReport(
        model=spec,
        base_url=url or "(vendor default)",
        streams=str(seen.get("content_type", "")).startswith("text/event-stream"),
        calls_tools=any(c.name == "ping" and c.parse_error is None for c in turn.tool_calls),
        reports_usage=turn.usage.input_tokens > 0 or turn.usage.output_tokens > 0,
        input_tokens=turn.usage.input_tokens,
        output_tokens=turn.usage.output_tokens,
        latency_ms=turn.latency_ms,
        stop_reason=turn.stop_reason,
        served_model=turn.model,
        retries=turn.retries,
        retry_reasons=turn.retry_reasons,
    )
