"""A batch's task-run records as the report reads them.

`TaskRun` is what the report's figures read of a task-run: harness.batch.records.TaskRunRecord (the
model every other part of a batch reads and writes) has it, and so has `PlainRun`, the same record
read as plain JSON for `harness report DIR`: a report shows the records and acts on none of them, and
validating each through its model cost more than the rest of the command together (`harness bench
commands`). A field a record leaves out reads as the model's default (a test keeps the two in step);
a file that does not read as a record, or whose fields have other JSON types than the ones harness
writes, is skipped, as the model's reader skips it (the model also converts spellings no harness
writes, such as a number in a string: those the plain reading skips).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


class Key(Protocol):
    """Which task-run (harness.batch.records.TaskRunKey)."""

    @property
    def task_id(self) -> str: ...

    @property
    def model(self) -> str: ...


class TaskRun(Protocol):
    """What the report reads of a task-run record."""

    @property
    def key(self) -> Key: ...
    @property
    def status(self) -> str: ...
    @property
    def outcome(self) -> str: ...
    @property
    def cause(self) -> str | None: ...
    @property
    def verified(self) -> bool: ...
    @property
    def turns(self) -> int: ...
    @property
    def tokens(self) -> dict[str, int]: ...
    @property
    def cost_usd(self) -> float: ...
    @property
    def first_tool(self) -> str | None: ...
    @property
    def session_id(self) -> str: ...
    @property
    def patch(self) -> str | None: ...
    @property
    def category(self) -> str: ...
    @property
    def tags(self) -> dict[str, Any]: ...
    @property
    def first_tools(self) -> list[str]: ...
    @property
    def read_only(self) -> list[str]: ...
    @property
    def max_files(self) -> int | None: ...
    @property
    def max_lines(self) -> int | None: ...
    @property
    def peak_context_tokens(self) -> int: ...
    @property
    def tool_errors(self) -> dict[str, int]: ...
    @property
    def net_refused(self) -> dict[str, int]: ...
    @property
    def obstacle(self) -> str: ...
    @property
    def not_applied(self) -> list[str]: ...


@dataclass(frozen=True)
class PlainKey:
    task_id: str
    model: str
    run_index: int


@dataclass(frozen=True, kw_only=True)
class PlainRun:
    """A task-run record's fields the report reads, with the model's defaults."""

    key: PlainKey
    status: str
    outcome: str = ""
    cause: str | None = None
    verified: bool = False
    turns: int = 0
    tokens: dict[str, int] = field(default_factory=dict)
    cost_usd: float = 0.0
    first_tool: str | None = None
    session_id: str = ""
    patch: str | None = None
    category: str = ""
    tags: dict[str, Any] = field(default_factory=dict)
    first_tools: list[str] = field(default_factory=list)
    read_only: list[str] = field(default_factory=lambda: ["tests/"])
    max_files: int | None = None
    max_lines: int | None = None
    peak_context_tokens: int = 0
    tool_errors: dict[str, int] = field(default_factory=dict)
    net_refused: dict[str, int] = field(default_factory=dict)
    obstacle: str = ""
    not_applied: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, data: Any) -> PlainRun | None:
        """The record a JSON value is, or None when it is not one."""
        if not isinstance(data, dict) or not isinstance(data.get("key"), dict):
            return None
        key = data["key"]
        if not (_is(key.get("task_id"), str) and _is(key.get("model"), str) and _is(key.get("run_index"), int)):
            return None
        taken = {name: data[name] for name in _READ if name in data}
        if not _is(data.get("status"), str) or not all(_READ[name](value) for name, value in taken.items()):
            return None
        return cls(key=PlainKey(key["task_id"], key["model"], key["run_index"]), **taken)


def _is(value: Any, kind: type) -> bool:
    """isinstance, with a bool never taken for a number."""
    return isinstance(value, kind) and (kind is bool or not isinstance(value, bool))


def _optional(kind: type) -> Callable[[Any], bool]:
    return lambda value: value is None or _is(value, kind)


def _counts(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and _is(n, int) for k, n in value.items())


def _names(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


_READ: dict[str, Callable[[Any], bool]] = {
    "status": lambda value: _is(value, str),
    "outcome": lambda value: _is(value, str),
    "cause": _optional(str),
    "verified": lambda value: _is(value, bool),
    "turns": lambda value: _is(value, int),
    "tokens": _counts,
    "cost_usd": lambda value: _is(value, int) or _is(value, float),
    "first_tool": _optional(str),
    "session_id": lambda value: _is(value, str),
    "patch": _optional(str),
    "category": lambda value: _is(value, str),
    "tags": lambda value: isinstance(value, dict),
    "first_tools": _names,
    "read_only": _names,
    "max_files": _optional(int),
    "max_lines": _optional(int),
    "peak_context_tokens": lambda value: _is(value, int),
    "tool_errors": _counts,
    "net_refused": _counts,
    "obstacle": lambda value: _is(value, str),
    "not_applied": _names,
}
"""The fields read, each with the check of its JSON value (the model's types)."""


def record_files(root: Path) -> list[Path]:
    """A batch directory's task-run records, in path order (`runs/<task>/<model slug>/<k>.json`)."""
    return sorted((Path(root) / "runs").glob("*/*/*.json"))


def plain_records(root: Path) -> list[PlainRun]:
    """Every record of a batch directory that reads, in path order, as plain data."""
    found = []
    for path in record_files(root):
        try:
            run = PlainRun.of(json.loads(path.read_bytes()))
        except (OSError, ValueError):
            continue
        if run is not None:
            found.append(run)
    return found


def read_left(batch_dir: Path) -> dict[str, int]:
    """What the batch's last invocation left on the engine when it ended (containers, volumes,
    networks); {} when it did not count (a batch on a cluster, or one from before the count)."""
    try:
        found = json.loads((Path(batch_dir) / "left.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(found, dict):
        return {}
    return {str(k): int(v) for k, v in found.items() if isinstance(v, int) and not isinstance(v, bool) and v >= 0}


def read_spend(batch_dir: Path) -> dict[str, float | None]:
    """The batch's spend against the ceilings as its last invocation ended (batch_usd, today_usd,
    daily_usd, month_usd, monthly_usd); {} when none was kept."""
    try:
        found = json.loads((Path(batch_dir) / "spend.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(found, dict):
        return {}
    keys = ("batch_usd", "today_usd", "daily_usd", "month_usd", "monthly_usd")
    return {
        k: (float(found[k]) if isinstance(found.get(k), int | float) and not isinstance(found.get(k), bool) else None)
        for k in keys
        if k in found
    }
