"""`harness models check`: is this endpoint usable by harness, and what does it really do? Two small
identical requests with one tool through the real SDK client of the model's protocol: does it answer,
stream, call the tool (twice in one turn when asked), report usage, reason, read the prompt cache on
the second request? A local server is recognised from what it answers (Ollama, llama.cpp), and what
it will really keep of a conversation is said."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from harness.errors import ConfigError, ModelAuthError, ModelError
from harness.providers.config import LocalTimeouts, ProviderConfig, RetryConfig, check_base_url
from harness.providers.local import LocalServer, detect_local_server
from harness.providers.pricing import PriceTable
from harness.providers.protocol import Provider
from harness.providers.retry import RetryingProvider, RetryPolicy
from harness.providers.vendor import VENDORS, ModelSpec
from harness.types import Message, ModelTurn, ToolSchema

PROTOCOLS = tuple(prefix for prefix, vendor in VENDORS.items() if vendor.networked)
KEYLESS = tuple(prefix for prefix, vendor in VENDORS.items() if vendor.cloud_env)
"""Prefixes whose auth is a cloud's credential chain, not a key harness passes."""
_PING = ToolSchema(
    name="ping",
    description="Answer a connectivity check. Call it once per text you are asked to send.",
    parameters={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
)
_NOTES = " ".join(f"Note {n}: this line only makes the prompt long enough for a prompt cache." for n in range(90))
_PROMPT = [
    Message(role="system", content=f"You are a connectivity check. Always answer by calling the ping tool. {_NOTES}"),
    Message(
        role="user",
        content="Call the ping tool twice in this one turn, in parallel: with text 'pong' and with text 'pang'.",
    ),
]


class CheckReport(BaseModel):
    """What `harness models check` found out about an endpoint."""

    model: str
    base_url: str
    streams: bool
    calls_tools: bool
    parallel_tools: bool = False
    """Two calls in one turn, as asked."""
    reports_usage: bool
    usage_estimated: bool = False
    """The server sent no usage: the figures below are harness's count (its tokenizer, else an estimate)."""
    reasoning: bool = False
    """The model reasoned (reasoning text, items or tokens came back)."""
    caches: bool | None = None
    """The second, identical request was read from the prompt cache; None when it could not be sent."""
    input_tokens: int
    output_tokens: int
    cached_tokens: int = 0
    latency_ms: int
    stop_reason: str
    served_model: str
    retries: int = 0
    """Retries the one retry policy made (a 429 with Retry-After, a 5xx...)."""
    retry_reasons: list[str] = []
    """Why each retry happened."""
    server: LocalServer | None = None
    """A local server recognised from its answers (Ollama, llama.cpp) and what it keeps."""


CHECK_RETRY = RetryConfig(
    max_retries_per_call=3, max_retries_per_session=3, initial_backoff_s=0.5, max_backoff_s=4.0, max_retry_after_s=10.0
)
"""The same policy as a run's, with a short budget: a check should answer in seconds."""


def check_endpoint(
    spec: str,
    *,
    base_url: str | None,
    api_key: str | None,
    key_variable: str,
    timeout_s: float | None = None,
    region: str | None = None,
    project: str | None = None,
    context_budget: int | None = None,
    settings: ProviderConfig | None = None,
) -> CheckReport:
    """Two tiny requests with one tool to the endpoint of spec, and a look at what serves it. Each
    attempt runs under the endpoint's limits (a local server's first-token limit fits a model on
    CPU reading the tool schemas), or with `timeout_s` under that many seconds for every wait.
    `settings` is the user's entry for the protocol (`[providers.openai]`: its limits, its endpoint)."""
    import httpx2

    parsed = ModelSpec.parse(spec)
    prefix, model = parsed.prefix, parsed.target
    if prefix not in PROTOCOLS:
        raise ConfigError(f"models check needs a model of one of {', '.join(PROTOCOLS)}, not {prefix!r}")
    base_url = base_url or (settings.base_url if settings else None)
    check_base_url(base_url)
    chosen = {"model": model, "base_url": base_url, "retry": CHECK_RETRY, "region": region, "project": project}
    config = (settings or ProviderConfig()).model_copy(update=chosen)
    if timeout_s is not None:
        waits = {"first_token_timeout_s": timeout_s, "stall_timeout_s": timeout_s}
        config = config.model_copy(
            update={"timeout_s": timeout_s, **waits, "local": LocalTimeouts(timeout_s=timeout_s, **waits)}
        )
    if api_key is None and base_url is None and prefix not in KEYLESS:
        raise ModelAuthError(f"no API key: set {key_variable} (or pass --base-url for a local server)")
    seen: dict[str, Any] = {}

    def on_response(response: httpx2.Response) -> None:
        seen.setdefault("content_type", response.headers.get("content-type", ""))

    client = httpx2.Client(event_hooks={"response": [on_response]})
    build = _constructor(prefix)
    provider = RetryingProvider(build(config, api_key, client), RetryPolicy(config.retry), PriceTable(vendor=prefix))
    turn = provider.complete(_PROMPT, [_PING], max_tokens=256)  # each attempt under the whole limits
    again = _again(build(config.model_copy(update={"retry": RetryConfig(max_retries_per_call=0)}), api_key, client))
    pings = [c for c in turn.tool_calls if c.name == "ping" and c.parse_error is None]
    server = detect_local_server(base_url, model, context_budget) if base_url and prefix.startswith("openai") else None
    return CheckReport(
        model=spec,
        base_url=base_url or "(vendor default)",
        streams=str(seen.get("content_type", "")).startswith(
            ("text/event-stream", "application/vnd.amazon.eventstream")
        ),
        calls_tools=bool(pings),
        parallel_tools=len(pings) >= 2,
        reports_usage=(turn.usage.input_tokens > 0 or turn.usage.output_tokens > 0) and not turn.usage.estimated,
        usage_estimated=turn.usage.estimated,
        reasoning=bool(turn.reasoning) or turn.usage.reasoning_tokens > 0,
        caches=None if again is None else again.usage.cached_input_tokens > 0,
        input_tokens=turn.usage.input_tokens,
        output_tokens=turn.usage.output_tokens,
        cached_tokens=again.usage.cached_input_tokens if again else 0,
        latency_ms=turn.latency_ms,
        stop_reason=turn.stop_reason,
        served_model=turn.model,
        retries=turn.retries,
        retry_reasons=turn.retry_reasons,
        server=server,
    )


def _again(provider: Provider) -> ModelTurn | None:
    """The same request once more (what a prompt cache serves); None when it failed."""
    try:
        return provider.complete(_PROMPT, [_PING], max_tokens=256)
    except ModelError:
        return None


def _constructor(prefix: str) -> Callable[[ProviderConfig, str | None, Any], Provider]:
    """The provider class of a protocol, built with the check's own HTTP client."""
    if prefix == "openai":
        from harness.providers.openai_compat import OpenAICompatProvider

        return lambda config, key, client: OpenAICompatProvider(config, api_key=key, http_client=client)
    if prefix == "openai-responses":
        from harness.providers.openai_responses import ResponsesProvider

        return lambda config, key, client: ResponsesProvider(config, api_key=key, http_client=client)
    from harness.providers.anthropic import AnthropicProvider

    if prefix == "anthropic":
        return lambda config, key, client: AnthropicProvider(config, api_key=key, http_client=client)
    from harness.providers.anthropic_cloud import Bedrock, Vertex

    cloud = Bedrock() if prefix == "bedrock" else Vertex()
    return lambda config, key, client: AnthropicProvider(config, api_key=key, http_client=client, cloud=cloud)
