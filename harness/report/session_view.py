"""A session read back for a person: its trajectory grouped by step, each step's diff from the
snapshot store, the verify rounds, the outcome and the final patch. Read-only: nothing here writes
to the session, so it works on a session that is still running (what is not committed yet is not
shown yet)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import readback
from harness.agent.outcome import RunState
from harness.errors import SessionError
from harness.steps import StepMap
from harness.trajectory import (
    EVERY_AGENT,
    DelegateRecord,
    EventRecord,
    HookRecord,
    OutcomeRecord,
    RequestRecord,
    StartRecord,
    StepRecord,
    SummaryRecord,
    ToolRecord,
    TurnRecord,
    VerifyRecord,
    read_records,
    read_state,
)
from harness.types import ModelTurn
from sandbox.errors import SandboxError
from sandbox.layout import SessionFolder

MAX_DIFF_CHARS = 200_000
"""A step's diff beyond this is cut, with a note saying how much was left out."""


@dataclass
class StepView:
    step: int
    turn: ModelTurn | None = None
    calls: list[ToolRecord] = field(default_factory=list)
    events: list[EventRecord] = field(default_factory=list)
    verify: list[VerifyRecord] = field(default_factory=list)
    summaries: list[SummaryRecord] = field(default_factory=list)
    """Third-tier summaries made before this step's model call."""
    hooks: list[HookRecord] = field(default_factory=list)
    """The lifecycle hooks that ran in this step (docs/hooks.md), in order."""
    committed: StepRecord | None = None
    """None while the step is in flight (a live session) or when a crash cut it."""
    sent_tokens: int = 0
    """The prompt of this step's model call: reported input tokens, else the estimate."""
    diff: str = ""
    diff_note: str = ""
    subagents: list[SubagentView] = field(default_factory=list)
    """The sub-agents this step's delegate calls started, each with its own steps."""

    @property
    def failed(self) -> bool:
        return any(call.is_error for call in self.calls)


@dataclass
class SubagentView:
    """A sub-agent under the step that started it: its task and reserve, its steps, how it ended."""

    start: DelegateRecord
    end: DelegateRecord | None = None
    """None while it runs (or when a crash cut it and no resume has run it to its end yet)."""
    steps: list[StepView] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.start.child


@dataclass
class SessionView:
    session_id: str
    folder: Path
    start: StartRecord | None = None
    steps: list[StepView] = field(default_factory=list)
    events: list[EventRecord] = field(default_factory=list)
    """Events before the first step (setup, resume)."""
    outcome: OutcomeRecord | None = None
    patch: str = ""
    problems: list[str] = field(default_factory=list)
    """What could not be read (a damaged store, a missing session.json): shown, never raised."""
    family: list[Any] = field(default_factory=list)
    """The tree of forks this session belongs to (`harness.assembly.sessions.Relative`, root first);
    empty when it is alone."""
    network: list[dict[str, Any]] = field(default_factory=list)
    """Requests through the session's egress proxy (`--allow-net`), each with the `step` whose call
    made it ("setup" before the first call)."""
    totals: list[tuple[str, str]] = field(default_factory=list)
    """An imported trajectory's final metrics, as (name, value) facts."""
    no_run: bool = False
    """The session never ran a model: its steps are commands (`harness exec --session`, `harness tool`)."""
    attempts: dict[str, Any] | None = None
    """A run of attempts (`--attempts K`): attempts.json as recorded (each attempt, the chosen, why)."""

    @property
    def live(self) -> bool:
        return self.outcome is None and not self.no_run

    @property
    def cost_usd(self) -> float:
        committed = [s.committed for s in self.steps if s.committed is not None]
        return committed[-1].cost_usd if committed else 0.0


def load(folder: Path) -> SessionView:
    """The session in folder, as far as it is written."""
    folder = Path(folder)
    view = SessionView(session_id=folder.name, folder=folder)
    by_step: dict[int, StepView] = {}
    last: StepView | None = None
    every = read_records(folder, EVERY_AGENT)
    for record in every:
        if record.agent is not None:
            continue
        if isinstance(record, StartRecord):
            view.start = view.start or record
        elif isinstance(record, OutcomeRecord):
            view.outcome = record
        elif isinstance(record, RequestRecord | TurnRecord | ToolRecord | StepRecord):
            last = by_step.setdefault(record.step, StepView(step=record.step))
            _add(last, record)
        elif isinstance(record, SummaryRecord):
            by_step.setdefault(record.step, StepView(step=record.step)).summaries.append(record)
        elif isinstance(record, HookRecord):
            by_step.setdefault(record.step, StepView(step=record.step)).hooks.append(record)
        elif isinstance(record, VerifyRecord):
            if last is None:
                last = by_step.setdefault(0, StepView(step=0))
            last.verify.append(record)
        elif isinstance(record, EventRecord):
            (last.events if last is not None else view.events).append(record)
    _attach(by_step, every, None)
    view.steps = [by_step[step] for step in sorted(by_step)]
    view.network = _network(folder, [call for step in view.steps for call in step.calls])
    if view.start is None:  # a run started through the API without a start record: the state says
        view.start = _start_of(folder)
    if view.start is None and not view.steps:
        _commands(view)
    _add_diffs(view)
    view.family = _family(folder)
    try:
        view.attempts = readback.attempts(folder)
    except SessionError as error:
        view.problems.append(str(error))
    return view


def _family(folder: Path) -> list[Any]:
    from harness.assembly.sessions import family

    try:
        relatives = family(folder)
    except (OSError, ValueError):
        return []
    return relatives if len(relatives) > 1 else []


