"""The batch directory, the source of truth of a batch: one record per task-run (task x model x run
index), written atomically; a rerun skips what is recorded. Sessions live in `sessions/` beside the
records, so any task-run can be shown, exported or resumed like a single run."""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from harness.batch.plain import record_files
from sandbox.durable import read_json, write_text_atomic


def model_slug(model: str) -> str:
    """A file-name-safe, unique name for a model spec (`scripted:/long/path.yaml` included)."""
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", model.split("/")[-1])[:40].strip("_") or "model"
    return f"{readable}-{hashlib.sha256(model.encode()).hexdigest()[:6]}"


class TaskRunKey(BaseModel):
    """Which task-run: the task, the model, the run index (0-based)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task_id: str
    model: str
    run_index: int

    @property
    def session_id(self) -> str:
        """The session of this task-run (one per task-run, stable across reruns)."""
        raw = f"{self.task_id}-{model_slug(self.model)}-{self.run_index}"
        safe = re.sub(r"[^A-Za-z0-9_-]", "_", raw)
        if safe != raw:  # keep ids that differ only in the replaced characters apart
            safe = f"{safe[:110]}-{hashlib.sha256(raw.encode()).hexdigest()[:6]}"
        return safe[:120]

    def __str__(self) -> str:
        return f"{self.task_id} × {self.model} #{self.run_index}"


class Attempt(BaseModel):
    """One try at a task-run (a sandbox or endpoint failure is retried as a new attempt)."""

    model_config = ConfigDict(extra="forbid")

    outcome: str
    detail: str = ""
    cause: str | None = None
    """The machine's failure this attempt ended on (`harness.causes.Cause`), if it was one."""
    duration_s: float = 0.0


class TaskRunRecord(BaseModel):
    """What one task-run came to."""

    model_config = ConfigDict(extra="forbid")

    key: TaskRunKey
    status: Literal["done", "never_started", "gave_up"]
    """done: it ran to an outcome; never_started: the global budget was spent first; gave_up: every
    attempt ended in a sandbox or endpoint failure."""
    outcome: str = ""
    cause: str | None = None
    """Set when the machine failed the task-run, not the agent (`harness.causes.Cause`): an
    infrastructure failure, left out of the report's completion rate and counted apart."""
    exit_code: int | None = None
    verified: bool = False
    detail: str = ""
    steps: int = 0
    turns: int = 0
    """Model turns that called tools."""
    tokens: dict[str, int] = Field(default_factory=dict)
    cost_usd: float = 0.0
    duration_s: float = 0.0
    first_tool: str | None = None
    verify_rounds: int = 0
    session_id: str = ""
    session_dir: str = ""
    repo_source: str = "in_place"
    """in_place: the worker used the repository where it is; fetched: this task-run shipped it to its
    worker; cached: the copy an earlier task-run shipped to that worker (harness.batch.shipping)."""
    worker_session: str = ""
    """HOST:PATH of the whole session (workspace, snapshots) when it lives on a worker without the
    batch directory; session_dir then holds what came back (trajectory, state, patch)."""
    patch: str | None = None
    """The final change (the session's change.patch)."""
    attempts: list[Attempt] = Field(default_factory=list)
    category: str = ""
    tags: dict[str, Any] = Field(default_factory=dict)
    first_tools: list[str] = Field(default_factory=list)
    read_only: list[str] = Field(default_factory=lambda: ["tests/"])
    """The task's read-only paths (what counts as its tests in the report)."""
    max_files: int | None = None
    max_lines: int | None = None
    peak_context_tokens: int = 0
    """The largest prompt the run sent (estimated), for long-context success by size."""
    tool_errors: dict[str, int] = Field(default_factory=dict)
    """Error kinds of the run's failed tool calls, counted."""
    reference_lines: int | None = None
    """Lines the task's reference change touches (a mined task), to size this change against."""
    reference: str | None = None
    """The task's reference (a mined task's `reference.json`, absolute): what a fork of this task-run
    keeps, so `--model reference:` and the report's categories work on the forks too."""
    net_requests: int = 0
    """Requests through the session's egress proxy (`--allow-net`), allowed or not."""
    net_refused: dict[str, int] = Field(default_factory=dict)
    """The refused ones, by host."""
    obstacle: str = ""
    """The model's own line on its biggest obstacle, from its final turn (empty when it gave none)."""
    call_overhead_ms: float | None = None
    """Median sandbox overhead of the run's tool calls: each call's time minus its command's own
    (what engine contention stretches; `--workers auto` reads it)."""
    model_ms_per_token: float | None = None
    """Median model milliseconds per output token of the run's turns (None: no usage reported)."""
    rate_limited: int = 0
    """Model requests retried after a 429 during the run."""
    not_applied: list[str] = Field(default_factory=list)
    """What the repository's devcontainer.json asked for that the run never applied (its keys)."""


class BatchDir:
    """`<out>/runs/<task>/<model slug>/<k>.json` records and `<out>/sessions/`."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.sessions = self.root / "sessions"

    @property
    def probe(self) -> Path:
        """batch-id: the batch's token; a worker that reads it here shares this filesystem."""
        return self.root / "batch-id"

    def identity(self) -> str:
        """The batch's token, made on first use and kept (a rerun finds its sessions on the workers)."""
        if self.probe.is_file():
            token = self.probe.read_text(encoding="utf-8").strip()
            if re.fullmatch(r"[0-9a-f]{32}", token):
                return token
        token = uuid.uuid4().hex
        self.root.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self.probe, token)
        return token

    @property
    def models_file(self) -> Path:
        """models.json: the models the batch was started with (a rerun without --model resumes them)."""
        return self.root / "models.json"

    def models(self) -> list[str]:
        """The models this batch directory was run with, else none."""
        try:
            found = json.loads(self.models_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return []
        return [m for m in found if isinstance(m, str) and m] if isinstance(found, list) else []

    def remember_models(self, models: list[str]) -> None:
        """Keep the batch's models beside its records (once they are known to plan)."""
        if models != self.models():
            self.root.mkdir(parents=True, exist_ok=True)
            write_text_atomic(self.models_file, json.dumps(models))

    @property
    def spend_file(self) -> Path:
        """spend.json: the batch's spend against the user's ceilings when its last invocation ended."""
        return self.root / "spend.json"

    def remember_spend(self, figures: dict[str, float | None]) -> None:
        write_text_atomic(self.spend_file, json.dumps(figures))

    @property
    def left_file(self) -> Path:
        """left.json: what the batch's last invocation left on this machine's engine when it ended."""
        return self.root / "left.json"

    def remember_left(self, counts: dict[str, int]) -> None:
        write_text_atomic(self.left_file, json.dumps(counts))

    def record_path(self, key: TaskRunKey) -> Path:
        return self.root / "runs" / key.task_id / model_slug(key.model) / f"{key.run_index}.json"

    def read(self, key: TaskRunKey) -> TaskRunRecord | None:
        """The record of a task-run, None when it has none (or only an unreadable one)."""
        path = self.record_path(key)
        if not path.is_file():
            return None
        try:
            return TaskRunRecord.model_validate(read_json(path))
        except ValueError:
            return None  # damaged: the task-run is done again, its session resumed

    def write(self, record: TaskRunRecord) -> None:
        path = self.record_path(record.key)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, record.model_dump_json(indent=1))

    def records(self) -> list[TaskRunRecord]:
        """Every readable record, in path order."""
        found = []
        for path in record_files(self.root):
            try:
                found.append(TaskRunRecord.model_validate(read_json(path)))
            except ValueError:
                continue
        return found
