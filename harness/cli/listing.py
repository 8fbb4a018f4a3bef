"""`harness session list`: the sessions of a state directory, each with its run, read as plain JSON
(`harness.readback`): a list shows records and acts on none of them."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from harness import readback
from harness.cli.terminal import literal
from harness.errors import SessionError

if TYPE_CHECKING:
    from rich.console import Console


def render_sessions(
    console: Console, sessions: Path, *, long: bool = False, outcome: str | None = None, limit: int | None = None
) -> None:
    """Oldest first, one line each: when it was made, the session, its outcome, model and task (the task
    last, never cut: a long one wraps), and a fork's or a sub-agent's origin under it. `long` adds
    its repository and its setup;
    `outcome` keeps the sessions of that outcome (`limit` matches `limit:cost`, `no run`, `unfinished`);
    `limit` keeps the newest N, and a last line says how many more there are."""
    rows = chosen(sessions, outcome, limit)
    if not rows.shown:
        which = f" with outcome {literal(outcome)}" if outcome else ""
        console.print(f"no sessions{which} in {literal(str(sessions))}", soft_wrap=True)
        return
    import textwrap

    ids = max(len(info["id"]) for info, _ in rows.shown)
    outcomes = max(len(_outcome(run)) for _, run in rows.shown)
    models = max(len(run["model"] or "-") for _, run in rows.shown)
    column = 16 + ids + outcomes + models + 8
    room = console.width - column  # the task wraps under itself when there is room for it, else the terminal wraps it
    for info, run in rows.shown:
        shown = _outcome(run)
        style = "green" if shown == "verified" else "yellow" if shown in ("no run", "unfinished") else "red"
        task = textwrap.wrap(run["task"], room, break_long_words=True) if room >= 12 else [run["task"]]
        first = (
            f"[dim]{when(info['created'])[:16]}[/]  [bold]{literal(info['id'].ljust(ids))}[/]  "
            f"[{style}]{literal(shown.ljust(outcomes))}[/]  {literal((run['model'] or '-').ljust(models))}  "
        )
        lines = [first + literal(task[0] if task else ""), *(" " * column + literal(more) for more in task[1:])]
        where = _where(info) if long else _where(info)[1:2]  # a fork's or sub-agent's origin always
        if where:
            lines.append(" " * 18 + "[dim]" + " · ".join(where) + "[/]")
        for line in lines:
            console.print(line.rstrip(), soft_wrap=True, highlight=False)
    if rows.left:
        console.print(f"[dim]{rows.left} older not shown (--limit {limit}); --limit 0 shows all[/]")


class Chosen(NamedTuple):
    """The sessions a list shows (each with its run), and how many older ones its limit left out."""

    shown: list[tuple[dict[str, Any], dict[str, str]]]
    left: int


def chosen(sessions: Path, outcome: str | None = None, limit: int | None = None) -> Chosen:
    """The sessions of a state directory, oldest first, of that outcome, the newest `limit` of them."""
    found = [(info, run_of(sessions / info["id"])) for info in readback.sessions(sessions)]
    if outcome:
        found = [(info, run) for info, run in found if _matches(_outcome(run), outcome)]
    left = max(0, len(found) - limit) if limit else 0
    return Chosen(found[left:], left)


def _outcome(run: dict[str, str]) -> str:
    return run["outcome"] or ("no run" if not run["model"] else "unfinished")


def _matches(shown: str, wanted: str) -> bool:
    wanted = wanted.strip().lower()
    return shown == wanted or shown.split(":", 1)[0] == wanted


def _where(info: dict[str, Any]) -> list[str]:
    """A session's repository, and where it came from (a fork, a sub-agent), and its setup."""
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
    return where


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
