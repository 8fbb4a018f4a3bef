"""The config models of providers: endpoint, timeouts, retry policy, price overrides (no secrets)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv6Address
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from harness.types import Message, ToolSchema


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
    max_retries_unreached: int = Field(default=2, ge=0)
    """Retries of a call that cannot reach the endpoint at all (connection refused, no such host)
    while no call of this provider has reached it yet: a wrong URL or a server that is not running
    is said in seconds, not after the whole budget (once it answered, such errors get the usual
    retries: a server restarting mid-run)."""


class LocalTimeouts(BaseModel):
    """The limits of a model server on this machine or its network, often on CPU: reading a prompt
    with the tool schemas can take a small model half a minute and a large one many minutes before
    the first token, and a busy single-slot server queues a request behind the one before it."""

    model_config = ConfigDict(extra="forbid")

    timeout_s: float = Field(default=3600.0, gt=0)
    """Wall-clock limit of one attempt (request + whole stream)."""
    connect_timeout_s: float = Field(default=5.0, gt=0)
    """Limit for opening the connection (a local port answers at once, or nothing listens)."""
    first_token_timeout_s: float = Field(default=900.0, gt=0)
    """How long the server may read the prompt before its answer starts."""
    stall_timeout_s: float = Field(default=300.0, gt=0)
    """Once the answer started, no bytes for this long is a stalled stream."""


@dataclass(frozen=True)
class Timeouts:
    """The limits one call runs under (the endpoint's: hosted or local)."""

    total_s: float
    connect_s: float
    first_token_s: float
    stall_s: float
    local: bool


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
    first_token_timeout_s: float = Field(default=60.0, gt=0)
    """How long the server may take before its answer starts (the headers of a streamed answer)."""
    stall_timeout_s: float = Field(default=60.0, gt=0)
    """A stream that sends no bytes for this long is a stalled stream: a retryable timeout."""
    endpoint: Literal["auto", "hosted", "local"] = "auto"
    """Which limits apply: the ones above (`hosted`), or `local`'s (a server on this machine or its
    network, often on CPU). `auto`: local for a loopback or private address, `localhost`, or a host
    name without a dot (a container's service name); hosted otherwise."""
    local: LocalTimeouts = Field(default_factory=LocalTimeouts)
    """The limits of a local endpoint (`[providers.openai.local]`)."""
    max_tokens: int = Field(default=4096, gt=0)
    """Default output-token limit per turn."""
    max_tokens_field: Literal["auto", "max_tokens", "max_completion_tokens"] = "auto"
    """OpenAI-compatible only: which request field carries the output limit. `auto`: by model family
    (`max_completion_tokens` for reasoning models, o-series, GPT-5 and Codex, and on OpenAI's own
    endpoint; `max_tokens` elsewhere), switching once to the other when a server refuses the first."""
    retry: RetryConfig = Field(default_factory=RetryConfig)
    """The retry policy."""
    temperature: float | None = Field(default=0.2, ge=0, le=2)
    """OpenAI-compatible only: the sampling temperature, sent where the model takes one (not to
    reasoning models, nor with reasoning_effort set); None sends none (the server's default). The
    Anthropic SDK takes none, so Anthropic models keep their default."""
    rollout: bool = False
    """OpenAI-compatible only (`--rollout`): ask for each sampled token's log-probability, and of a
    server named by `base_url` its id too (`return_token_ids`, which vLLM and SGLang answer; never sent
    to OpenAI's own API, which refuses it), and keep them beside the turn."""
    reasoning_effort: Literal["low", "medium", "high"] | None = None
    """Turn thinking on (`--thinking`): OpenAI-compatible `reasoning_effort`; for Anthropic an
    extended-thinking budget of 1k / 4k / 16k tokens. None leaves the model's default."""
    thinking_mode: Literal["auto", "adaptive", "budget"] = "auto"
    """Anthropic only (with `reasoning_effort` set): `adaptive` sends `thinking: {type: adaptive}` and
    the effort (the newest models refuse a budget); `budget` sends a `budget_tokens` budget (older
    models know nothing else); `auto` picks by model name (see providers.anthropic.ADAPTIVE_MODELS)."""
    region: str | None = None
    """`bedrock:` and `vertex:` only: the cloud region (default: AWS_REGION / the AWS profile's region;
    for Vertex, CLOUD_ML_REGION, else `us-east5`)."""
    project: str | None = None
    """`vertex:` only: the Google Cloud project (default: the credentials' project, ANTHROPIC_VERTEX_PROJECT_ID)."""
    reasoning_echo: Literal["auto", "never", "with_reasoning", "tool_turns"] = "auto"
    """OpenAI-compatible only: when an earlier assistant message carries its `reasoning_content` back.
    `with_reasoning`: when the turn had any; `tool_turns`: on every turn that called tools, empty if
    need be (DeepSeek's thinking mode refuses a tool-call turn without it); `never`: never (the
    official OpenAI API rejects the field). `auto`: never for api.openai.com, tool_turns for DeepSeek
    (by endpoint or model name), with_reasoning elsewhere. Anthropic always gets its thinking blocks
    back unchanged, as its protocol requires."""
    force_tool: str | None = None
    """Make the first `force_tool_turns` turns of a conversation call a tool: a tool's name (that
    tool; llama.cpp's function-calling format then generates its arguments to the tool's schema), or
    `required` (any tool, where the server takes it). For small local models that answer in prose
    when they should act. None: the model chooses."""
    force_tool_turns: int = Field(default=1, ge=1)
    """How many turns `force_tool` applies to (counted in the conversation: a resume keeps counting)."""
    prices: dict[str, ModelPrice] = Field(default_factory=dict)
    """Price overrides by model name; they win over the genai-prices table."""
    first_turn: int = Field(default=0, ge=0)
    """`scripted:` only: the model turns the conversation held when this model took it over (a fork
    or a resume with another model; harness sets it): the script's first turn answers the next one."""

    def forced_tool(self, messages: Sequence[Message], tools: Sequence[ToolSchema]) -> str | None:
        """The tool this request must call (`required`: any), or None."""
        if not self.force_tool or not tools:
            return None
        if sum(1 for message in messages if message.role == "assistant") >= self.force_tool_turns:
            return None
        if self.force_tool != "required" and self.force_tool not in {tool.name for tool in tools}:
            from harness.errors import ConfigError

            known = ", ".join(sorted(tool.name for tool in tools))
            raise ConfigError(f"force_tool names {self.force_tool!r}, which is no tool of this run (tools: {known})")
        return self.force_tool

    def timeouts(self) -> Timeouts:
        """The limits this endpoint's calls run under."""
        if self.is_local():
            local = self.local
            return Timeouts(
                local.timeout_s, local.connect_timeout_s, local.first_token_timeout_s, local.stall_timeout_s, True
            )
        return Timeouts(self.timeout_s, self.connect_timeout_s, self.first_token_timeout_s, self.stall_timeout_s, False)

    def is_local(self) -> bool:
        """Whether the endpoint is a local server (see `endpoint`)."""
        if self.endpoint != "auto":
            return self.endpoint == "local"
        return self.base_url is not None and is_local_address(self.base_url)


@dataclass(frozen=True)
class Host:
    """An endpoint URL's host as written (nothing is resolved): the one parse of it every check uses."""

    name: str
    """Lowercased; "" when the URL names none."""
    port: int
    """The URL's, else its scheme's default."""
    address: IPv4Address | IPv6Address | None
    """The name as an IP address, when it is one."""

    @property
    def loopback(self) -> bool:
        if self.address is not None:
            return self.address.is_loopback
        return self.name == "localhost" or self.name.endswith(".localhost")

    @property
    def local(self) -> bool:
        """A loopback, private or link-local address, `localhost` (or a name under it), or a name
        without a dot: a server on this machine or its network."""
        if self.address is not None:
            return self.address.is_loopback or self.address.is_private or self.address.is_link_local
        return bool(self.name) and (self.loopback or "." not in self.name)


def host_of(url: str) -> Host | None:
    """The host of an endpoint URL; None when it cannot be parsed (a bad port, a bad IPv6 literal)."""
    from ipaddress import ip_address
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(url.strip())
        name = (parts.hostname or "").lower()
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None
    try:
        address: IPv4Address | IPv6Address | None = ip_address(name)
    except ValueError:
        address = None
    return Host(name, port, address)


def is_local_address(url: str) -> bool:
    """Whether the URL names a server on this machine or its network (see `Host.local`)."""
    host = host_of(url)
    return host is not None and host.local


def check_base_url(url: str | None) -> None:
    """A base URL must be an http(s) URL with a host: anything else is a config error at once, never
    a request retried as "cannot reach"."""
    if url is None:
        return
    from urllib.parse import urlsplit

    from harness.errors import ConfigError

    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.netloc:
        guess = f" (did you mean http://{url.strip()}?)" if "://" not in url else ""
        raise ConfigError(f"model base URL {url!r} is not an http:// or https:// URL{guess}")


def redact(text: str, secret: str | None) -> str:
    """Remove a key, and any partial echo of it (servers print its head), from an error text."""
    if not secret:
        return text
    text = text.replace(secret, "[redacted]")
    if len(secret) >= 12:
        head = secret[:8]
        text = text.replace(head, "[redacted]")
    return text
