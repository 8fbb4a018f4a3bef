"""Attempts (`harness run --attempts K`): K runs of one task from the same start, at once, within the
run's one budget; verification chooses the one that becomes the run's result.

The run's own session (the parent) holds the start: its setup step is made once, and each attempt is
a session forked from it (`<parent>-a1` ... `-aK`, ordinary sessions: `show`, `view`, `diff` work on
each), run by harness's loop in a thread of its own with a sandbox of its own. Each attempt's
limits are its share of what is left of the run's limits when it starts (steps, tokens and cost
divided among the attempts not yet started; the wall clock is the run's, for they run at once), held
against one Budget as sub-agents' are: an attempt that finds nothing left is refused, never started.

`first` stops the others when an attempt verifies (they end `interrupted`, saying which verified);
`best` lets every attempt end and ranks them by their evidence: verified, then fewer failing tests
at the last verification, then the smaller change, then the cheaper. An LLM never decides. The
chosen attempt's change is grafted onto the parent as one step, so `harness show`, `diff`, `export`
and `apply` of the parent see it; `attempts.json` in the parent's folder says what each attempt did,
which was chosen and why. A run killed midway is continued by `harness resume PARENT`: the attempts
that ended keep their result, the others are resumed (or started) and the choice made then.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, cast

from pydantic import BaseModel, ConfigDict, Field

from harness.agent.budget import Budget, Reserve, Spent
from harness.agent.outcome import FINAL_OUTCOMES, RunResult, RunState, outcome_kind
from harness.assembly import engine
from harness.assembly.runtime import Runtime
from harness.config import LimitsConfig, RunConfig
from harness.errors import UsageError
from harness.providers.protocol import Provider
from harness.providers.scripted import ScriptedProvider
from harness.readback import ATTEMPTS_FILE
from harness.trajectory import EventRecord, OutcomeRecord, Trajectory, read_state, write_state
from harness.types import Outcome
from sandbox.durable import write_text_atomic
from sandbox.errors import SandboxError
from sandbox.layout import SessionFolder
from sandbox.session.session import Session

Select = Literal["first", "best"]


class AttemptEnd(BaseModel):
    """One attempt as the parent records it."""

    model_config = ConfigDict(extra="forbid")

    name: str
    """a1, a2 ...: its number among the run's attempts."""
    session_id: str
    outcome: str = ""
    """Its run's outcome; '' while it has not ended, `refused` when nothing was left to give it."""
    detail: str = ""
    verified: bool = False
    failing: int | None = None
    """Tests failing at its last verification (None: it never verified, or the command named none)."""
    files: list[str] = Field(default_factory=list)
    lines_changed: int = 0
    steps: int = 0
    cost_usd: float = 0.0
    tokens: dict[str, int] = Field(default_factory=dict)
    elapsed_s: float = 0.0
    chosen: bool = False

    @property
    def ended(self) -> bool:
        """It has a decided outcome, spent its share (a limit), or was refused: a resume leaves it be
        (one interrupted, or failed on the model or the machine, is continued)."""
        if self.outcome == "refused":
            return True
        return bool(self.outcome) and outcome_kind(cast("Outcome", self.outcome)) in (*FINAL_OUTCOMES, "limit")


class Attempts(BaseModel):
    """attempts.json: the run's attempts and the choice."""

    model_config = ConfigDict(extra="forbid")

    select: Select
    attempts: list[AttemptEnd]
    chosen: str | None = None
    why: str = ""


def read_attempts(session_dir: Path) -> Attempts | None:
    """The attempts of a run of attempts, or None for any other run."""
    path = Path(session_dir) / ATTEMPTS_FILE
    if not path.is_file():
        return None
    return Attempts.model_validate_json(path.read_text(encoding="utf-8"))


def _write(session_dir: Path, attempts: Attempts) -> None:
    write_text_atomic(Path(session_dir) / ATTEMPTS_FILE, attempts.model_dump_json(indent=1))


