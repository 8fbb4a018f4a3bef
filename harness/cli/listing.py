"""`harness session list`: the sessions of a state directory, each with its run, read as plain JSON
(`harness.readback`): a list shows records and acts on none of them."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import readback
from harness.cli.terminal import literal
from harness.errors import SessionError

if TYPE_CHECKING:
    from rich.console import Console


def render_sessions(console: Console, sessions: Path) -> None:
    """Oldest first: each session with its outcome, model and task, then its repository and where it
    came from (never cut: a long line wraps)."""
    found = readback.sessions(sessions)
    if not found:
        console.print(f"no sessions in {literal(str(sessions))}")
        return
    for info in found:
        run = run_of(sessions / info["id"])
        outcome = run["outcome"] or ("no run" if not run["model"] else "running or unfinished")
        style = (
            "green" if outcome == "verified" else "yellow" if outcome in ("no run", "running or unfinished") else "red"
        )
        console.print(
            f"[bold]{literal(info['id'])}[/]  [{style}]{literal(outcome)}[/]  {literal(run['model'] or '-')}  "
            f"[dim]{when(info['created'])}[/]"
        )
        if run["task"]:
            console.print(f"  {literal(run['task'])}")
        where = [literal(info["repo"])]
        parent = readback.mapping(info.get("parent"))
        if parent:
            session, step = literal(str(parent.get("session"))), parent.get("step")
            if parent.get("agent"):
                where.append(f"sub-agent {literal(str(parent['agent']))} of {session} (its step {step})")
            else:
                where.append(f"forked from {session} at step {step}")
        setup = info.get("setup")
        if isinstance(setup, dict):
            where.append("setup cached" if setup.get("cached") else "setup built")
        console.print("  [dim]" + " · ".join(where) + "[/]")


def run_of(folder: Path) -> dict[str, str]:
    """The run of a session folder as a list shows it: outcome, model and the task's first line (all
    empty when it never had a run, or its state does not read)."""
    try:
        state: dict[str, Any] | None = readback.state(folder)
    except (SessionError, OSError):
        state = None
    if state is None:
        return {"outcome": "", "model": "", "task": ""}
    text, model = state.get("task"), state.get("model")
    task = text.strip().splitlines()[0] if isinstance(text, str) and text.strip() else ""
    result = readback.mapping(state.get("result"))
    outcome = readback.current_outcome(str(result.get("outcome", ""))) if state.get("finished") and result else ""
    return {
        "outcome": outcome,
        "model": model if isinstance(model, str) else "",
        "task": task if len(task) <= 100 else task[:99] + "…",
    }


def when(stamp: float) -> str:
    """A session's creation time as the list says it (local time)."""
    return datetime.datetime.fromtimestamp(stamp).strftime("%Y-%m-%d %H:%M:%S")
