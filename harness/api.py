"""The public Python API: run, resume and replay a harness session from your own code.

```python
import harness

result = harness.run("./repo", "Fix the failing test in parser.py", model="openai:gpt-4.1",
                     verify="python3 -m pytest -q", api_key=os.environ["OPENAI_API_KEY"])
print(result.outcome, result.cost_usd, result.patch)
```

These are thin, typed doors into `harness.assembly`, the same composition root the CLI uses, so a
run started here is the run `harness run` makes: same sandbox, gate, budgets and records, and
`harness show`, `resume`, `export` work on its session. Nothing here reads environment variables:
pass the key (and anything else) explicitly. Errors are `harness.errors.HarnessError` or
`sandbox.errors.SandboxError` subclasses (or an `OSError` when the disk under `state_dir` fails
before a run starts); what the agent did is in the `RunResult`, never raised.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.agent.outcome import RunResult
    from harness.agent.reissue import ReplayReport
    from harness.batch.records import TaskRunRecord
    from harness.config import RunConfig
    from harness.landing.land import Landed
    from harness.telemetry.config import TelemetryConfig

__all__ = ["apply", "default_state_dir", "fork", "replay", "resume", "run"]


def default_state_dir() -> Path:
    """Where sessions live unless told otherwise: the per-user data directory."""
    import platformdirs

    return Path(platformdirs.user_data_dir("harness")) / "sessions"


def run(
    repo: str | Path,
    task: str,
    *,
    model: str,
    verify: str | None = None,
    image: str = "py311",
    setup: Sequence[str] = (),
    setup_network: bool = False,
    max_steps: int | None = None,
    max_cost_usd: float | None = None,
    timeout_min: float | None = None,
    api_key: str | None = None,
    base_url: str | None = None,
    state_dir: str | Path | None = None,
    session_id: str | None = None,
    config: RunConfig | None = None,
    run_id: str | None = None,
    docker_host: str | None = None,
    telemetry: TelemetryConfig | None = None,
) -> RunResult:
    """Let a model work on a copy of `repo` until `verify` passes, a limit is hit, or it gives up.

    - `model`: `openai:MODEL`, `anthropic:MODEL`, `scripted:FILE` or `replay:SESSION`.
    - `verify`: the command that decides "done" (exit 0); without one, the one the repository's layout
      names is used (pytest, npm test, go test, cargo test, make test), and with none the outcome is
      `unverified`.
    - `image`: the sandbox image of every tool call (`harness images build` makes `py311`).
    - `setup`: commands run once before the first step (with network only if `setup_network`).
    - `max_steps`, `max_cost_usd`, `timeout_min`: limits over the whole run.
    - `api_key`, `base_url`: the model endpoint (local servers through `base_url`).
    - `state_dir`: where the session folder goes (default `default_state_dir()`).
    - `config`: a full `RunConfig` to start from; the keyword arguments above override it.
    - `run_id`: the label of every container the run makes (`harness sandbox prune --run ID`).
    - `telemetry`: where the run's OpenTelemetry spans go (`TelemetryConfig(endpoint=..., file=...)`;
      the standard OTEL_* variables are read by the CLI only).

    Returns the `RunResult`: outcome, exit code, steps, tokens, cost, the patch's path.
    """
    from harness import assembly
    from harness.config import RunConfig, with_overrides
    from harness.telemetry.config import TelemetryConfig

    overrides: dict[str, Any] = {
        "model": model,
        "image": image,
        "verify": verify,
        "base_url": base_url,
        "setup": list(setup) or None,
        "setup_network": setup_network or None,
        "limits.max_steps": max_steps,
        "limits.max_cost_usd": max_cost_usd,
        "limits.timeout_min": timeout_min,
    }
    chosen = with_overrides((config or RunConfig()).model_dump(mode="json"), overrides, "harness.run")
    sessions = Path(state_dir) if state_dir is not None else default_state_dir()
    runtime = assembly.Runtime(
        run_id=run_id or f"api-{uuid.uuid4().hex[:12]}",
        docker_host=docker_host,
        api_key=api_key,
        telemetry=telemetry or TelemetryConfig(),
    )
    return assembly.start_run(Path(repo), task, chosen, sessions.resolve(), runtime, session_id)


def resume(
    session_id: str,
    *,
    state_dir: str | Path | None = None,
    api_key: str | None = None,
    max_steps: int | None = None,
    max_cost_usd: float | None = None,
    timeout_min: float | None = None,
    run_id: str | None = None,
    docker_host: str | None = None,
    telemetry: TelemetryConfig | None = None,
) -> RunResult:
    """Continue a crashed, interrupted or failed run from its last complete step (limits may be raised)."""
    from harness import assembly
    from harness.telemetry.config import TelemetryConfig

    sessions = (Path(state_dir) if state_dir is not None else default_state_dir()).resolve()
    runtime = assembly.Runtime(
        run_id=run_id or f"api-{uuid.uuid4().hex[:12]}",
        docker_host=docker_host,
        api_key=api_key,
        telemetry=telemetry or TelemetryConfig(),
    )
    overrides = {"limits.max_steps": max_steps, "limits.max_cost_usd": max_cost_usd, "limits.timeout_min": timeout_min}
    return assembly.resume_run(session_id, sessions, runtime, overrides)


def replay(
    session_id: str, *, state_dir: str | Path | None = None, run_id: str | None = None, docker_host: str | None = None
) -> ReplayReport:
    """Re-issue a session's recorded tool calls on a fresh copy of its repository; report divergences."""
    from harness import assembly

    sessions = (Path(state_dir) if state_dir is not None else default_state_dir()).resolve()
    runtime = assembly.Runtime(run_id=run_id or f"api-{uuid.uuid4().hex[:12]}", docker_host=docker_host)
    return assembly.replay_run(session_id, sessions, runtime)


