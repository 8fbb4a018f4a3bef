"""The session's write-ahead log and state file.

`trajectory.jsonl` is append-only: every request sent, every model turn (written and fsynced
BEFORE its tools run), every tool call with its arguments, gate decision, envelope, duration and
failure kind, every committed step with its snapshot, every verification, and the outcome.
`state.json` is rewritten atomically (temp + fsync + rename) at each step boundary; it is the
commit point a resume starts from. The reader drops a torn last line (a crash mid-write), and
reopening for append first cuts that torn tail so the next record starts on a clean line.
Known secret values are replaced by `***` before anything reaches the disk.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from harness import readback
from harness.causes import Cause
from harness.errors import SessionError
from harness.policy.decision import Decision
from harness.types import Message, ModelTurn, ToolCall, ToolSchema
from sandbox.durable import read_lines, write_text_atomic
from sandbox.envelope import Envelope
from sandbox.errors import at_path
from sandbox.layout import SessionFolder

if TYPE_CHECKING:
    from harness.tools.registry import ToolResult

TRAJECTORY_FILE = SessionFolder(Path()).trajectory.name
STATE_FILE = SessionFolder(Path()).state.name


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ts: float = Field(default_factory=time.time)
    agent: str | None = Field(None, exclude_if=lambda value: value is None)
    """The sub-agent whose record it is (`d1`, its own child `d1.d1`: see harness.agent.delegate);
    None (and left out of the line) for the run's own agent."""


class StartRecord(_Record):
    kind: Literal["start"] = "start"
    session_id: str
    task: str
    model: str
    repo: str
    resumed: bool = False
    config: dict[str, Any] = Field(default_factory=dict)


class RequestRecord(_Record):
    """A request as sent: messages[base:] are new since the previous request (base = unchanged prefix)."""

    kind: Literal["request"] = "request"
    step: int
    base: int
    messages: list[Message]
    tools: list[str]
    estimated_tokens: int


class TurnRecord(_Record):
    kind: Literal["turn"] = "turn"
    step: int
    turn: ModelTurn


class ToolRecord(_Record):
    kind: Literal["tool"] = "tool"
    step: int
    attempt: int = 0
    """0 for the first execution; 1 when a resume re-executed the turn's tools."""
    call_id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    decision: Decision | None = None
    """The gate's decision and rule; None when the call never reached the gate."""
    envelope: Envelope | None = None
    text: str
    is_error: bool = False
    error_kind: str | None = None
    duration_ms: int = 0
    wrote: bool = False

    @classmethod
    def of(cls, step: int, attempt: int, call: ToolCall, result: ToolResult) -> ToolRecord:
        """The record of one executed call."""
        return cls(
            step=step,
            attempt=attempt,
            call_id=call.id,
            name=call.name,
            arguments=call.arguments,
            decision=result.decision,
            envelope=result.envelope,
            text=result.text,
            is_error=result.is_error,
            error_kind=result.error_kind,
            duration_ms=result.duration_ms,
            wrote=result.wrote,
        )


class StepRecord(_Record):
    """A step is complete: its tools ran and (if anything was written) a snapshot was committed."""

    kind: Literal["step"] = "step"
    step: int
    snapshot_step: int
    snapshot_id: str | None = None
    wrote: bool = False
    """A call of the step may have written (run_command always may)."""
    changed: bool | None = Field(None, exclude_if=lambda value: value is None)
    """The step's calls changed the workspace or the image: a snapshot of its own was taken (None: a
    record from before this was kept, when only `wrote` was)."""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0


class VerifyRecord(_Record):
    kind: Literal["verify"] = "verify"
    round: int
    layer: str = "verify"
    """`verify`, or `check N of M` for the layers after it."""
    command: str = ""
    passed: bool
    exit_code: int
    status: str
    failing: list[str] = Field(default_factory=list)
    duration_ms: int = 0
    output: str = ""
    cause: str = Field("", exclude_if=lambda value: not value)
    """A failure's cause the output names beyond its failing tests (a dependency it could not import)."""


class SummaryRecord(_Record):
    """The third context tier: the older middle of the conversation replaced by the model's summary
    (the full history stays in this file)."""

    kind: Literal["summary"] = "summary"
    step: int
    """The step whose request needed it."""
    through_turn: int
    """Model turns 1..through_turn are summarised (by this summary and the ones before it)."""
    text: str
    excluded: list[str] = Field(default_factory=list)
    """Directions excluded so far (accumulated across summaries)."""
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    before_tokens: int = 0
    after_tokens: int = 0


class EventRecord(_Record):
    """Anything else worth a line: resumed, interrupted, setup ran, context folded."""

    kind: Literal["event"] = "event"
    event: str
    detail: str = ""


