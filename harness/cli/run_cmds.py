"""`harness run`, `harness resume`, `harness replay`, `harness show`: the agent loop end to end.

Exit codes of run/resume are the outcome's (`harness.agent.outcome.OUTCOME_EXIT_CODES`, members of the one
table `ExitCode`); usage, config and not-found errors exit with their class's code.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from harness.cli import environment
from harness.cli.app import (
    ALLOW_NET,
    ALLOW_NET_CA,
    ALLOW_NET_TOOLS,
    CA_BUNDLE,
    OTEL_CONTENT,
    OTEL_ENDPOINT,
    OTEL_FILE,
    SECRET,
    ExitCode,
    absolute,
    app,
    console,
    err_console,
    fail,
    reported,
    state_dir,
)

if TYPE_CHECKING:
    from harness.agent.outcome import RunResult
    from harness.config import RunConfig

_STATE_DIR = typer.Option(
    None, "--state-dir", help="Where sessions live (default: $HARNESS_STATE_DIR or the per-user data dir)."
)
_JSON = typer.Option(False, "--json", help="Print one JSON result object instead of the rich summary.")


@app.command("run")
def run(
    path: Path = typer.Argument(..., help="Repository to work on (copied; the original is never written)."),
    task: str = typer.Option(..., "--task", help="What the agent should do."),
    model: str | None = typer.Option(
        None,
        "--model",
        help="PROVIDER:MODEL: openai:…, openai-responses:…, anthropic:…, bedrock:…, vertex:…, scripted:FILE, replay:SESSION.",
    ),
    agent: str | None = typer.Option(
        None,
        "--agent",
        help="A hosted agent instead of harness's loop: claude-code, opencode (--model anthropic:MODEL), codex "
        "(openai-responses:MODEL), gemini (gemini:MODEL); docs/agents.md.",
    ),
    agent_shell: str | None = typer.Option(
        None,
        "--agent-shell",
        metavar="harness|own",
        help="A hosted agent's commands: harness's run_command, a fresh container each (default), or its own "
        "shell in its own container, each command gated and recorded as a step.",
    ),
    image: str | None = typer.Option(None, "--image", help="Sandbox image for every tool call (default py311)."),
    base_url: str | None = typer.Option(None, "--base-url", help="Model endpoint (vLLM, llama.cpp, Ollama, proxy)."),
    api_key_env: str | None = typer.Option(
        None, "--api-key-env", help="The environment variable the model's key is read from (default: the vendor's)."
    ),
    region: str | None = typer.Option(None, "--region", help="bedrock:/vertex: models: the cloud region."),
    project: str | None = typer.Option(None, "--project", help="vertex: models: the Google Cloud project."),
    session: str | None = typer.Option(None, "--session", help="Session id to create (default: generated)."),
    verify: str | None = typer.Option(
        None, "--verify", help="Command that decides 'done' (exit 0 only; default: detected from the repository)."
    ),
    no_verify: bool = typer.Option(False, "--no-verify", help="No verify command, none detected: ends `unverified`."),
    test_cmd: str | None = typer.Option(
        None, "--test-cmd", help="Command run_tests runs (default: the verify command)."
    ),
    checks: list[str] | None = typer.Option(
        None, "--check", help="Command that must also exit 0 after verify passes: a linter, a type check (repeatable)."
    ),
    max_steps: int | None = typer.Option(None, "--max-steps", help="Model turns allowed (default 40)."),
    max_cost: float | None = typer.Option(None, "--max-cost", help="Spend limit in USD."),
    max_tokens: int | None = typer.Option(None, "--max-tokens", help="Input+output token limit for the run."),
    timeout_min: float | None = typer.Option(None, "--timeout-min", help="Wall-clock limit in minutes."),
    max_verify_rounds: int | None = typer.Option(
        None, "--max-verify-rounds", help="Failed verifications sent back before giving up (default 3)."
    ),
    setup: list[str] | None = typer.Option(
        None,
        "--setup",
        help="Setup command run once before step 1 (repeatable); `auto`: detected from the repository; `devcontainer`: its devcontainer.json.",
    ),
    setup_network: bool | None = typer.Option(
        None, "--setup-network", help="Allow network for the setup commands only."
    ),
    setup_ca: Path | None = typer.Option(
        None, "--setup-ca", help="PEM CA bundle the setup container trusts (HTTPS through a proxy); setup only."
    ),
    setup_proxy: str | None = typer.Option(
        None, "--setup-proxy", help="HTTP(S) proxy URL for the setup commands only."
    ),
    setup_mounts: list[str] | None = typer.Option(
        None, "--setup-mount", help="HOST_DIR:CONTAINER_DIR bound read-only into the setup container (repeatable)."
    ),
    setup_timeout: float | None = typer.Option(
        None, "--setup-timeout", min=1, max=24 * 3600, help="Seconds all the setup commands together may take [900]."
    ),
    pull_from: list[str] | None = typer.Option(
        None,
        "--pull-from",
        help="A registry a devcontainer's image (or its Dockerfile's FROM) may be pulled from when the engine "
        "lacks it (repeatable; docker.io for a bare name); from no other is anything pulled.",
    ),
    allow_net: list[str] | None = ALLOW_NET,
    allow_net_tools: bool | None = ALLOW_NET_TOOLS,
    secret: list[str] | None = SECRET,
    allow_net_ca: Path | None = ALLOW_NET_CA,
    ca_bundle: Path | None = CA_BUNDLE,
    workspace_quota: str | None = typer.Option(
        None, "--workspace-quota", help="Bytes the workspace may hold, e.g. 2g (its own filesystem; root only)."
    ),
    writable_root: bool = typer.Option(
        False,
        "--writable-root",
        help="Let commands change the container's root filesystem; each change is committed as the step's image.",
    ),
    thinking: str | None = typer.Option(
        None, "--thinking", help="Turn the model's reasoning on: low, medium or high effort (reasoning models)."
    ),
    runtime: str | None = typer.Option(
        None, "--runtime", help="OCI runtime of every call: runc (default) or runsc (gVisor)."
    ),
    repo_hooks: bool = typer.Option(
        False,
        "--repo-hooks",
        help="Run the hooks the repository declares (.harness/hooks.toml), each in a sandbox container, never here.",
    ),
    delegate_depth: int | None = typer.Option(
        None,
        "--delegate-depth",
        min=0,
        max=4,
        help="Let the model hand pieces of the task to sub-agents, this many levels deep (0: none, the default).",
    ),
    attempts: int | None = typer.Option(
        None,
        "--attempts",
        min=1,
        max=16,
        metavar="K",
        help="K attempts at the task from the same start, at once, within the run's one budget (docs/attempts.md).",
    ),
    select: str | None = typer.Option(
        None,
        "--select",
        metavar="first|best",
        help="Which attempt is kept: first (the first verified stops the rest, the default) or best (all end; "
        "ranked by verification, then the smaller change).",
    ),
    rollout: bool = typer.Option(
        False,
        "--rollout",
        help="Keep each turn's sampled tokens and log-probabilities (ids where the server gives them) for "
        "`harness export --format rollout` (OpenAI-compatible servers; docs/rollouts.md).",
    ),
    instructions: Path | None = typer.Option(
        None,
        "--instructions",
        metavar="FILE",
        help="Your own standing instructions for the model (its system prompt); `instructions = PATH` in the config.",
    ),
    no_repo_instructions: bool = typer.Option(
        False,
        "--no-repo-instructions",
        help="Do not give the model the repository's AGENTS.md / CLAUDE.md (given by default, as its authors' "
        "untrusted words).",
    ),
    state_dir_opt: Path | None = _STATE_DIR,
    config_file: Path | None = typer.Option(None, "--config", help="Config file (default: the per-user config.toml)."),
    otel_endpoint: str | None = OTEL_ENDPOINT,
    otel_file: Path | None = OTEL_FILE,
    otel_content: bool = OTEL_CONTENT,
    json_out: bool = _JSON,
) -> None:
    """Drive a model through the tool menu until the verify command passes, a limit is hit, or it gives up."""
    from harness import assembly
    from harness.config import load_config

    sessions = state_dir(state_dir_opt)
    with reported():
        overrides: dict[str, Any] = {
            "model": model,
            "agent": agent,
            "agent_shell": agent_shell,
            "image": image,
            "base_url": base_url,
            "region": region,
            "project": project,
            "verify": verify,
            "test_cmd": test_cmd,
            "checks": checks or None,
            "setup": setup or None,
            "setup_network": setup_network,
            "setup_ca": absolute(setup_ca),
            "setup_proxy": setup_proxy,
            "setup_mounts": setup_mounts or None,
            "setup_timeout": setup_timeout,
            "devcontainer_pull": pull_from or None,
            "allow_net": allow_net or None,
            "allow_net_tools": allow_net_tools,
            "secrets": secret or None,
            "allow_net_ca": absolute(allow_net_ca),
            "ca_bundle": absolute(ca_bundle),
            "workspace_quota": workspace_quota,
            "limits.max_steps": max_steps,
            "limits.max_cost_usd": max_cost,
            "limits.max_tokens": max_tokens,
            "limits.timeout_min": timeout_min,
            "limits.max_verify_rounds": max_verify_rounds,
            "sandbox.read_only_root": False if writable_root else None,
            "sandbox.runtime": runtime,
            "thinking": thinking,
            "repo_hooks": True if repo_hooks else None,
            "delegate.depth": delegate_depth,
            "rollout": True if rollout else None,
            "attempts.count": attempts,
            "attempts.select": select,
            "instructions": absolute(instructions),
            "repo_instructions": False if no_repo_instructions else None,
        }
        if no_verify and verify:
            fail("--verify and --no-verify contradict each other", ExitCode.USAGE)
        if select is not None and select not in ("first", "best"):
            fail(f"--select takes first or best, not {select!r}", ExitCode.USAGE)
        environment.model_flag(model)
        environment.bundle_flags(ca_bundle=ca_bundle, allow_net_ca=allow_net_ca, setup_ca=setup_ca)
        if no_verify:
            overrides["detect_verify"] = False
        config = load_config(config_file, overrides, repo=path)
        if not config.model:
            fail("no model: pass --model PROVIDER:MODEL or set model in the config file", ExitCode.USAGE)
        config = with_key_env(config, api_key_env)
        if not path.is_dir():
            fail(f"repository path does not exist: {path}", ExitCode.NOT_FOUND)
        config = assembly.with_setup(assembly.with_verify(config, path), path)
        from harness.cli.terminal import visible

        if config.setup_source:  # commands a repository's file wrote, too: its control characters made visible
            shown = f"`{' && '.join(config.session.setup)}`" if config.session.setup else "no commands"
            err_console.print(visible(f"setup: {shown} ({config.setup_source})"), soft_wrap=True, markup=False)
        for line in assembly.devcontainer_lines(config.devcontainer):
            err_console.print(visible(line), soft_wrap=True, markup=False)
        if config.verify_source:
            err_console.print(f"verify: `{config.verify}` ({config.verify_source})", soft_wrap=True, markup=False)
        spans = environment.telemetry(otel_endpoint, otel_file, otel_content)
        outside = environment.runtime(config, interactive=_interactive(json_out), spans=spans)
        for warning in [*assembly.endpoint_warnings(config, outside), *assembly.tool_warnings(config, path)]:
            err_console.print(f"warning: {warning}", soft_wrap=True, markup=False)
        result = _terminable(lambda: assembly.start_run(path, task, config, sessions, outside, session))
    _report(result, json_out)


@app.command("resume")
def resume(
    session: str = typer.Argument(..., help="Session id to continue."),
    model: str | None = typer.Option(
        None, "--model", help="Continue with another model (the conversation so far is sent to it as it is)."
    ),
    base_url: str | None = typer.Option(None, "--base-url", help="Continue against another endpoint."),
    api_key_env: str | None = typer.Option(
        None, "--api-key-env", help="Read the model's key from this environment variable from now on."
    ),
    region: str | None = typer.Option(None, "--region", help="bedrock:/vertex: models: another cloud region."),
    project: str | None = typer.Option(None, "--project", help="vertex: models: another Google Cloud project."),
    thinking: str | None = typer.Option(None, "--thinking", help="The model's reasoning effort: low, medium, high."),
    max_steps: int | None = typer.Option(None, "--max-steps", help="Raise the step limit."),
    max_cost: float | None = typer.Option(None, "--max-cost", help="Raise the spend limit (USD)."),
    max_tokens: int | None = typer.Option(None, "--max-tokens", help="Raise the token limit."),
    timeout_min: float | None = typer.Option(None, "--timeout-min", help="Raise the wall-clock limit."),
    allow_net: list[str] | None = ALLOW_NET,
    allow_net_tools: bool | None = ALLOW_NET_TOOLS,
    secret: list[str] | None = SECRET,
    ca_bundle: Path | None = CA_BUNDLE,
    state_dir_opt: Path | None = _STATE_DIR,
    otel_endpoint: str | None = OTEL_ENDPOINT,
    otel_file: Path | None = OTEL_FILE,
    otel_content: bool = OTEL_CONTENT,
    follow_up: str | None = typer.Option(
        None,
        "--follow-up",
        help="A next request in the same conversation: any run goes on with it, an ended one too (verified anew).",
    ),
    json_out: bool = _JSON,
) -> None:
    """Continue a crashed, interrupted or failed run from its last complete step; the endpoint, the
    key's variable, the model and its options, limits and network may change (the trajectory records
    what did), the task, tools and verify command may not. `--follow-up TEXT` goes on with a new
    request, after any ending."""
    from harness import assembly
    from harness.providers.vendor import prefix_of

    with reported():
        sessions, session = environment.session_at(state_dir_opt, session)
    overrides: dict[str, Any] = {
        "model": model,
        "base_url": base_url,
        "region": region,
        "project": project,
        "thinking": thinking,
        "limits.max_steps": max_steps,
        "limits.max_cost_usd": max_cost,
        "limits.max_tokens": max_tokens,
        "limits.timeout_min": timeout_min,
        "session.allow_net": allow_net or None,
        "session.allow_net_tools": allow_net_tools,
        "session.secrets": secret or None,
        "session.ca_bundle": absolute(ca_bundle),
    }
    with reported():
        environment.model_flag(model)
        if api_key_env:
            saved = assembly.saved_config(sessions / session, overrides, flags=True)
            overrides[f"providers.{prefix_of(saved.model)}.api_key_env"] = checked_key_env(api_key_env)
        config = assembly.saved_config(sessions / session, overrides, flags=True)
        spans = environment.telemetry(otel_endpoint, otel_file, otel_content)
        outside = environment.runtime(config, interactive=_interactive(json_out), spans=spans)
        if follow_up is not None and not follow_up.strip():
            fail("--follow-up needs a request", ExitCode.USAGE)
        result = _terminable(lambda: assembly.resume_run(session, sessions, outside, overrides, follow_up))
    _report(result, json_out)


@app.command("show")
def show(
    session: str = typer.Argument(..., help="Session id."),
    state_dir_opt: Path | None = _STATE_DIR,
    verbose: bool = typer.Option(
        False, "-v", "--verbose", help="Each call's and verification's output too (its last lines)."
    ),
    step: int | None = typer.Option(None, "--step", min=1, help="That step alone, its outputs whole."),
    json_out: bool = typer.Option(False, "--json", help="Print the final result object as JSON."),
) -> None:
    """Render a session: steps, tool calls, results, tokens, cost, outcome (`-v`: with each output's
    last lines; `--step N`: one step, its outputs whole)."""
    from harness.cli import run_view
    from sandbox.layout import session_folder

    if json_out and (verbose or step is not None):
        fail("--json prints the result object; -v and --step are for reading on a terminal", ExitCode.USAGE)
    with reported():
        sessions, session = environment.session_at(state_dir_opt, session)
    if not json_out:
        with reported():
            run_view.show(console, sessions, session, verbose=verbose, step=step)
        return
    folder = session_folder(sessions, session)
    if not folder.root.is_dir():
        fail(f"no session {session} in {folder.root.parent}", ExitCode.NOT_FOUND)
    if (
        not folder.run_config.is_file()
        and not folder.trajectory.is_file()
        and run_view.subagent_of(folder.info) is None
    ):
        fail(f"session {session} never had a run: no result to print (see: harness show {session})", 66)
    with reported():
        print(run_view.result_of(folder.root).model_dump_json(indent=2))


@app.command("replay")
def replay(
    session: str = typer.Argument(..., help="Recorded session whose tool calls are re-issued."),
    state_dir_opt: Path | None = _STATE_DIR,
    json_out: bool = _JSON,
) -> None:
    """Re-issue a session's recorded tool calls on a fresh copy of its original repository and report,
    step by step, where the results diverge (exit 0 when none does, 1 otherwise)."""
    from harness import assembly

    sessions = state_dir(state_dir_opt)
    with reported():
        report = assembly.replay_run(
            session, sessions, environment.runtime(assembly.saved_config(sessions / session, {}))
        )
    if json_out:
        print(report.model_dump_json(indent=2))
    else:
        from rich.markup import escape

        for step in report.steps:
            mark = "[green]same[/]" if step.same else f"[red]DIVERGED[/] {escape(step.first_difference)}"
            named = escape(f"{step.name:<12} {step.call_id:<14}")
            who = escape(f"  {step.agent} ") if step.agent else ""
            console.print(f"{who}step {step.step:>3}  {named} {mark}", soft_wrap=True)
        console.print(
            f"{report.diverged} of {len(report.steps)} tool results diverged (replayed in {report.session_id})"
        )
    raise typer.Exit(int(ExitCode.OK if report.diverged == 0 else ExitCode.DIVERGED))


def resume_hint(result: RunResult) -> str:
    """How to continue a run that stopped short, with the flag that changes what stopped it."""
    command = f"harness resume {result.session_id}"
    if result.kind == "model_error" and result.cause == "endpoint_unreachable":
        return f"resume with: {command} --base-url URL (the endpoint never answered; or start its server first)"
    if result.kind == "model_error" and result.cause == "key_rejected":
        return f"resume with: {command} --api-key-env VAR (the endpoint rejected the key; or set a valid one)"
    if result.kind == "model_error":
        return f"resume with: {command} (add --base-url URL, --model M or --api-key-env VAR to change what failed)"
    if result.kind == "limit":
        flag = {"steps": "--max-steps", "cost": "--max-cost", "tokens": "--max-tokens", "wall_clock": "--timeout-min"}
        raised = flag.get(result.limit or "", "")
        return f"resume with: {command}" + (f" {raised} N (a higher limit)" if raised else "")
    return f"resume with: {command}"


def checked_key_env(name: str) -> str:
    """An environment variable's name, as --api-key-env takes it (the key itself is never a flag)."""
    import re

    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", name):
        fail(f"--api-key-env {name!r}: give the name of an environment variable (such as MY_KEY), not a key", 64)
    return name