def check_attempts(config: RunConfig, *, served: bool = False) -> None:
    """UsageError for what attempts cannot be run with."""
    if config.attempts.count < 2:
        return
    if served:
        raise UsageError("a client's own calls (`harness serve`) make one run: --attempts does not apply")
    if config.agent:
        raise UsageError(
            f"--attempts runs harness's own loop: a hosted agent ({config.agent}) cannot be run as attempts yet; "
            "run it once per session, or as a batch's `runs:`"
        )


def share(left: Reserve, limits: LimitsConfig, remaining: int, seconds: float | None) -> LimitsConfig | None:
    """An attempt's limits: its share of what is left among the `remaining` attempts not yet started,
    and the run's wall clock left (`seconds`) whole, for they run at once; None when nothing is left
    to give it."""
    steps = max(1, left.steps // remaining) if left.steps >= 1 else 0  # whole steps: the first get one each
    tokens = None if left.tokens is None else max(1, left.tokens // remaining) if left.tokens >= 1 else 0
    cost = None if left.cost_usd is None else left.cost_usd / remaining
    if steps < 1 or (tokens is not None and tokens < 1) or (cost is not None and cost <= 0):
        return None
    if seconds is not None and seconds < 1:
        return None
    return limits.model_copy(
        update={
            "max_steps": steps,
            "max_tokens": tokens,
            "max_cost_usd": cost,
            "timeout_min": None if seconds is None else seconds / 60,
        }
    )


def rank(attempts: Sequence[AttemptEnd]) -> list[AttemptEnd]:
    """The attempts that ran, best first: verified, then fewer failing tests at the last
    verification (unknown last), then the smaller change, then the cheaper, then the earlier."""
    ran = [a for a in attempts if a.outcome and a.outcome != "refused"]
    return sorted(
        ran,
        key=lambda a: (
            not a.verified,
            a.failing if a.failing is not None else float("inf"),
            a.lines_changed if a.files else float("inf"),  # no change at all is no fix
            a.cost_usd,
            int(a.name[1:]),
        ),
    )


def why_chosen(chosen: AttemptEnd, ranked: Sequence[AttemptEnd], select: Select) -> str:
    """The choice in words."""
    if select == "first" and chosen.verified:
        return f"{chosen.name} verified first"
    others = [a for a in ranked if a is not chosen]
    if not chosen.verified:
        return f"no attempt verified; {chosen.name} came closest" + (
            f" ({chosen.failing} test(s) failing)" if chosen.failing is not None else ""
        )
    verified = [a for a in others if a.verified]
    if not verified:
        return f"{chosen.name} is the only attempt that verified"
    return (
        f"{chosen.name} verified with the smallest change ({chosen.lines_changed} line(s) in {len(chosen.files)} "
        f"file(s); the other verified: " + ", ".join(f"{a.name} {a.lines_changed}" for a in verified) + ")"
    )


class Resume(Protocol):
    """`harness.assembly.runs.resume_run` as an attempt's thread calls it."""

    def __call__(
        self, session_id: str, sessions: Path, runtime: Runtime, *, provider: Provider, budget: Budget, fresh: bool
    ) -> RunResult: ...


class StartRecord(Protocol):
    """`harness.assembly.runs._start_record`: a run's start in its trajectory."""

    def __call__(
        self, session: Session, config: RunConfig, state: RunState, repo: Path, *, resumed: bool, runtime: Runtime
    ) -> None: ...


@dataclass(frozen=True)
class Machinery:
    """What attempts take of the runs' machinery (`harness.assembly.runs` gives it; nothing here
    imports that module back)."""

    resume: Resume
    start_record: StartRecord
    saved_config: Callable[[Path], RunConfig]
    """The config a session recorded."""
    lock: Callable[[Path], AbstractContextManager[None]]
    """Held while a session is run (`running_lock`)."""


@dataclass
class _Run:
    """What every attempt's thread shares."""

    machinery: Machinery
    sessions: Path
    runtime: Runtime
    provider: Provider
    total: Budget
    record: Attempts
    parent_dir: Path
    lock: threading.Lock
    stop: list[str]
    """Why the attempts still running stop (empty: they go on): `first`'s winner, or Ctrl-C."""

    def halted(self) -> bool | str:
        return self.stop[0] if self.stop else False


def run_attempts(
    machinery: Machinery,
    parent: Session,
    config: RunConfig,
    state: RunState,
    runtime: Runtime,
    provider: Provider,
    *,
    resumed: bool,
) -> RunResult:
    """The attempts of the run whose session is parent (its start made), to their ends; the chosen
    one's change grafted onto parent as its next step; the run's result."""
    sessions = parent.dir.parent
    count, select = config.attempts.count, config.attempts.select
    record = read_attempts(parent.dir) if resumed else None
    if record is None:
        names = [f"a{n}" for n in range(1, count + 1)]
        record = Attempts(select=select, attempts=[AttemptEnd(name=n, session_id=f"{parent.id}-{n}") for n in names])
    with machinery.lock(parent.paths.running):
        total = Budget(config.limits, _spent(sessions, record))
        run = _Run(machinery, sessions, runtime, provider, total, record, parent.dir, threading.Lock(), [])
        _event(parent.dir, runtime, "attempts", f"{count} attempts from step {parent.step}, select {select}"
               + ("; continuing those not ended" if resumed else ""))  # fmt: skip
        threads = [
            threading.Thread(target=_attempt, args=(run, attempt, number, held), name=f"harness-{attempt.name}")
            for attempt, number, held in _started(run, parent, config, state)
        ]
        with run.lock:
            _write(parent.dir, record)
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                while thread.is_alive():
                    thread.join(0.2)
        except KeyboardInterrupt:
            with run.lock:
                run.stop[:] = ["stopped by Ctrl-C; `harness resume` of the run continues its attempts"]
            for thread in threads:
                thread.join()
        return _choose(parent, state, runtime, record)


def _started(run: _Run, parent: Session, config: RunConfig, state: RunState) -> list[tuple[AttemptEnd, int, Budget]]:
    """The attempts to run now, each with its budget held against the run's: those not ended resumed
    where they are, those never made forked with their share of what is left (refused when nothing
    is); none when `first` has its winner already."""
    record, sessions = run.record, run.sessions
    for attempt in record.attempts:  # ended in an earlier process before it wrote so
        done = _state(sessions, attempt.session_id)
        if not attempt.ended and done is not None and done.finished and done.result is not None:
            _ended(run, attempt, done.result)
    if record.select == "first" and record.chosen is not None:
        return []
    started = []
    for number, attempt in enumerate(record.attempts, start=1):
        if attempt.ended:
            continue
        if _state(sessions, attempt.session_id) is None:
            pending = sum(
                1 for a in record.attempts[number - 1 :] if not a.ended and _state(sessions, a.session_id) is None
            )
            limits = share(run.total.left(), config.limits, pending, run.total.remaining_s())
            if limits is None:
                attempt.outcome, attempt.detail = "refused", "nothing was left of the run's budget to give it"
                continue
            own_config = config.model_copy(update={"limits": limits})
            _fork(run, parent, attempt, f"{number} of {len(record.attempts)}", own_config, state)
        own = _state(sessions, attempt.session_id)
        assert own is not None
        started.append(
            (
                attempt,
                number,
                run.total.reserve(
                    run.machinery.saved_config(sessions / attempt.session_id).limits, own.spent, halted=run.halted
                ),
            )
        )
    return started


def _attempt(run: _Run, attempt: AttemptEnd, number: int, budget: Budget) -> None:
    """One attempt's thread: its run to its end (from where it is), its end recorded; under `first`
    a verified end stops the others."""
    try:
        provider = run.provider.for_attempt(number) if isinstance(run.provider, ScriptedProvider) else run.provider
        own = _state(run.sessions, attempt.session_id)
        fresh = own is not None and own.step == 0 and not own.spent.steps
        resume = run.machinery.resume
        result = resume(attempt.session_id, run.sessions, run.runtime, provider=provider, budget=budget, fresh=fresh)
        _ended(run, attempt, result)
    except Exception as error:  # noqa: BLE001 - one attempt's failure ends it, never the others
        with run.lock:
            attempt.outcome, attempt.detail = "infra_error", f"{type(error).__name__}: {error}"[:500]
            _write(run.parent_dir, run.record)
    finally:
        run.total.release(budget)


def _ended(run: _Run, attempt: AttemptEnd, result: RunResult) -> None:
    """An attempt's end in the record: its outcome, its change, what it spent."""
    state = _state(run.sessions, attempt.session_id)
    child = Session.open(run.sessions, attempt.session_id)
    try:
        diff = child.diff_trees(child.start_tree, child.last_tree)
    finally:
        child.close()
    with run.lock:
        attempt.outcome, attempt.detail, attempt.verified = result.outcome, result.detail, result.verified
        failing = state.last_failing if state is not None else None
        attempt.failing = 0 if result.verified else (len(failing) if failing is not None else None)
        attempt.files = sorted({change.path for change in diff.changes if not change.path.endswith("/")})
        attempt.lines_changed = _lines(diff.text)
        attempt.steps, attempt.cost_usd, attempt.tokens = result.steps, result.cost_usd, dict(result.tokens)
        attempt.elapsed_s = result.elapsed_s
        if result.verified and run.record.select == "first" and run.record.chosen is None:
            run.record.chosen = attempt.name
            run.stop[:] = [f"stopped: {attempt.name} verified first"]
        _write(run.parent_dir, run.record)


def _choose(parent: Session, state: RunState, runtime: Runtime, record: Attempts) -> RunResult:
    """The chosen attempt's change onto parent as one step, and the run's result; with no choice yet
    (attempts not ended), an interrupted run that `harness resume` continues."""
    ranked = rank(record.attempts)
    unfinished = [a for a in record.attempts if not a.ended]
    spent = _spent(parent.dir.parent, record)
    chosen = next((a for a in record.attempts if a.name == record.chosen), None)
    if chosen is None and not unfinished and ranked:
        chosen = ranked[0]
    if chosen is None:
        if unfinished:
            names = ", ".join(a.name for a in unfinished)
            detail = f"{len(unfinished)} attempt(s) not ended ({names}): `harness resume` of the run continues them"
            return _finish(parent, state, runtime, record, "interrupted", detail, None, spent)
        return _finish(
            parent,
            state,
            runtime,
            record,
            "stuck",
            "every attempt was refused: nothing was left of the run's budget",
            None,
            spent,
        )
    for attempt in record.attempts:
        attempt.chosen = attempt is chosen
    record.chosen, record.why = chosen.name, why_chosen(chosen, ranked, record.select)
    child = Session.open(parent.dir.parent, chosen.session_id)
    try:
        paths = [p for p in child.changed_paths(child.start_tree, child.last_tree) if not p.endswith("/")]
        if paths:
            parent.restore_tree(parent.graft(parent.last_tree, child.last_tree, paths))
        parent.commit_step(note=f"attempt {chosen.name} chosen: {record.why}")
    finally:
        child.close()
    own = _state(parent.dir.parent, chosen.session_id)
    evidence = own.result.evidence if own is not None and own.result is not None else None
    detail = record.why + (f"; {chosen.name}: {chosen.detail}" if chosen.detail else "")
    return _finish(parent, state, runtime, record, chosen.outcome, detail, evidence, spent, chosen=chosen)


def _finish(
    parent: Session,
    state: RunState,
    runtime: Runtime,
    record: Attempts,
    outcome: str,
    detail: str,
    evidence: object,
    spent: Spent,
    chosen: AttemptEnd | None = None,
) -> RunResult:
    """The run's end: its patch (the chosen change), attempts.json, the outcome record and state."""
    folder = SessionFolder(parent.dir)
    patch = None
    if chosen is not None:
        folder.patch.write_text(parent.export_patch(), encoding="utf-8")
        patch = str(folder.patch)
    _write(parent.dir, record)
    own = _state(parent.dir.parent, chosen.session_id) if chosen is not None else None
    ended = state.model_copy(
        update={
            "step": sum(a.steps for a in record.attempts),
            "snapshot_step": parent.step,
            "spent": spent,
            "verify_rounds": own.result.verify_rounds if own is not None and own.result is not None else 0,
        }
    )
    kind = cast("Outcome", outcome)
    result = RunResult.of(ended, kind, detail, evidence, spent, patch=patch, session_dir=str(parent.dir))
    _event(parent.dir, runtime, "attempts_ended", "; ".join(_line(a) for a in record.attempts))
    trajectory = Trajectory(parent.dir, runtime.secrets)
    trajectory.append(
        OutcomeRecord(outcome=kind, detail=detail, evidence=evidence, exit_code=result.exit_code), durable=True
    )
    trajectory.close()
    # a choice made ends the run, whatever the chosen attempt's outcome (a limit too: its share is spent)
    write_state(
        parent.dir, ended.model_copy(update={"finished": chosen is not None, "result": result}), runtime.secrets
    )
    if chosen is not None:  # ended: its snapshots stay, its workspace copy goes (as a run's does)
        with contextlib.suppress(OSError, SandboxError):
            parent.retire()
    return result


def _event(session_dir: Path, runtime: Runtime, event: str, detail: str) -> None:
    trajectory = Trajectory(session_dir, runtime.secrets)
    trajectory.append(EventRecord(event=event, detail=detail[:2000]), durable=True)
    trajectory.close()


def _line(attempt: AttemptEnd) -> str:
    if attempt.outcome == "refused":
        return f"{attempt.name}: refused ({attempt.detail})"
    if not attempt.outcome:
        return f"{attempt.name}: not ended"
    mark = " (chosen)" if attempt.chosen else ""
    return (
        f"{attempt.name}{mark}: {attempt.outcome}, {len(attempt.files)} file(s) {attempt.lines_changed} line(s), "
        f"{attempt.steps} step(s), ${attempt.cost_usd:.4f}"
    )


def _fork(run: _Run, parent: Session, attempt: AttemptEnd, place: str, config: RunConfig, state: RunState) -> None:
    """The attempt's session: parent's steps so far (shared, nothing copied), its config (its share of
    the limits, one attempt), a fresh run state and its start record."""
    images = engine.engine_step_images(run.runtime.docker_host)
    child = Session.fork(parent, parent.step, parent.dir.parent, attempt.session_id, images=images, run_step=0)
    try:
        own = config.model_copy(update={"attempts": config.attempts.model_copy(update={"count": 1})})
        write_text_atomic(child.paths.run_config, own.model_dump_json(indent=1))
        child_state = RunState(session_id=child.id, task=state.task, model=state.model, snapshot_step=child.step)
        write_state(child.dir, child_state, run.runtime.secrets)
        run.machinery.start_record(child, own, child_state, child.repo, resumed=False, runtime=run.runtime)
        _event(child.dir, run.runtime, "attempt", f"attempt {attempt.name} ({place}) of session {parent.id}")
    except BaseException:
        child.delete()
        raise
    child.close()


def _state(sessions: Path, session_id: str) -> RunState | None:
    if not (sessions / session_id).is_dir():
        return None
    return read_state(sessions / session_id, RunState)


def _spent(sessions: Path, record: Attempts) -> Spent:
    """What the attempts have used so far, together (the wall clock the longest's: they run at once)."""
    total = Spent()
    for attempt in record.attempts:
        own = _state(sessions, attempt.session_id)
        if own is None:
            continue
        for name in Spent.model_fields:
            mine, theirs = getattr(total, name), getattr(own.spent, name)
            setattr(total, name, max(mine, theirs) if name == "elapsed_s" else mine + theirs)
    return total


def _lines(text: str) -> int:
    """Lines added and removed in a unified diff (its headers aside)."""
    return sum(
        1
        for line in text.splitlines()
        if (line.startswith("+") and not line.startswith("+++"))
        or (line.startswith("-") and not line.startswith("---"))
    )
