"""`harness bench run`: the controller's cost on the offline example, measured side by side in one run.

Each round measures, one after the other:
1. The example run (scripted model, real sandbox) from session creation to the final result, with
   every sandbox call timed host-side. Per model step, controller overhead = the step's wall time
   minus the model's latency minus the time container commands ran (the union of the calls' exec
   intervals, so concurrent reads are not subtracted twice).
2. Bare: the same commands (same argv, image, user and mounts, plus the verify command) run one
   after another by `exec` in ONE long-lived container over a fresh copy of the repository.
The run's sandbox is closed (its warm containers removed) before the bare side starts, so neither
side runs while the other's background work is still going. `run_over_bare` is the median over the
rounds of (whole example run / bare sum); overheads are pooled over every step of every round.
3. Warm: the same example run with a warm service of the bench's own (`harness warm start`, in a
   folder beside the bench's sessions) lending the new session its first containers, started before
   the session existed. Each round waits until the service has a run slot ready and starts nothing,
   before the warm run and again before the cold one, so no side shares the engine with its refill.
   `warm_run_over_bare` is the median of (warm run / the round's bare sum).
One cold example run before the rounds warms the interpreter (imports, image lookups) and is not counted.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from pydantic import BaseModel

from harness import assembly
from harness.agent.outcome import RunState
from harness.assembly import Runtime
from harness.bench.measure import CLI
from harness.config import RunConfig
from harness.trajectory import read_records
from sandbox import labels
from sandbox.docker import transfer
from sandbox.docker.engine import located, resolve_image
from sandbox.envelope import Envelope
from sandbox.owner import container_user
from sandbox.session.workspace import copy_repository
from sandbox.spec import Mount, SandboxSpec

if TYPE_CHECKING:
    import docker

    from harness.agent.outcome import RunResult
    from sandbox.docker.containers import DockerSandbox
    from sandbox.session.session import Session

_PACKAGED = Path(__file__).resolve().parent / "assets" / "examples"
EXAMPLE = _PACKAGED if _PACKAGED.is_dir() else Path(__file__).resolve().parents[2] / "examples"
"""The offline example: copied beside this module in an installed wheel, else the checkout's."""
TASK = "Fix the failing tests in calc."
VERIFY = "python3 -m pytest -q"


class RunBench(BaseModel):
    outcome: str
    steps: int
    rounds: int
    overhead_ms_per_step: float
    """Median controller overhead of a model step (all steps of all rounds)."""
    overhead_ms_p90: float
    run_ms: float
    """Median whole example run."""
    bare_ms: float
    """Median bare sum."""
    run_over_bare: float
    """Median over the rounds of run / bare, each pair measured back to back."""
    ratios: list[float]
    sandbox_calls: int
    start_ms: float = 0.0
    """Median time to start one container for the run's calls (create and start, the stub ready),
    measured in each round after the bare side: what the run must wait for before its first call and
    the bare side never pays."""
    floor_over_bare: float = 0.0
    """Median over the rounds of (bare + start) / bare: the least run_over_bare a run that starts one
    container can reach on this engine."""
    warm_run_ms: float | None = None
    """Median whole example run with a warm service lending the session its first containers."""
    warm_run_over_bare: float | None = None
    """Median over the rounds of warm run / bare (None when the warm service could not start)."""
    warm_ratios: list[float] = []
    warm_borrowed: int = 0
    """Containers the warm runs borrowed (the least over the rounds; 0: the warm side never borrowed)."""
    warm_outcome: str = ""
    """The last warm run's outcome (it fixes the example as the cold run does: `verified`)."""


class Round(BaseModel):
    outcome: str
    steps: int
    overheads: list[float]
    run_ms: float
    bare_ms: float
    sandbox_calls: int
    start_ms: float = 0.0
    warm_run_ms: float = 0.0
    warm_borrowed: int = 0
    warm_outcome: str = ""


class TimedSandbox:
    """Wraps a sandbox; remembers each call's argv, spec, mounts and exec interval (wall clock)."""

    def __init__(self, inner: DockerSandbox) -> None:
        self.inner = inner
        self.calls: list[tuple[list[str], SandboxSpec, Sequence[Mount], float, float]] = []

    def run(
        self,
        argv: Sequence[str],
        *,
        workspace: Path,
        spec: SandboxSpec,
        mounts: Sequence[Mount] = (),
        stdin: bytes | None = None,
        commit_changes: bool = False,
        refill: bool = True,
    ) -> Envelope:
        envelope = self.inner.run(
            argv,
            workspace=workspace,
            spec=spec,
            mounts=mounts,
            stdin=stdin,
            commit_changes=commit_changes,
            refill=refill,
        )
        end = time.time()
        self.calls.append((list(argv), spec, list(mounts), end - envelope.duration_ms / 1000, end))
        return envelope

    def prewarm(self, *, workspace: Path, spec: SandboxSpec, mounts: Sequence[Mount] = ()) -> None:
        self.inner.prewarm(workspace=workspace, spec=spec, mounts=mounts)

    def adopt(
        self,
        containers: Sequence[tuple[str, int]],
        *,
        workspace: Path,
        spec: SandboxSpec,
        mounts: Sequence[Mount] = (),
        keep_open: object = None,
    ) -> bool:
        return self.inner.adopt(containers, workspace=workspace, spec=spec, mounts=mounts, keep_open=keep_open)

    def quiesce(self) -> None:
        self.inner.quiesce()

    def close(self) -> None:
        self.inner.close()


