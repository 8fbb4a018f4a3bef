"""`harness run`, `harness resume`, `harness replay`, `harness show`: the agent loop end to end.

Exit codes of run/resume are the outcome's (see harness.outcome.OUTCOME_EXIT_CODES): verified 0,
unverified 10, failed_verification 11, stuck 12, limit:<which> 13, model_error 14,
sandbox_error 125, interrupted 130; usage/config/not-found errors keep the codes of ExitCode.
"""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Any, Optional

import typer

from harness.cli import wiring
from harness.cli.app import ExitCode, app, bench_app, console, docker_host, err_console, fail, reported, state_dir
from harness.cli.run_view import render_patch, render_session, render_steps, render_summary, result_of
from harness.config import RunConfig, load_config
from harness.outcome import RunResult, RunState
from harness.trajectory import StartRecord, Trajectory, read_state, write_state

_STATE_DIR = typer.Option(None, "--state-dir", help="Where sessions live (default: $HARNESS_STATE_DIR or the per-user data dir).")
_JSON = typer.Option(False, "--json", help="Print one JSON result object instead of the rich summary.")


@app.command("run")
def run(
    path: Path = typer.Argument(..., help="Repository to work on (copied; the original is never written)."),
    task: str = typer.Option(..., "--task", help="What the agent should do."),
    model: Optional[str] = typer.Option(None, "--model", help="PROVIDER:MODEL: openai:…, anthropic:…, scripted:FILE, replay:SESSION."),
    image: Optional[str] = typer.Option(None, "--image", help="Sandbox image for every tool call (default py311)."),
    base_url: Optional[str] = typer.Option(None, "--base-url", help="Model endpoint (vLLM, llama.cpp, Ollama, proxy)."),
    session: Optional[str] = typer.Option(None, "--session", help="Session id to create (default: generated)."),
    verify: Optional[str] = typer.Option(None, "--verify", help="Command that decides 'done' (exit 0 only)."),
    test_cmd: Optional[str] = typer.Option(None, "--test-cmd", help="Command run_tests runs (default: the verify command)."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", help="Model turns allowed (default 40)."),
    max_cost: Optional[float] = typer.Option(None, "--max-cost", help="Spend limit in USD."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", help="Input+output token limit for the run."),
    timeout_min: Optional[float] = typer.Option(None, "--timeout-min", help="Wall-clock limit in minutes."),
    max_verify_rounds: Optional[int] = typer.Option(None, "--max-verify-rounds", help="Failed verifications sent back before giving up (default 3)."),
    setup: Optional[list[str]] = typer.Option(None, "--setup", help="Setup command run once before step 1 (repeatable)."),
    setup_network: Optional[bool] = typer.Option(None, "--setup-network", help="Allow network for the setup commands only."),
    writable_root: bool = typer.Option(False, "--writable-root", help="Let commands change the container's root filesystem; each change is committed as the step's image."),
    runtime: Optional[str] = typer.Option(None, "--runtime", help="OCI runtime of every call: runc (default) or runsc (gVisor)."),
    state_dir_opt: Optional[Path] = _STATE_DIR,
    config_file: Optional[Path] = typer.Option(None, "--config", help="Config file (default: the per-user config.toml)."),
    json_out: bool = _JSON,
) -> None:
    """Drive a model through the tool menu until the verify command passes, a limit is hit, or it gives up."""
    sessions = state_dir(state_dir_opt)
    with reported():
        overrides: dict[str, Any] = {
            "model": model, "image": image, "base_url": base_url, "verify": verify, "test_cmd": test_cmd,
            "setup": setup or None, "setup_network": setup_network, "limits.max_steps": max_steps,
            "limits.max_cost_usd": max_cost, "limits.max_tokens": max_tokens, "limits.timeout_min": timeout_min,
            "limits.max_verify_rounds": max_verify_rounds,
            "sandbox.read_only_root": False if writable_root else None, "sandbox.runtime": runtime}
        config = load_config(config_file, overrides, repo=path)
        if not config.model:
            fail("no model: pass --model PROVIDER:MODEL or set model in the config file", ExitCode.USAGE)
        if not path.is_dir():
            fail(f"repository path does not exist: {path}", ExitCode.NOT_FOUND)
        config = config.model_copy(update={"model": wiring.absolute_model(config.model, sessions)})
        key = wiring.api_key(config)
        provider = wiring.build_provider(config, key)  # validates a script before any container starts
        on_phase = wiring.crash_hook(wiring.crash_env())
        sandbox = wiring.open_sandbox(docker_host(), session)
        try:
            wiring.check_image(sandbox, config.image)
            opened = wiring.create_session(path, sessions, config, sandbox, session)
            (Path(opened.dir) / wiring.RUN_CONFIG_FILE).write_text(config.model_dump_json(indent=1), encoding="utf-8")
            state = RunState(session_id=opened.id, task=task, model=config.model, snapshot_step=opened.step)
            write_state(opened.dir, state, [key] if key else [])
            _start_record(opened, config, state, path, resumed=False, key=key)
            result = _drive(config, opened, sandbox, provider, state, key, on_phase, not json_out)
        finally:
            sandbox.close()
    _report(result, json_out)


@app.command("resume")
def resume(
    session: str = typer.Argument(..., help="Session id to continue."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", help="Raise the step limit."),
    max_cost: Optional[float] = typer.Option(None, "--max-cost", help="Raise the spend limit (USD)."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", help="Raise the token limit."),
    timeout_min: Optional[float] = typer.Option(None, "--timeout-min", help="Raise the wall-clock limit."),
    state_dir_opt: Optional[Path] = _STATE_DIR,
    json_out: bool = _JSON,
) -> None:
    """Continue a crashed, interrupted or failed run from its last complete step."""
    sessions = state_dir(state_dir_opt)
    with reported():
        opened_dir = sessions / session
        config = _saved_config(opened_dir, {"limits.max_steps": max_steps, "limits.max_cost_usd": max_cost,
                                            "limits.max_tokens": max_tokens, "limits.timeout_min": timeout_min})
        state = read_state(opened_dir, RunState)
        if state is None:
            fail(f"session {session} has no run to resume", ExitCode.NOT_FOUND)
        if state.finished and state.result is not None:
            fail(f"session {session} already ended as {state.result.outcome}; nothing to resume", ExitCode.USAGE)
        key = wiring.api_key(config)
        provider = wiring.build_provider(config, key)
        on_phase = wiring.crash_hook(wiring.crash_env())
        sandbox = wiring.open_sandbox(docker_host(), session)
        try:
            opened = wiring.open_session(sessions, session)
            wiring.prune_crashed(sandbox, sessions, session)
            state = state.model_copy(update={"finished": False, "result": None})
            _start_record(opened, config, state, Path(str(getattr(opened, "repo", ""))), resumed=True, key=key)
            result = _drive(config, opened, sandbox, provider, state, key, on_phase, not json_out)
        finally:
            sandbox.close()
    _report(result, json_out)


@app.command("show")
def show(
    session: str = typer.Argument(..., help="Session id."),
    state_dir_opt: Optional[Path] = _STATE_DIR,
    json_out: bool = typer.Option(False, "--json", help="Print the final result object as JSON."),
) -> None:
    """Render a session: steps, tool calls, results, tokens, cost, outcome."""
    directory = state_dir(state_dir_opt) / session
    if not directory.is_dir():
        fail(f"no session {session} in {directory.parent}", ExitCode.NOT_FOUND)
    with reported():
        if json_out:
            print(result_of(directory).model_dump_json(indent=2))
        else:
            render_session(console, directory)


@app.command("replay")
def replay(
    session: str = typer.Argument(..., help="Recorded session whose tool calls are re-issued."),
    state_dir_opt: Optional[Path] = _STATE_DIR,
    json_out: bool = _JSON,
) -> None:
    """Re-issue a session's recorded tool calls on a fresh copy of its original repository and report,
    step by step, where the results diverge (exit 0 when none does, 1 otherwise)."""
    from harness.replay import replay_session

    sessions = state_dir(state_dir_opt)
    with reported():
        config = _saved_config(sessions / session, {})
        sandbox = wiring.open_sandbox(docker_host(), None)
        try:
            report = replay_session(sessions / session, sessions, config, sandbox)
        finally:
            sandbox.close()
    if json_out:
        print(report.model_dump_json(indent=2))
    else:
        for step in report.steps:
            mark = "[green]same[/]" if step.same else f"[red]DIVERGED[/] {step.first_difference}"
            console.print(f"step {step.step:>3}  {step.name:<12} {step.call_id:<14} {mark}", soft_wrap=True)
        console.print(f"{report.diverged} of {len(report.steps)} tool results diverged (replayed in {report.session_id})")
    raise typer.Exit(0 if report.diverged == 0 else 1)


def _drive(config: RunConfig, session: Any, sandbox: Any, provider: Any, state: RunState, key: str | None,
           on_phase: Any, may_ask: bool) -> RunResult:
    interactive = may_ask and sys.stdin.isatty() and sys.stderr.isatty()
    agent = wiring.build_agent(config=config, session=session, sandbox=sandbox, provider=provider, state=state,
                               secrets=[key] if key else [], on_phase=on_phase, interactive=interactive)
    previous = signal.signal(signal.SIGTERM, _interrupt)  # a batch runner's kill stops cleanly too
    try:
        return agent.run()
    finally:
        signal.signal(signal.SIGTERM, previous)


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _start_record(session: Any, config: RunConfig, state: RunState, repo: Path, *, resumed: bool,
                  key: str | None) -> None:
    trajectory = Trajectory(session.dir, [key] if key else [])
    trajectory.append(StartRecord(session_id=state.session_id, task=state.task, model=config.model or "",
                                  repo=str(repo), resumed=resumed, config=config.model_dump(mode="json")),
                      durable=True)
    trajectory.close()


def _saved_config(session_dir: Path, overrides: dict[str, Any]) -> RunConfig:
    saved = session_dir / wiring.RUN_CONFIG_FILE
    if not saved.is_file():
        fail(f"no run recorded in {session_dir}", ExitCode.NOT_FOUND)
    data = json.loads(saved.read_text(encoding="utf-8"))
    for dotted, value in overrides.items():
        if value is not None:
            section, _, leaf = dotted.partition(".")
            data.setdefault(section, {})[leaf] = value
    return RunConfig.model_validate(data)


def _report(result: RunResult, json_out: bool) -> None:
    if json_out:
        print(result.model_dump_json(indent=2))
    else:
        render_steps(console, Path(result.session_dir))
        render_summary(console, result)
        render_patch(console, result.patch)
        if result.outcome in ("interrupted", "model_error", "sandbox_error") or result.outcome.startswith("limit:"):
            err_console.print(f"resume with: harness resume {result.session_id}")
    raise typer.Exit(result.exit_code)


@bench_app.command("run")
def bench_run(rounds: int = typer.Option(3, "--rounds", min=1, max=50, help="Run/bare pairs; the median is reported."),
              json_out: bool = _JSON) -> None:
    """Controller overhead per step and the whole example run against bare exec, side by side."""
    from harness.cli.run_bench import measure

    with reported():
        result = measure(docker_host(), rounds=rounds)
    if json_out:
        print(result.model_dump_json(indent=2))
        return
    console.print(f"example run: {result.outcome} in {result.steps} steps, {result.sandbox_calls} sandbox calls")
    console.print(f"controller overhead per step: median {result.overhead_ms_per_step} ms, "
                  f"p90 {result.overhead_ms_p90} ms (target ≤ 150 ms)")
    console.print(f"whole run {result.run_ms:.0f} ms vs the same commands by exec in one container "
                  f"{result.bare_ms:.0f} ms (medians of {result.rounds} rounds): run_over_bare = "
                  f"{result.run_over_bare} (target ≤ 2; rounds: {', '.join(map(str, result.ratios))})")
