"""A Harbor job directory read as task-run records, so one `harness report` compares agents Harbor ran
with those harness ran: each trial's `result.json` is a task-run (the task's name, `harbor:AGENT` or
`harbor:AGENT:MODEL` as its model, verified when its reward reaches 1), its tokens and cost as the
agent reported them, its exception as the outcome's detail. A trial whose agent wrote an ATIF
trajectory (`agent/trajectory.json`) links to it rendered as harness's trajectory page."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # is_job is asked by `harness report`'s quick path, which builds no model
    from harness.batch.records import TaskRunRecord

TRAJECTORY = Path("agent") / "trajectory.json"


def is_job(folder: Path) -> bool:
    """A Harbor job directory: its config.json and result.json, and trial folders with result.json."""
    folder = Path(folder)
    return (folder / "config.json").is_file() and (folder / "result.json").is_file() and any(trials(folder))


def trials(folder: Path) -> list[Path]:
    return sorted(path.parent for path in Path(folder).glob("*/result.json"))


def records(folder: Path) -> list[TaskRunRecord]:
    """Every trial of the job as a task-run record (unreadable trials are skipped)."""
    out: list[TaskRunRecord] = []
    counts: dict[tuple[str, str], int] = {}
    for trial in trials(folder):
        try:
            data = json.loads((trial / "result.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(data, dict):
            continue
        record = _record(data, trial, counts)
        if record is not None:
            out.append(record)
    return out


def trajectory_of(record: TaskRunRecord) -> Path | None:
    """The trial's ATIF trajectory, when its agent wrote one."""
    trial = record.tags.get("harbor_trial_dir")
    path = Path(trial) / TRAJECTORY if trial else None
    return path if path is not None and path.is_file() else None


def _record(data: dict[str, Any], trial: Path, counts: dict[tuple[str, str], int]) -> TaskRunRecord | None:
    from harness.batch.records import TaskRunKey, TaskRunRecord

    task = str(data.get("task_name") or trial.name.split("__")[0])
    agent = data.get("agent_info") or {}
    model_info = agent.get("model_info") or {}
    model_name = model_info.get("name") if isinstance(model_info, dict) else None
    model = f"harbor:{agent.get('name', 'agent')}" + (f":{model_name}" if model_name else "")
    index = counts.get((task, model), 0)
    counts[(task, model)] = index + 1
    rewards = (data.get("verifier_result") or {}).get("rewards") or {}
    reward = rewards.get("reward") if isinstance(rewards, dict) else None
    if reward is None and isinstance(rewards, dict) and rewards:
        reward = min(float(value) for value in rewards.values() if isinstance(value, int | float))
    failure = data.get("exception_info") or None
    verified = reward is not None and float(reward) >= 1.0 and failure is None
    if verified:
        outcome, detail = "verified", f"reward {reward}"
    elif failure:
        kind = str(failure.get("exception_type") or "exception")
        outcome, detail = "error", f"{kind}: {str(failure.get('exception_message') or '').splitlines()[0][:300]}"
    else:
        outcome, detail = "failed_verification", f"reward {reward}"
    result = data.get("agent_result") or {}
    tokens = {
        "input": int(result.get("n_input_tokens") or 0),
        "output": int(result.get("n_output_tokens") or 0),
        "cached": int(result.get("n_cache_tokens") or 0),
    }
    return TaskRunRecord(
        key=TaskRunKey(task_id=task, model=model, run_index=index),
        status="done",
        outcome=outcome,
        verified=verified,
        detail=detail,
        tokens=tokens,
        cost_usd=float(result.get("cost_usd") or 0.0),
        duration_s=_seconds(data.get("started_at"), data.get("finished_at")),
        category="harbor",
        tags={
            "source": "harbor",
            "harbor_trial": str(data.get("trial_name") or trial.name),
            "harbor_trial_dir": str(trial.resolve()),
            "reward": reward,
        },
    )


def _seconds(start: Any, end: Any) -> float:
    try:
        begun = dt.datetime.fromisoformat(str(start).replace("Z", "+00:00"))
        ended = dt.datetime.fromisoformat(str(end).replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return max(0.0, (ended - begun).total_seconds())