def measure(runtime: Runtime, rounds: int = 3) -> RunBench:
    """The example run and its bare commands, `rounds` times back to back; each round also runs the
    example with a warm service of the bench's own lending its first containers (see warm_side)."""
    with tempfile.TemporaryDirectory(prefix="harness-bench-warm-") as tmp, warm_side(runtime, Path(tmp)) as warm:
        _example(runtime, Path(tmp) / "warm-up", None)
        results = [_round(runtime, warm) for _ in range(rounds)]
    return summary(results)


def summary(results: Sequence[Round]) -> RunBench:
    """The rounds' figures: medians over the rounds, each ratio taken within its round first."""
    rounds = len(results)
    overheads = sorted(o for r in results for o in r.overheads)
    ratios = [round(r.run_ms / r.bare_ms, 2) for r in results]
    warm_ratios = [round(r.warm_run_ms / r.bare_ms, 2) for r in results if r.warm_run_ms]
    last = results[-1]
    return RunBench(
        outcome=last.outcome,
        steps=last.steps,
        rounds=rounds,
        overhead_ms_per_step=round(statistics.median(overheads), 1),
        overhead_ms_p90=round(overheads[int(0.9 * (len(overheads) - 1))], 1),
        run_ms=round(statistics.median(r.run_ms for r in results), 1),
        bare_ms=round(statistics.median(r.bare_ms for r in results), 1),
        run_over_bare=round(statistics.median(ratios), 2),
        ratios=ratios,
        sandbox_calls=last.sandbox_calls,
        start_ms=round(statistics.median(r.start_ms for r in results), 1),
        floor_over_bare=round(statistics.median((r.bare_ms + r.start_ms) / r.bare_ms for r in results), 2),
        warm_run_ms=round(statistics.median(r.warm_run_ms for r in results), 1) if warm_ratios else None,
        warm_run_over_bare=round(statistics.median(warm_ratios), 2) if warm_ratios else None,
        warm_ratios=warm_ratios,
        warm_borrowed=min((r.warm_borrowed for r in results), default=0),
        warm_outcome=last.warm_outcome,
    )


@contextlib.contextmanager
def warm_side(runtime: Runtime, folder: Path) -> Iterator[Path | None]:
    """A warm service in folder (beside the bench's sessions, so its slots can become workspaces),
    started and stopped by the CLI as a user would; None if it cannot start here."""
    from sandbox.warm.protocol import engine_folder

    env = {**os.environ, "HARNESS_WARM_DIR": str(folder), "HARNESS_RUN_ID": runtime.run_id}
    started = subprocess.run([*CLI, "warm", "start", "--per-spec", "1"], env=env, capture_output=True, check=False)
    try:
        yield engine_folder(folder, runtime.docker_host) if started.returncode == 0 else None
    finally:
        subprocess.run([*CLI, "warm", "stop"], env=env, capture_output=True, check=False)


def _settled(warm: Path, timeout_s: float = 60.0) -> None:
    """Wait until the warm service has its run slot ready and starts nothing (so no side of a round
    shares the engine with its refill)."""
    from sandbox.warm import protocol

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        runs = protocol.status(warm).runs
        if runs.get("ready") and not runs.get("starting") and not runs.get("out"):
            return
        time.sleep(0.1)


def _round(runtime: Runtime, warm: Path | None) -> Round:
    """One example run (cold), one with the warm service, and their bare counterpart (the bare side
    replays the commands the cold run made)."""
    with tempfile.TemporaryDirectory(prefix="harness-bench-") as tmp:
        warm_run = None
        if warm is not None:
            _settled(warm)
            warm_run = _example(runtime, Path(tmp) / "warm-sessions", warm)
            _settled(warm)
        cold = _example(runtime, Path(tmp) / "sessions", None)
        calls, client, session = cold.sandbox.calls, cold.sandbox.inner.client, cold.session
        bare_ms = _bare(client, calls, session.workspace, Path(tmp) / "bare", session.spec, runtime.run_id)
        return Round(
            start_ms=_one_start(client, calls[0], session.workspace, runtime.run_id),
            outcome=cold.result.outcome,
            steps=cold.result.steps,
            overheads=_overheads(session.dir, calls),
            run_ms=cold.ms,
            bare_ms=bare_ms,
            sandbox_calls=len(calls),
            warm_run_ms=warm_run.ms if warm_run else 0.0,
            warm_borrowed=warm_run.borrowed if warm_run else 0,
            warm_outcome=warm_run.result.outcome if warm_run else "",
        )


class ExampleRun(NamedTuple):
    result: RunResult
    ms: float
    """From session creation to the run's result."""
    sandbox: TimedSandbox
    session: Session
    borrowed: int
    """Containers borrowed from the warm service."""


