"""`harness models check`: is this endpoint usable? (The checking is `harness.providers.check`.)"""

from __future__ import annotations

import os

import typer

from harness.cli import environment
from harness.cli.app import ExitCode, app, console, fail
from harness.errors import ConfigError, ModelAuthError, ModelError, ModelSpendLimitError

models_app = typer.Typer(help="Check model endpoints.", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(models_app, name="models")


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
        from harness.providers.check import check_endpoint

        prefix = environment.vendor(model)
        variable = environment.DEFAULT_KEY_ENV.get(prefix, "")
        report = check_endpoint(
            model,
            base_url=base_url or environment.base_url_fallback(model),
            api_key=os.environ.get(variable) or None if variable else None,
            key_variable=variable,
            timeout_s=timeout,
        )
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
    if report.retries:
        console.print(f"  retried:        {report.retries} time(s): {'; '.join(report.retry_reasons)}", soft_wrap=True)
    console.print(f"  streams:        {yes[report.streams]}")
    console.print(f"  calls tools:    {yes[report.calls_tools]} (stop reason {report.stop_reason})")
    console.print(
        f"  reports usage:  {yes[report.reports_usage]} ({report.input_tokens} in / {report.output_tokens} out)"
    )