class HookRecord(_Record):
    """One lifecycle hook's run and what it decided (written before what it gates happens; `harness
    replay` follows it without running the hook again)."""

    kind: Literal["hook"] = "hook"
    event: str
    command: str
    """The hook's command line, as configured."""
    place: Literal["host", "container"] = "host"
    """Where it ran: the user's hooks on this machine, a repository's in a sandbox container."""
    step: int = 0
    call_id: str | None = None
    tool_name: str | None = None
    verdict: Literal["allow", "block", "ok", "failed"]
    """allow: a gating hook let it through; block: it refused (or failed: gating hooks fail closed);
    ok: an observer ran; failed: an observer failed (it fails open)."""
    reason: str = ""
    exit_code: int | None = None
    """None when the hook never exited (a timeout, a command that could not start)."""
    duration_ms: int = 0
    updated_input: dict[str, Any] | None = None
    """PreToolUse: the arguments the hook gave instead (they went through the gate)."""
    context: str = ""
    """`additionalContext` the hook gave the model."""
    bounds: str = ""
    """What its bounds did, when they did anything: output past the cap not kept, processes it left
    running ended (harness.bounded)."""

    @property
    def whose(self) -> str:
        """Whose hook it was, as the views say it."""
        return readback.whose(self.place)


class DelegateRecord(_Record):
    """A sub-agent started (`phase="start"`, before it runs) or ended (`"end"`, with what became of its
    change); its own records follow the start, each with `agent` set to its name."""

    kind: Literal["delegate"] = "delegate"
    phase: Literal["start", "end"]
    step: int
    """The delegating agent's step whose call started it."""
    call_id: str
    child: str
    """The sub-agent's name (`agent` of its records)."""
    session: str
    """The session that holds its branch of the snapshots."""
    task: str = ""
    base: str = ""
    """The workspace tree it started from (the delegating agent's workspace at the call)."""
    reserve: dict[str, float | int | None] = Field(default_factory=dict)
    """Its limits, taken out of what the delegating agent had left: max_steps, max_tokens,
    max_cost_usd, timeout_min."""
    outcome: str = ""
    detail: str = ""
    change: Literal["", "applied", "conflict", "discarded", "none"] = ""
    """What became of its change: applied to the delegating agent's workspace, refused for a conflict
    with what that agent changed since, discarded as asked, or there was none."""
    paths: list[str] = Field(default_factory=list)
    """The paths it changed (applied: taken over)."""
    conflicts: list[str] = Field(default_factory=list)
    final: str = ""
    """Its final message."""
    steps: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0

    @property
    def reserve_text(self) -> str:
        """Its reserve as the views say it (`max_steps 6, max_tokens 550`)."""
        return readback.reserve_text(self.reserve)

    @property
    def change_text(self) -> str:
        """What became of its change, as the views say it."""
        return readback.change_text(self.change, self.paths, self.conflicts)


class OutcomeRecord(_Record):
    kind: Literal["outcome"] = "outcome"
    outcome: str
    detail: str = ""
    evidence: Any = None
    exit_code: int = 0
    cause: Cause | None = None
    """Why the machine, not the agent, ended the run (see `harness.causes.Cause`)."""


Record = Annotated[
    StartRecord
    | RequestRecord
    | TurnRecord
    | ToolRecord
    | StepRecord
    | VerifyRecord
    | SummaryRecord
    | EventRecord
    | HookRecord
    | DelegateRecord
    | OutcomeRecord,
    Field(discriminator="kind"),
]
_RECORD = TypeAdapter(Record)


def parse_record(raw: Any) -> Any:
    """One trajectory line's record (its JSON decoded); ValueError when it is not one of ours."""
    return _RECORD.validate_python(raw)


M = TypeVar("M", bound=BaseModel)


class TrajectoryObserver(Protocol):
    """Told every record once it is on disk (telemetry builds its spans so), and told the end."""

    def observe(self, record: Any) -> None: ...

    def close(self) -> None: ...


