"""A reviewer's marks on a batch's task-runs (accepted, rejected), set from the served report and
kept in the batch directory (`marks.json`), never in the repository; `harness apply BATCH --only
accepted` lands the accepted ones."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Literal, get_args

from sandbox.durable import write_text_atomic

MARKS = "marks.json"
Mark = Literal["accepted", "rejected", "none"]
KINDS: tuple[str, ...] = get_args(Mark)
_lock = threading.Lock()


def read_marks(batch_dir: Path) -> dict[str, str]:
    """session id → accepted or rejected (a damaged file reads as no marks)."""
    path = Path(batch_dir) / MARKS
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v["mark"]) for k, v in data.items() if isinstance(v, dict) and v.get("mark") in KINDS}


def set_mark(batch_dir: Path, session_id: str, mark: str, by: str = "") -> None:
    """Record mark for a task-run (`none` takes it back); ValueError for another word."""
    if mark not in KINDS:
        raise ValueError(f"a mark is one of {', '.join(KINDS)}")
    path = Path(batch_dir) / MARKS
    with _lock:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = {}
        if mark == "none":
            data.pop(session_id, None)
        else:
            data[session_id] = {"mark": mark, "by": by, "at": time.time()}
        write_text_atomic(path, json.dumps(data, indent=1, sort_keys=True))