def fork(
    session_id: str,
    *,
    at: int,
    n: int = 1,
    model: str | Sequence[str] | None = None,
    hint: str | None = None,
    max_cost_usd: float | None = None,
    out: str | Path | None = None,
    state_dir: str | Path | None = None,
    api_key: str | None = None,
    workers: int = 2,
    cluster: str | None = None,
    run_id: str | None = None,
    docker_host: str | None = None,
) -> list[TaskRunRecord]:
    """Continue a session after its run step `at` in `n` new sessions per model (default: its own
    model), as `harness fork` does: each starts from that step's workspace, image and conversation
    (the parent's messages re-sent unchanged, then `hint` as one more user message) and runs to its
    end; together they are a batch in `out` (default `<state_dir>/../forks-<id>-at-<at>`), under one
    budget, and calling this again continues what a crash cut short. Returns the forks' records."""
    from harness.batch.forks import fork_tasks, record_parent
    from harness.batch.records import BatchDir
    from harness.batch.runner import BatchBudget, run_batch
    from harness.providers.vendor import prefix_of

    sessions = (Path(state_dir) if state_dir is not None else default_state_dir()).resolve()
    models = [model] if isinstance(model, str) else list(model or [])
    tasks = fork_tasks(sessions / session_id, at, runs=n, models=models, hint=hint)
    folder = Path(out) if out is not None else sessions.parent / f"forks-{session_id}-at-{at}"
    record_parent(tasks, folder)
    run_batch(
        tasks,
        folder.resolve(),
        models=list(tasks.defaults.model),
        runs=None,
        workers=workers,
        budget=BatchBudget(max_cost_usd=max_cost_usd),
        run_id=run_id or f"api-{uuid.uuid4().hex[:12]}",
        cluster=cluster,
        docker_host=docker_host,
        api_keys={prefix_of(m): api_key for m in tasks.defaults.model} if api_key else {},
    )
    parent = tasks.tasks[0].fork
    return [r for r in BatchDir(folder).records() if parent is None or r.session_dir != str(parent.folder)]


def apply(
    target: str | Path,
    *,
    branch: str | None = None,
    branch_prefix: str = "harness",
    only: str = "verified",
    pick: Sequence[str] = (),
    onto: str | None = None,
    force: bool = False,
    repo: str | Path | None = None,
    state_dir: str | Path | None = None,
) -> list[Landed]:
    """Land changes as branches of their original repositories, as `harness apply` does: target is a
    session id (its change on `branch`, default `harness/<id>`) or a batch directory (each task-run
    that is `only` verified or completed, or those in `pick`, on `<branch_prefix>/<task>/<model>`).
    A change that cannot land raises `harness.errors.UsageError` for a session; for a batch it is
    left out (the CLI names each)."""
    from harness.landing.land import apply_batch, apply_session

    folder = Path(target)
    if (folder / "runs").is_dir() and (folder / "sessions").is_dir():
        landed, _ = apply_batch(folder, prefix=branch_prefix, only=only, pick=pick, onto=onto, force=force)
        return landed
    sessions = (Path(state_dir) if state_dir is not None else default_state_dir()).resolve()
    session = sessions / str(target)
    return [
        apply_session(session, branch or f"harness/{target}", onto=onto, force=force, repo=Path(repo) if repo else None)
    ]
