"""`harness batch TASKS --out DIR` (every task of a tasks file with each model, on a Dask cluster) and
`harness worker SCHEDULER` (a machine serving a batch cluster).

Exit codes: 0 the batch ran to its end (whatever the outcomes: they are in the records and the
report); 64 bad flags; 78 an invalid tasks file (the message names the line and field); 125 no
engine; 130 interrupted (the same command again continues).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from harness.cli import environment
from harness.cli.app import (
    OTEL_CONTENT,
    OTEL_ENDPOINT,
    OTEL_FILE,
    ExitCode,
    app,
    console,
    err_console,
    fail,
    group,
    real_console,
    reported,
)

if TYPE_CHECKING:
    from harness.batch.runner import BatchBudget
    from harness.batch.tasks import TasksFile


@app.command("batch")
def batch(
    tasks_file: Path = typer.Argument(..., metavar="TASKS", help="Tasks file (YAML or JSONL)."),
    out: Path = typer.Option(..., "--out", help="Batch directory: records, sessions (rerun to continue)."),
    model: list[str] = typer.Option(
        [], "--model", help="PROVIDER:MODEL or AGENT@PROVIDER:MODEL (repeatable: every task with each)."
    ),
    agent: list[str] = typer.Option(
        [],
        "--agent",
        help="Give every model to this hosted agent (claude-code, codex; harness: harness's own loop); "
        "repeatable: each model with each agent, side by side in one report.",
    ),
    runs: int | None = typer.Option(None, "--runs", min=1, max=100, help="Runs per task and model (pass@k)."),
    workers: str | None = typer.Option(
        None,
        "--workers",
        metavar="N|auto",
        help="Concurrent sessions on a local cluster [default: from cores and memory]; auto: grows while "
        "calls and model requests keep their pace, shrinks on engine errors, 429s and memory pressure.",
    ),
    max_cost: float | None = typer.Option(None, "--max-cost", min=0, help="Global spend limit in USD."),
    max_tokens: int | None = typer.Option(None, "--max-tokens", min=1, help="Global token limit."),
    max_hours: float | None = typer.Option(None, "--max-hours", min=0.0001, help="Global wall-clock limit in hours."),
    cluster: str | None = typer.Option(None, "--cluster", help="An existing Dask scheduler, tcp://HOST:8786."),
    otel_endpoint: str | None = OTEL_ENDPOINT,
    otel_file: Path | None = OTEL_FILE,
    otel_content: bool = OTEL_CONTENT,
    json_out: bool = typer.Option(False, "--json", help="One JSON line per event instead of the progress lines."),
) -> None:
    """Run every task-run not yet recorded in DIR; the records are the source of truth."""
    from harness.batch.records import BatchDir
    from harness.batch.runner import BatchBudget
    from harness.batch.tasks import given_to, known_agent, load_tasks
    from harness.errors import UsageError

    with reported():
        tasks = load_tasks(tasks_file)
        models = [str(environment.model_flag(m, batch=True)) for m in model]
        if agent:
            for name in agent:
                try:
                    known_agent(name)
                except ValueError as error:
                    raise UsageError(f"--agent {error}") from None
            base = models or tasks.defaults.model or BatchDir(out).models()
            models = list(dict.fromkeys(given_to(m, name) for name in agent for m in base))
    execute(
        tasks,
        out,
        models=models,
        runs=runs,
        workers=workers,
        budget=BatchBudget(max_cost_usd=max_cost, max_tokens=max_tokens, max_hours=max_hours),
        cluster=cluster,
        telemetry=(otel_endpoint, otel_file, otel_content),
        json_out=json_out,
    )


def execute(
    tasks: TasksFile,
    out: Path,
    *,
    models: list[str],
    runs: int | None,
    workers: str | int | None,
    budget: BatchBudget,
    cluster: str | None,
    telemetry: tuple[str | None, Path | None, bool],
    json_out: bool,
) -> None:
    """Run a batch of tasks into out with the progress display (or JSON lines), then its reports."""
    import signal

    from harness.batch.records import BatchDir
    from harness.batch.runner import BatchEvent, default_workers, run_batch
    from harness.cli.batch_view import finished_line, live_display
    from harness.config import load_config
    from harness.providers.vendor import prefix_of
    from harness.spend import default_ledger

    interrupts = [0]

    def on_interrupt(signum: int, frame: object) -> None:
        interrupts[0] += 1
        if interrupts[0] > 1:
            raise KeyboardInterrupt  # the second: the running sessions stop too (they resume next time)
        err_console.print("stopping: no new task-run starts, running ones finish (Ctrl-C again to interrupt them)")

    adaptive = workers == "auto"
    slots = default_workers(adaptive=adaptive) if adaptive or workers is None else _workers(workers)
    live: Any = contextlib.nullcontext()
    if not json_out and console.is_terminal:
        _, on_terminal, live = live_display(real_console(console), slots)

    def show(event: BatchEvent) -> None:
        if json_out:
            print(event.model_dump_json(exclude_none=True), flush=True)
        elif console.is_terminal:
            on_terminal(event)
        elif event.kind == "finished" and event.record is not None:
            console.print(finished_line(event))
        elif event.kind == "planned":
            console.print(f"{event.queued} task-run(s) to run, {event.done} already recorded")

    previous = signal.signal(signal.SIGINT, on_interrupt)
    with reported(), live:
        user_config = load_config(None)  # its provider entries name the keys' variables (`api_key_env`)
        tasks.defaults.providers = {**user_config.providers, **tasks.defaults.providers}  # travels to the workers
        tasks.defaults.hooks = user_config.hooks.then(tasks.defaults.hooks)  # the user's first
        ledger = user_config.spend.ledger or environment.spend_ledger() or default_ledger()
        tasks.defaults.spend = user_config.spend.model_copy(update={"ledger": ledger})  # the user's, never the file's
        _forecast(tasks, out, models, runs)
        tasks.defaults.devcontainer_pull = [*user_config.devcontainer_pull, *tasks.defaults.devcontainer_pull]
        tasks.defaults.devcontainer_features = {
            **user_config.devcontainer_features,
            **tasks.defaults.devcontainer_features,
        }
        keys = {
            prefix_of(spec): environment.model_key(spec, user_config)[1]
            for spec in [
                *(models or tasks.defaults.model or BatchDir(out).models()),
                *(t.model for t in tasks.tasks if t.model),
            ]
        }
        batch_run_id = environment.run_id("batch")
        summary = run_batch(
            tasks,
            out.resolve(),
            models=models,
            runs=runs,
            workers=slots,
            adaptive=adaptive,
            budget=budget,
            run_id=batch_run_id,
            cluster=cluster,
            docker_host=environment.docker_host(),
            api_keys={k: v for k, v in keys.items() if v},
            on_event=show,
            stopping=lambda: interrupts[0] > 0,
            telemetry=environment.telemetry(*telemetry),
            secret_values=environment.secret_values(
                [*tasks.defaults.session.secrets, *(item for task in tasks.tasks for item in task.session.secrets)]
            ),
        )
    signal.signal(signal.SIGINT, previous)
    if cluster is None and summary.ran:  # a cluster's workers have engines of their own
        _count_left(out, batch_run_id)
    _keep_spend(tasks, out, summary.cost_usd)
    _write_reports(out)
    if json_out:
        print(json.dumps({"kind": "result", **summary.model_dump()}))
    else:
        err_console.print(
            f"{summary.ran} ran ({summary.verified} verified), {summary.skipped} already recorded, "
            f"{summary.never_started} never started, {summary.gave_up} gave up; "
            f"${summary.cost_usd:.4f}, {summary.elapsed_s:.1f}s; records in {out}"
        )


@app.command("fork")
def fork(
    session_id: str = typer.Argument(..., metavar="SESSION", help="The session to continue from one of its steps."),
    at: int = typer.Option(..., "--at", min=0, help="Its run step (as `harness show` numbers them) to continue after."),
    n: int = typer.Option(1, "-n", "--n", min=1, max=100, help="Forks per model."),
    model: list[str] = typer.Option(
        [], "--model", help="PROVIDER:MODEL the forks continue with (repeatable) [default: the parent's]."
    ),
    hint: str | None = typer.Option(None, "--hint", help="One more user message before each fork's first request."),
    max_cost: float | None = typer.Option(None, "--max-cost", min=0, help="Spend limit in USD for all the forks."),
    out: Path | None = typer.Option(
        None, "--out", help="Batch directory of the forks [default: ./forks-SESSION-at-K]; rerun to continue."
    ),
    state: Path | None = typer.Option(None, "--state-dir", help="Where the parent session lives."),
    workers: int | None = typer.Option(None, "--workers", min=1, max=256, help="Concurrent forks on a local cluster."),
    cluster: str | None = typer.Option(None, "--cluster", help="An existing Dask scheduler, tcp://HOST:8786."),
    json_out: bool = typer.Option(False, "--json", help="One JSON line per event instead of the progress lines."),
) -> None:
    """N new sessions continuing SESSION after its step K (its workspace, image and conversation
    then; the messages re-sent unchanged, so a prompt cache serves them), each with a model, run as a
    batch: `harness report DIR` compares them, the same command again continues after a crash."""
    from harness.batch.forks import fork_tasks, record_parent
    from harness.batch.runner import BatchBudget

    folder = out or Path(f"forks-{session_id}-at-{at}")
    with reported():
        for given in model:  # a fork of a mined task may take its own reference (`reference:`)
            environment.model_flag(given, batch=True)
        where, session_id = environment.session_at(state, session_id)
        tasks = fork_tasks(where / session_id, at, runs=n, models=list(model), hint=hint)
        record_parent(tasks, folder)
    execute(
        tasks,
        folder,
        models=list(model) or list(tasks.defaults.model),
        runs=None,
        workers=workers,
        budget=BatchBudget(max_cost_usd=max_cost),
        cluster=cluster,
        telemetry=(None, None, False),
        json_out=json_out,
    )


def _workers(value: str | int) -> int:
    """--workers N: a number of sessions from 1 to 256 (or `auto`, taken before this)."""
    try:
        count = int(str(value).strip())
    except ValueError:
        fail(f"--workers must be a number from 1 to 256 or auto, not {str(value)!r}", ExitCode.USAGE)
    if not 1 <= count <= 256:
        fail(f"--workers must be a number from 1 to 256 or auto, not {count}", ExitCode.USAGE)
    return count


def _forecast(tasks: TasksFile, out: Path, models: list[str], runs: int | None) -> None:
    """Before a batch: what the user's past runs say its task-runs will cost, per model, against what
    the spend ceilings leave; a model without a price is refused when a ceiling is set (never $0)."""
    from collections import Counter

    from harness.batch.records import BatchDir
    from harness.batch.runner import to_run
    from harness.providers.pricing import model_price_known
    from harness.spend import PriceUnknown, forecast, standing_now

    spend = tasks.defaults.spend
    assert spend.ledger is not None
    planned = Counter(key.model for key in to_run(tasks, BatchDir(out), models, runs))
    ceilings = spend.daily_usd is not None or spend.monthly_usd is not None
    p90 = 0.0
    for model, count in sorted(planned.items()):
        provider = tasks.defaults.providers.get(model.partition(":")[0])
        if not model_price_known(model, provider.prices if provider else {}):
            if ceilings:
                raise PriceUnknown(
                    f"{model} has no known price, so the spend ceiling in your config cannot hold this batch: give "
                    'its price (`[providers.PREFIX.prices."MODEL"]`) or run it without [spend] ceilings'
                )
            err_console.print(f"forecast: {model}: its price is unknown (spend not forecast)", markup=False)
            continue
        said = forecast(spend.ledger, model, count)
        p90 += said.cost_p90 * count
        err_console.print(f"forecast: {said.line()}", markup=False, soft_wrap=True)
    if ceilings:
        now = standing_now(spend, spend.ledger)
        left = now.left_usd or 0.0
        err_console.print(f"spend ceilings: {now.line()}; ${left:.2f} left", markup=False, soft_wrap=True)
        if p90 > left:
            err_console.print(
                f"warning: the p90 forecast (${p90:.2f}) passes what the ceilings leave: task-runs past them will "
                "not start (each reserves its cost before it starts)",
                markup=False,
                soft_wrap=True,
            )


def _keep_spend(tasks: TasksFile, out: Path, batch_usd: float) -> None:
    """The batch's spend against the user's ceilings now that it ended, kept for its report."""
    from harness.batch.records import BatchDir
    from harness.spend import standing_now

    spend = tasks.defaults.spend
    if spend.ledger is None:
        return
    now = standing_now(spend, spend.ledger)
    BatchDir(out).remember_spend(
        {"batch_usd": batch_usd, "today_usd": now.today_usd, "daily_usd": now.daily_usd,
         "month_usd": now.month_usd, "monthly_usd": now.monthly_usd}
    )  # fmt: skip


def _count_left(out: Path, run_id: str) -> None:
    """What the batch left on this machine's engine now that it ended, kept for the report."""
    from harness.assembly import engine
    from harness.batch.records import BatchDir
    from sandbox.errors import SandboxError

    try:
        left = engine.left_by_run(environment.docker_host(), run_id)
    except SandboxError:
        return
    BatchDir(out).remember_left(left.model_dump())