def with_key_env(config: RunConfig, name: str | None) -> RunConfig:
    """config with its model's provider entry reading the key from `name` (None: as it was)."""
    from harness.config import ProviderConfig
    from harness.providers.vendor import prefix_of

    if not name:
        return config
    prefix = prefix_of(config.model)
    entry = config.providers.get(prefix, ProviderConfig()).model_copy(update={"api_key_env": checked_key_env(name)})
    return config.model_copy(update={"providers": {**config.providers, prefix: entry}})


def _interactive(json_out: bool) -> bool:
    """A person can answer approvals: a terminal on both ends and no machine-readable output."""
    return not json_out and sys.stdin.isatty() and sys.stderr.isatty()


def _terminable(work: Callable[[], RunResult]) -> RunResult:
    """Run work with SIGTERM turned into an interrupt, so a batch runner's kill stops cleanly too."""
    from harness.cli.failure import sigterm_interrupts

    with sigterm_interrupts():
        return work()


def _report(result: RunResult, json_out: bool) -> None:
    from harness import readback
    from harness.agent.outcome import RESUMABLE
    from harness.cli.run_view import render_attempts, render_patch, render_steps, render_summary, render_warnings

    if json_out:
        print(result.model_dump_json(indent=2))
    else:
        render_steps(console, Path(result.session_dir))
        render_attempts(console, Path(result.session_dir))
        render_summary(console, result.model_dump(mode="json"))
        render_warnings(console, Path(result.session_dir))
        render_patch(console, result.patch)
        chosen = (readback.attempts(Path(result.session_dir)) or {}).get("chosen")
        if result.kind in RESUMABLE and not chosen:  # a run of attempts that chose one is over
            err_console.print(resume_hint(result), markup=False, soft_wrap=True)
    raise typer.Exit(result.exit_code)