def _network(folder: Path, calls: list[ToolRecord]) -> list[dict[str, Any]]:
    """The egress requests, each placed at the step of the first call that ended after it."""
    from sandbox.network.netlog import read_log

    ends = sorted((call.ts, call.step, call.ts - call.duration_ms / 1000) for call in calls)
    placed = []
    for request in sorted(read_log(SessionFolder(folder).network), key=lambda r: r.get("ts", 0)):
        at = float(request.get("ts", 0))
        after = [(end, step, begin) for end, step, begin in ends if end >= at]
        if not ends or (after and after[0] == ends[0] and at < ends[0][2]):
            where: int | str = "setup"
        else:
            where = after[0][1] if after else ends[-1][1]
        placed.append({**request, "step": where})
    return placed


def _commands(view: SessionView) -> None:
    """A session without a model run: each step a command it ran (its snapshot note), its diff, and
    the egress requests under the step whose command made them."""
    from sandbox.durable import read_json, read_lines

    paths = SessionFolder(view.folder)
    try:
        snapshots = [line for line in read_lines(paths.steps) if isinstance(line, dict)]
        repo = str(read_json(paths.info).get("repo", ""))
    except (OSError, ValueError):
        return
    view.no_run = True
    first = float(snapshots[0].get("time", 0)) if snapshots else 0.0
    view.start = StartRecord(
        ts=first, session_id=view.session_id, task="(no model run: the commands of harness exec --session or harness tool)",
        model="-", repo=repo,
    )  # fmt: skip
    for line in snapshots[1:]:
        number, ts = int(line.get("step", 0)), float(line.get("time", 0))
        step = StepView(step=number)
        step.events.append(EventRecord(ts=ts, event=str(line.get("kind", "step")), detail=str(line.get("note", ""))))
        step.committed = StepRecord(ts=ts, step=number, snapshot_step=number, wrote=True)
        view.steps.append(step)
    times = [(step.committed.ts, step.step) for step in view.steps if step.committed is not None]
    for request in view.network:
        at = float(request.get("ts", 0))
        request["step"] = next((number for ts, number in times if ts >= at), times[-1][1] if times else "setup")


def _start_of(folder: Path) -> StartRecord | None:
    try:
        state = read_state(folder, RunState)
    except SessionError:
        return None
    if state is None:
        return None
    stamp = SessionFolder(folder).state.stat().st_mtime
    return StartRecord(ts=stamp, session_id=state.session_id, task=state.task, model=state.model, repo="")


def _attach(by_step: dict[int, StepView], every: list[Any], agent: str | None) -> None:
    """Put each sub-agent the agent started under the step that started it, with its own steps (and
    theirs)."""
    ends = {r.child: r for r in every if isinstance(r, DelegateRecord) and r.phase == "end" and r.agent == agent}
    for start in (r for r in every if isinstance(r, DelegateRecord) and r.phase == "start" and r.agent == agent):
        steps: dict[int, StepView] = {}
        last: StepView | None = None
        for record in every:
            if record.agent != start.child:
                continue
            if isinstance(record, RequestRecord | TurnRecord | ToolRecord | StepRecord):
                last = steps.setdefault(record.step, StepView(step=record.step))
                _add(last, record)
            elif isinstance(record, HookRecord):
                steps.setdefault(record.step, StepView(step=record.step)).hooks.append(record)
            elif isinstance(record, EventRecord) and last is not None:
                last.events.append(record)
        _attach(steps, every, start.child)
        child = SubagentView(start, ends.get(start.child), [steps[n] for n in sorted(steps)])
        by_step.setdefault(start.step, StepView(step=start.step)).subagents.append(child)


def subagent_steps(view: SessionView) -> int:
    """The steps the run's sub-agents took (theirs included)."""
    return sum(s.end.steps for step in view.steps for s in step.subagents if s.end is not None)


def _add(step: StepView, record: RequestRecord | TurnRecord | ToolRecord | StepRecord) -> None:
    if isinstance(record, RequestRecord):
        step.sent_tokens = record.estimated_tokens
    elif isinstance(record, TurnRecord):
        step.turn = record.turn  # a resumed step's last turn wins
        if record.turn.usage.input_tokens:
            step.sent_tokens = record.turn.usage.input_tokens
    elif isinstance(record, ToolRecord):
        step.calls.append(record)
    else:
        step.committed = record


def _add_diffs(view: SessionView) -> None:
    """Each committed step's change, and the final patch, from the snapshot store (read-only)."""
    from harness.assembly.sessions import open_session

    paths = SessionFolder(view.folder)
    try:
        session = open_session(view.folder.parent, view.folder.name)
    except SandboxError as error:
        view.problems.append(f"no step diffs: {error}")
        return
    try:
        steps = StepMap.of(view.folder, view.session_id, session.step)
        previous = 0
        for step in view.steps:
            if step.committed is None or (steps.has_run and step.step not in steps.snapshots):
                continue
            before, after = steps.snapshot(previous), steps.snapshot(step.step)
            previous = step.step
            if before == after:
                continue
            result = session.diff(before, after)
            text = result.text
            notes = [f"binary: {path}" for path in result.binary]
            notes += [f"mode: {c.path} {c.old_mode:o} -> {c.new_mode:o}" for c in result.mode_changes]
            if len(text) > MAX_DIFF_CHARS:
                notes.append(f"diff cut at {MAX_DIFF_CHARS} of {len(text)} characters (see `harness diff`)")
                text = text[:MAX_DIFF_CHARS]
            step.diff, step.diff_note = text, "; ".join(notes)
        if paths.patch.is_file():
            view.patch = paths.patch.read_text(encoding="utf-8", errors="replace")
        else:
            view.patch = session.export_patch()
    except (SandboxError, OSError, ValueError) as error:
        view.problems.append(f"step diffs incomplete: {type(error).__name__}: {error}".splitlines()[0])
    finally:
        session.close()
