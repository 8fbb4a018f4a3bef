"""`harness models check` (is this endpoint usable?) and `harness bench provider`."""

from __future__ import annotations

import os
from typing import Any

import typer
from pydantic import BaseModel

from harness.cli import environment
from harness.cli.app import ExitCode, app, console, fail
from harness.errors import ConfigError, ModelAuthError, ModelError, ModelSpendLimitError
from harness.providers.config import ProviderConfig, RetryConfig
from harness.providers.factory import parse_spec
from harness.types import Message, ToolSchema

models_app = typer.Typer(help="Check model endpoints.", no_args_is_help=True)
app.add_typer(models_app, name="models")

_KEY_ENV = environment.DEFAULT_KEY_ENV
_BASE_URL_ENV = environment.DEFAULT_BASE_URL_ENV  # the same variables `harness run` falls back to
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


def api_key_for(prefix: str, config: ProviderConfig) -> str | None:
    """The key from the environment (only the CLI reads it); None when unset."""
    return os.environ.get(config.api_key_env or _KEY_ENV.get(prefix, "")) or None


def _check(spec: str, base_url: str | None, timeout_s: float) -> CheckReport:
    import httpx2

    from harness.providers.anthropic import AnthropicProvider
    from harness.providers.openai_compat import OpenAICompatProvider

    prefix, model = parse_spec(spec)
    if prefix not in _KEY_ENV:
        raise ConfigError(f"models check needs an openai: or anthropic: model, not {prefix!r}")
    url = base_url or os.environ.get(_BASE_URL_ENV[prefix]) or None
    config = ProviderConfig(
        model=model,
        base_url=url,
        timeout_s=timeout_s,
        stall_timeout_s=timeout_s,
        retry=RetryConfig(max_retries_per_call=0),
    )
    key = api_key_for(prefix, config)
    if key is None and url is None:
        raise ModelAuthError(f"no API key: set {_KEY_ENV[prefix]} (or pass --base-url for a local server)")
    seen: dict[str, Any] = {}

    def on_response(response: httpx2.Response) -> None:
        seen["content_type"] = response.headers.get("content-type", "")

    client = httpx2.Client(event_hooks={"response": [on_response]})
    cls = OpenAICompatProvider if prefix == "openai" else AnthropicProvider
    provider = cls(config, api_key=key, http_client=client)
    turn = provider.complete(_PROMPT, [_PING], max_tokens=64)
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
    )


@models_app.command("check")
def check(
    model: str = typer.Option("openai:gpt-4.1", "--model", "-m", help="openai:MODEL or anthropic:MODEL."),
    base_url: str | None = typer.Option(
        None, "--base-url", help="Endpoint (vLLM, llama.cpp, Ollama); default $OPENAI_BASE_URL / vendor."
    ),
    timeout: float = typer.Option(30.0, "--timeout", help="Seconds to wait for the answer (also the stall limit)."),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Send one tiny request with one tool: does the endpoint stream, call tools, report usage?

    Exit codes: 0 reachable, 77 key rejected or spend limit, 69 unreachable/timeout/other model error,
    78 bad model spec.
    """
    try:
        report = _check(model, base_url, timeout)
    except (ModelAuthError, ModelSpendLimitError) as error:
        fail(str(error), ExitCode.MODEL_AUTH)
    except ModelError as error:
        fail(str(error), ExitCode.MODEL_UNAVAILABLE)
    except ConfigError as error:
        fail(str(error), ExitCode.CONFIG)
    if as_json:
        console.print_json(report.model_dump_json())
        return
    yes = {True: "[green]yes[/]", False: "[yellow]no[/]"}
    console.print(
        f"{report.model} at {report.base_url}: reachable ({report.latency_ms} ms, model {report.served_model or '?'})",
        soft_wrap=True,
    )
    console.print(f"  streams:        {yes[report.streams]}")
    console.print(f"  calls tools:    {yes[report.calls_tools]} (stop reason {report.stop_reason})")
    console.print(
        f"  reports usage:  {yes[report.reports_usage]} ({report.input_tokens} in / {report.output_tokens} out)"
    )