class Trajectory:
    """Appends records to one session's JSONL file (a sub-agent's through a view of its parent's:
    `child`)."""

    agent: str | None = None
    """Whose records this writer appends (None: the run's own agent)."""

    def __init__(
        self, session_dir: Path, secrets: Sequence[str] = (), observers: Sequence[TrajectoryObserver] = ()
    ) -> None:
        self.path = SessionFolder(Path(session_dir)).trajectory
        self._secrets = [s for s in secrets if s and len(s) >= 4]
        self._observers = list(observers)
        torn = _cut_torn_tail(self.path)
        self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115 - held open until close()
        self._lock = threading.Lock()  # children at once append from their threads
        self._owner = True
        """This writer opened the file (a sub-agent's view writes into its parent's)."""
        self._sent: list[Message] = []
        if torn:  # a crash cut the last record short: it is dropped, and the drop is on record
            self.append(EventRecord(event="torn_tail", detail=f"dropped an unfinished last record ({torn} bytes)"))

    def append_request(
        self, step: int, messages: list[Message], tools: Sequence[ToolSchema], estimated_tokens: int
    ) -> None:
        """Record a request by what changed since the previous one (the unchanged prefix is `base`)."""
        base = 0
        while base < min(len(messages), len(self._sent)) and messages[base] == self._sent[base]:
            base += 1
        self.append(
            RequestRecord(
                step=step,
                base=base,
                messages=messages[base:],
                tools=[t.name for t in tools],
                estimated_tokens=estimated_tokens,
            )
        )
        self._sent = list(messages)

    def append(self, record: _Record, *, durable: bool = False) -> None:
        """Write one line; durable=True fsyncs (model turns and step commits)."""
        if self.agent is not None:
            record.agent = self.agent
        line = record.model_dump_json()
        for secret in self._secrets:
            line = line.replace(secret, "***")
        with self._lock:
            try:
                self._file.write(line + "\n")
                self._file.flush()
                if durable:
                    os.fsync(self._file.fileno())
            except OSError as error:  # a torn line at most: readers drop it, the next writer cuts it
                raise at_path(error, self.path) from None
            for observer in self._observers:
                observer.observe(record)

    def add_observer(self, observer: TrajectoryObserver) -> None:
        """One more observer of every record from now on."""
        with self._lock:
            self._observers.append(observer)

    def child(self, name: str) -> Trajectory:
        """A writer of sub-agent `name`'s records into this same file (closing it closes nothing)."""
        view = object.__new__(Trajectory)
        view.path, view._secrets, view._observers = self.path, self._secrets, self._observers
        view._file, view._lock, view._sent, view.agent = self._file, self._lock, [], name
        view._owner = False
        return view

    def records(self) -> list[Record]:
        """The records this writer's agent appended so far (a resume reads where it stopped)."""
        return read_records(self.path.parent, agent=self.agent)

    def close(self) -> None:
        if not self._owner:  # a sub-agent's view: the file is its parent's
            return
        for observer in self._observers:
            observer.close()
        self._observers = []
        if not self._file.closed:
            try:
                self._file.flush()
                os.fsync(self._file.fileno())
            except OSError as error:
                raise at_path(error, self.path) from None
            finally:
                with contextlib.suppress(OSError):
                    self._file.close()


EVERY_AGENT = readback.EVERY_AGENT
"""`read_records(..., agent=EVERY_AGENT)`: the run's own records and every sub-agent's, in file order."""


def read_records(session_dir: Path, agent: str | None = None) -> list[Record]:
    """The records of a session's own agent (agent=None), of one sub-agent (its name), or of the whole
    tree (EVERY_AGENT), tolerating a torn last line (cut anywhere, inside a UTF-8 sequence too);
    damage before it is a SessionError naming the file and line."""
    path = SessionFolder(Path(session_dir)).trajectory
    try:
        every = [_RECORD.validate_python(raw) for raw in read_lines(path)]
        return every if agent == EVERY_AGENT else [r for r in every if r.agent == agent]
    except ValueError as error:  # ValidationError too: a record that is JSON but not ours
        raise SessionError(
            f"the trajectory {path} is damaged and cannot be read back: {error}".splitlines()[0]
        ) from None


def write_state(session_dir: Path, state: BaseModel, secrets: Sequence[str] = ()) -> None:
    """Replace state.json atomically: temp file, fsync, rename, fsync the directory."""
    directory = Path(session_dir)
    text = state.model_dump_json(indent=1)
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    write_text_atomic(SessionFolder(directory).state, text)


def read_state(session_dir: Path, model: type[M]) -> M | None:
    path = SessionFolder(Path(session_dir)).state
    if not path.exists():
        return None
    try:
        return model.model_validate_json(path.read_bytes())
    except (OSError, ValueError) as error:
        raise SessionError(f"{path} is damaged and cannot be read back ({type(error).__name__})") from None


def _cut_torn_tail(path: Path) -> int:
    """Cut an unfinished last line (bytes after the last newline); how many bytes were cut."""
    if not path.exists() or path.stat().st_size == 0:
        return 0
    with open(path, "rb+") as handle:
        data = handle.read()
        if data.endswith(b"\n"):
            return 0
        keep = data.rfind(b"\n") + 1
        handle.truncate(keep)
        return len(data) - keep
