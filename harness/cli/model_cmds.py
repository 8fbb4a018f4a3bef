"""`harness models check`: is this endpoint usable? (The checking is `harness.providers.check`.)"""

from __future__ import annotations

import typer

from harness.cli import environment
from harness.cli.app import ExitCode, app, console, err_console, fail, group
from harness.errors import ConfigError, ModelAuthError, ModelError, ModelSpendLimitError

models_app = group("Check model endpoints.")
app.add_typer(models_app, name="models")


@models_app.command("check")
def check(
    model: str = typer.Option(
        "openai:gpt-4.1", "--model", "-m", help="openai:, openai-responses:, anthropic:, bedrock: or vertex:MODEL."
    ),
    base_url: str | None = typer.Option(
        None, "--base-url", help="Endpoint (vLLM, llama.cpp, Ollama); default $OPENAI_BASE_URL / vendor."
    ),
    region: str | None = typer.Option(None, "--region", help="bedrock:/vertex: the cloud region."),
    project: str | None = typer.Option(None, "--project", help="vertex: the Google Cloud project."),
    timeout: float | None = typer.Option(
        None,
        "--timeout",
        min=0.1,
        help="Seconds each wait may take (default: the endpoint's limits; a local server's fit a model on CPU).",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON."),
) -> None:
    """Send two small identical requests with one tool: does the endpoint stream, call tools (two at
    once), report usage, reason, cache? A local server (Ollama, llama.cpp) is named with the context
    it really keeps.

    Exit codes: 0 reachable, 77 key rejected or spend limit, 69 unreachable/timeout/other model error,
    78 bad model spec, base URL or a server that cannot do tools as started.
    """
    from rich.markup import escape

    from harness.config import ContextConfig, load_config
    from harness.providers.vendor import prefix_of

    try:
        from harness.providers.check import check_endpoint

        config = load_config(None)
        variable, key = environment.model_key(model, config)
        cloud = environment.cloud_fallback(model)
        report = check_endpoint(
            model,
            base_url=base_url or environment.base_url_fallback(model),
            api_key=key,
            key_variable=variable or "",
            timeout_s=timeout,
            region=region or cloud.get("region"),
            project=project or cloud.get("project"),
            context_budget=ContextConfig().budget_tokens,
            settings=config.providers.get(prefix_of(model)),
        )
    except (ModelAuthError, ModelSpendLimitError) as error:
        fail(str(error), ExitCode.MODEL_AUTH)
    except ModelError as error:
        fail(str(error), error.exit_code)
    except ConfigError as error:
        fail(str(error), ExitCode.CONFIG)
    if as_json:
        console.print_json(report.model_dump_json())
        return
    yes = {True: "[green]yes[/]", False: "[yellow]no[/]", None: "[yellow]unknown[/] (the second request failed)"}
    served = escape(report.served_model or "?")
    console.print(
        f"{escape(report.model)} at {escape(report.base_url)}: reachable ({report.latency_ms} ms, model {served})",
        soft_wrap=True,
    )
    if report.retries:
        reasons = escape("; ".join(report.retry_reasons))
        console.print(f"  retried:        {report.retries} time(s): {reasons}", soft_wrap=True)
    console.print(f"  streams:        {yes[report.streams]}")
    console.print(f"  calls tools:    {yes[report.calls_tools]} (stop reason {report.stop_reason})")
    console.print(f"  parallel tools: {yes[report.parallel_tools]}")
    counted = " counted by harness, estimated" if report.usage_estimated else ""
    console.print(
        f"  reports usage:  {yes[report.reports_usage]} ({report.input_tokens} in / {report.output_tokens} out{counted})"
    )
    console.print(f"  reasoning:      {yes[report.reasoning]}")
    console.print(f"  prompt cache:   {yes[report.caches]} ({report.cached_tokens} cached on the second request)")
    if report.server:
        keeps = report.server.context_tokens
        kept = f"keeps {keeps} tokens ({report.server.context_source})" if keeps else "does not say its context"
        console.print(f"  server:         {report.server.kind} {escape(report.server.version)}, {kept}", soft_wrap=True)
        if report.server.warning:
            err_console.print(f"[yellow]warning:[/] {escape(report.server.warning)}", soft_wrap=True)