def _example(runtime: Runtime, sessions: Path, warm: Path | None) -> ExampleRun:
    """The example run, from session creation to its result."""
    config = RunConfig(model=f"scripted:{EXAMPLE / 'calc-fix.yaml'}", verify=VERIFY)
    sandbox = TimedSandbox(assembly.open_sandbox(runtime, None))
    sessions.mkdir(parents=True)
    try:
        started = time.perf_counter()
        session = assembly.create_session(EXAMPLE / "calc", sessions, config, sandbox, None, warm)
        state = RunState(session_id=session.id, task=TASK, model=config.model or "", snapshot_step=session.step)
        agent = assembly.build_agent(
            config=config,
            session=session,
            sandbox=sandbox,
            provider=assembly.own_provider(config, runtime),
            state=state,
            runtime=runtime,
        )
        result = agent.run()
        run_ms = (time.perf_counter() - started) * 1000
    finally:
        sandbox.close()
    return ExampleRun(result, run_ms, sandbox, session, sandbox.inner.adopted)


def _one_start(
    client: docker.DockerClient,
    call: tuple[list[str], SandboxSpec, Sequence[Mount], float, float],
    workspace: Path,
    run_id: str,
) -> float:
    """Milliseconds to start one container as the run's first call needs it (its own network namespace:
    a session's first container cannot join a holder sooner than it could start one)."""
    from sandbox.docker.containers import DockerSandbox

    _, spec, mounts, *_ = call
    with DockerSandbox(client, run_id=run_id, pool_size=0, share_netns=False) as box:
        box.discard(box.start_one(workspace=workspace, spec=spec, mounts=mounts))  # image lookups, off the clock
        started = time.perf_counter()
        cid = box.start_one(workspace=workspace, spec=spec, mounts=mounts)
        elapsed = (time.perf_counter() - started) * 1000
        box.discard(cid)
    return elapsed


def _overheads(
    session_dir: Path, calls: list[tuple[list[str], SandboxSpec, Sequence[Mount], float, float]]
) -> list[float]:
    begins: dict[int, float] = {}
    latency: dict[int, float] = {}
    result = []
    for record in read_records(session_dir):
        if record.kind == "request":
            begins[record.step] = record.ts
        elif record.kind == "turn":
            latency[record.step] = record.turn.latency_ms / 1000
        elif record.kind == "step" and record.step in begins:
            begin, end = begins[record.step], record.ts
            busy = _union([(max(s, begin), min(e, end)) for *_, s, e in calls if e > begin and s < end])
            result.append((end - begin - latency.get(record.step, 0.0) - busy) * 1000)
    return result


def _union(intervals: list[tuple[float, float]]) -> float:
    total, current_end = 0.0, float("-inf")
    for start, end in sorted(intervals):
        start = max(start, current_end)
        if end > start:
            total += end - start
            current_end = end
    return total


def _bare(
    client: docker.DockerClient,
    calls: list[tuple[list[str], SandboxSpec, Sequence[Mount], float, float]],
    workspace: Path,
    copy_to: Path,
    spec: SandboxSpec,
    run_id: str,
) -> float:
    """Sum of the same commands exec'd one by one into one long-lived container over a fresh copy
    (bound from here; on an engine that takes archives, sent into its volumes once, before its start,
    as a hand-made harness would: nothing comes back)."""
    copy_repository(EXAMPLE / "calc", copy_to)
    mounts = []
    for mount in calls[0][2]:
        source = Path(mount.source)
        if source.is_relative_to(workspace):
            source = copy_to / source.relative_to(workspace)
        mounts.append(mount.model_copy(update={"source": source}))
    _, image_id = resolve_image(client, spec.image)
    user, marks = container_user(), labels.of_process(run_id, "bench")
    if located(client)[1] is None:
        volumes = {str(copy_to): {"bind": spec.workdir, "mode": "rw"}}
        volumes |= {str(m.source): {"bind": m.target, "mode": "ro" if m.read_only else "rw"} for m in mounts}
        container = client.containers.run(
            image_id,
            ["sleep", "infinity"],
            detach=True,
            user=user,
            working_dir=spec.workdir,
            network_mode="none",
            volumes=volumes,
            labels=marks,
        )
    else:
        layout = transfer.volumes(spec.workdir, copy_to, mounts)
        container = client.containers.create(
            transfer.derived_image(client.api, image_id, spec.workdir, user, marks),
            ["sleep", "infinity"],
            user=user,
            working_dir=spec.workdir,
            network_mode="none",
            mounts=cast(Any, transfer.volume_mounts(layout, marks)),  # the engine's own form, as dicts
            labels=marks,
        )
        try:
            transfer.send(client.api, str(container.id), layout, transfer.numeric_ids(user))
            container.start()
        except BaseException:
            container.remove(force=True, v=True)
            raise
    try:
        total = 0.0
        for argv, *_ in calls:
            started = time.perf_counter()
            container.exec_run(argv, user=container_user(), workdir=spec.workdir)
            total += time.perf_counter() - started
        return total * 1000
    finally:
        container.remove(force=True, v=True)
