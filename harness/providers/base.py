"""The provider seam: the `Provider` protocol, its config, and the `make_provider` factory.

Provider-specific wire formats stop at this boundary: a provider takes provider-neutral messages
and tool schemas and returns a typed `ModelTurn`. Providers never read environment variables; the
CLI reads keys and passes them in.
"""

from __future__ import annotations

import importlib
from typing import Callable, Literal, Protocol, Sequence

from pydantic import BaseModel, ConfigDict, Field

from harness.errors import ConfigError
from harness.types import Message, ModelTurn, ToolSchema


class Provider(Protocol):
    """A model that answers a conversation with one assistant turn."""

    name: str

    def complete(self, messages: Sequence[Message], tools: Sequence[ToolSchema], *, max_tokens: int,
                 timeout_s: float | None = None) -> ModelTurn:
        """Return the next assistant turn; raise a `harness.errors.ModelError` on failure.

        `timeout_s` bounds the whole call, retries and their waits included (the run's wall clock
        left); None leaves the provider's own timeout."""
        ...


class RetryConfig(BaseModel):
    """The single retry policy around every model call."""

    model_config = ConfigDict(extra="forbid")

    max_retries_per_call: int = Field(default=6, ge=0)
    """Retries of one model call before `RetryBudgetExhausted` (attempts = this + 1)."""
    max_retries_per_session: int = Field(default=40, ge=0)
    """Retries over the whole session (all calls of one provider instance)."""
    initial_backoff_s: float = Field(default=1.0, ge=0)
    """First backoff; doubles per retry (exponential), then jittered."""
    max_backoff_s: float = Field(default=60.0, ge=0)
    """Cap of the exponential backoff (a server's Retry-After may ask for longer)."""
    jitter: float = Field(default=0.5, ge=0, le=1)
    """Fraction of the backoff that is random (0 = none, 1 = full jitter)."""
    max_retry_after_s: float = Field(default=600.0, ge=0)
    """Longest server-requested wait (Retry-After) we honour; longer values are capped to this."""


class ModelPrice(BaseModel):
    """A per-model price override in USD per million tokens."""

    model_config = ConfigDict(extra="forbid")

    input_per_mtok: float = Field(ge=0)
    """Price of uncached input tokens."""
    output_per_mtok: float = Field(ge=0)
    """Price of output tokens."""
    cached_input_per_mtok: float | None = Field(default=None, ge=0)
    """Price of input tokens read from the prompt cache (default: the input price)."""
    cache_write_per_mtok: float | None = Field(default=None, ge=0)
    """Price of input tokens written to the prompt cache (default: the input price)."""


class ProviderConfig(BaseModel):
    """Settings of one model provider (no secrets: the key is passed separately)."""

    model_config = ConfigDict(extra="forbid")

    model: str = ""
    """Model name sent to the API; the `openai:MODEL` spec sets it."""
    base_url: str | None = None
    """API base URL (vLLM, llama.cpp server, Ollama, a proxy); None = the vendor's public endpoint."""
    api_key_env: str | None = None
    """Environment variable the CLI reads the key from (default OPENAI_API_KEY / ANTHROPIC_API_KEY)."""
    timeout_s: float = Field(default=600.0, gt=0)
    """Wall-clock limit of one attempt (request + whole stream)."""
    connect_timeout_s: float = Field(default=10.0, gt=0)
    """Limit for opening the connection."""
    stall_timeout_s: float = Field(default=60.0, gt=0)
    """A stream that sends no bytes for this long is a stalled stream: a retryable timeout."""
    max_tokens: int = Field(default=4096, gt=0)
    """Default output-token limit per turn."""
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    """OpenAI-compatible only: which request field carries the limit (o-series models need the second)."""
    retry: RetryConfig = Field(default_factory=RetryConfig)
    """The retry policy."""
    prices: dict[str, ModelPrice] = Field(default_factory=dict)
    """Price overrides by model name; they win over the genai-prices table."""


ProviderFactory = Callable[[str, ProviderConfig, "str | None"], Provider]
"""(target after the prefix, config, api key) -> Provider."""

_FACTORIES: dict[str, ProviderFactory] = {}
# Providers whose module registers itself on import; imported only when first named.
_LAZY_MODULES = {
    "openai": "harness.providers.openai_compat",
    "anthropic": "harness.providers.anthropic",
    "scripted": "harness.providers.scripted",
    "replay": "harness.providers.replay",
}
# Providers that talk to a network endpoint get the retry policy; canned ones do not need it.
_NETWORK_PREFIXES = {"openai", "anthropic"}


def register_provider(prefix: str, factory: ProviderFactory) -> None:
    """Make `PREFIX:TARGET` specs build providers with `factory` (e.g. `replay`)."""
    _FACTORIES[prefix] = factory


def parse_spec(spec: str) -> tuple[str, str]:
    """Split `prefix:target`; raise ConfigError when the form is wrong."""
    prefix, sep, target = spec.partition(":")
    if not sep or not prefix or not target:
        raise ConfigError(f"model spec {spec!r} must look like openai:MODEL, anthropic:MODEL or scripted:FILE")
    return prefix, target


def make_provider(
    spec: str,
    config: ProviderConfig | None = None,
    *,
    api_key: str | None,
    sleep: Callable[[float], None] | None = None,
) -> Provider:
    """Build the provider named by `spec`, wrapped in the retry policy and priced when networked.

    `api_key` comes from the CLI (environment or user config); `sleep` is injectable for tests.
    """
    from harness.providers.pricing import PriceTable
    from harness.providers.retry import RetryingProvider, RetryPolicy

    prefix, target = parse_spec(spec)
    config = config or ProviderConfig()
    if prefix not in _FACTORIES and prefix in _LAZY_MODULES:
        try:
            importlib.import_module(_LAZY_MODULES[prefix])
        except ModuleNotFoundError as error:
            raise ConfigError(f"model provider {prefix!r} is not available ({error.name} missing)") from error
    factory = _FACTORIES.get(prefix)
    if factory is None:
        known = ", ".join(sorted(set(_FACTORIES) | set(_LAZY_MODULES)))
        raise ConfigError(f"unknown model provider {prefix!r} (known: {known})")
    provider = factory(target, config, api_key)
    if prefix not in _NETWORK_PREFIXES:
        return provider
    policy = RetryPolicy(config.retry, **({"sleep": sleep} if sleep else {}))
    return RetryingProvider(provider, policy, PriceTable(config.prices, vendor=prefix))


def redact(text: str, secret: str | None) -> str:
    """Remove a key, and any partial echo of it (servers print its head), from an error text."""
    if not secret:
        return text
    text = text.replace(secret, "[redacted]")
    if len(secret) >= 12:
        head = secret[:8]
        text = text.replace(head, "[redacted]")
    return text