def _write_reports(out: Path) -> None:
    """report.json, report.md and report.html (with a page per task-run) beside the records, at the
    end of every batch."""
    from harness.batch.adaptive import read_log
    from harness.batch.plain import read_left, read_spend
    from harness.batch.records import BatchDir
    from harness.report import pages
    from harness.report.metrics import report
    from harness.report.render import as_json, as_markdown
    from sandbox.durable import write_text_atomic

    made = report(
        BatchDir(out).records(),
        source=str(out),
        concurrency=read_log(out),
        left_behind=read_left(out),
        spend=read_spend(out),
    )
    write_text_atomic(out / "report.json", as_json([made]))
    write_text_atomic(out / "report.md", as_markdown([made]))
    pages.write_batch(out)


@app.command("worker")
def worker(
    scheduler: str = typer.Argument(..., metavar="SCHEDULER", help="The Dask scheduler, tcp://HOST:8786."),
    sessions: int = typer.Option(2, "--sessions", min=1, max=256, help="Sessions this machine serves at once."),
    host: str | None = typer.Option(None, "--host", help="Address to serve on (default: the scheduler's choice)."),
    store: Path | None = typer.Option(
        None,
        "--store",
        file_okay=False,
        help="Where shipped repositories and sessions live when this machine does not see the batch "
        "directory (default: the user cache folder).",
    ),
) -> None:
    """Serve a batch cluster: check this machine (engine, images), then run as a Dask worker with
    SESSIONS session slots. Run one per machine, next to its Docker engine."""
    import shutil

    from harness.assembly import engine
    from harness.cli.app import ExitCode, fail

    with reported():
        stale = [row.name for row in engine.image_rows(environment.docker_host()) if row.status != "current"]
    if stale:
        fail(f"images not current on this machine: {', '.join(stale)}; run `harness images build`", ExitCode.SANDBOX)
    dask = shutil.which("dask") or str(Path(sys.executable).with_name("dask"))
    argv = [
        dask,
        "worker",
        scheduler,
        "--nthreads",
        "1",
        "--nworkers",
        str(sessions),
        "--resources",
        "sessions=1",
        "--no-dashboard",
        "--name",
        f"harness-{os.getpid()}",
    ]
    if host:
        argv += ["--host", host]
    from harness.batch import shipping

    try:
        shipping.use_store(store or shipping.STORE)
    except OSError as error:
        fail(f"cannot use {store or shipping.STORE} as the worker's store: {error.strerror or error}", ExitCode.USAGE)
    argv += ["--preload", "harness.batch.preload", "--harness-store", str(shipping.STORE)]
    err_console.print(f"serving {sessions} session(s) for {scheduler}", markup=False)
    from harness.batch.runner import WORKER_CONFIG

    settings = {
        f"DASK_{key.upper().replace('.', '__').replace('-', '_')}": str(value) for key, value in WORKER_CONFIG.items()
    }
    os.execve(argv[0], argv, {**os.environ, **settings})  # the Dask worker takes over this process


approvals_app = group("Answer the approval requests unattended runs and batches wait on.")
app.add_typer(approvals_app, name="approvals")
_STATE = typer.Option(None, "--state-dir", help="Where the sessions are (a batch's: DIR/sessions).")


@approvals_app.command("list")
def approvals_list(state: Path | None = _STATE, json_out: bool = typer.Option(False, "--json")) -> None:
    """Requests still waiting for an answer (a request not answered in time is denied)."""
    from harness.policy.approve import pending_approvals

    found = pending_approvals(environment.state_dir(state))
    if json_out:
        print(json.dumps([p.model_dump() for p in found]))
        return
    for item in found:
        console.print(
            f"{item.id}  {item.summary}  [dim](rule {item.rule}; waiting {item.age_s:.0f}s of "
            f"{item.timeout_s:.0f}s)[/]",
            soft_wrap=True,
        )
    if not found:
        console.print("no approval is waiting")


@approvals_app.command("allow")
def approvals_allow(approval_id: str = typer.Argument(..., metavar="ID"), state: Path | None = _STATE) -> None:
    """Let the waiting call run."""
    _answer(approval_id, "allow", state)


@approvals_app.command("deny")
def approvals_deny(approval_id: str = typer.Argument(..., metavar="ID"), state: Path | None = _STATE) -> None:
    """Refuse the waiting call."""
    _answer(approval_id, "deny", state)


def _answer(approval_id: str, action: str, state: Path | None) -> None:
    from harness.policy.approve import answer_approval

    with reported():
        answer_approval(environment.state_dir(state), approval_id, action)
    console.print(f"{approval_id}: {action}", markup=False)
