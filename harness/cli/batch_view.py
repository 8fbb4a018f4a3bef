"""The live display of `harness batch` at a terminal: one panel that keeps itself current (how many
task-runs are done, verified and failed, which are running and for how long, the money spent, the
time left at the pace so far), with a line per finished task-run printed above it. Anywhere else
(a pipe, a log file, CI) the lines alone; `--json` gives one event per line instead."""

from __future__ import annotations

import time
from collections.abc import Callable

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text

from harness.batch.runner import BatchEvent
from harness.visible import visible

SHOWN_RUNNING = 8
"""Running task-runs listed by name (the rest are counted)."""


class BatchProgress:
    """Folds the batch's events into what the panel shows; `render()` draws it."""

    def __init__(self, workers: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.workers = max(1, workers)
        self.clock = clock
        self.started = clock()
        self.total = 0
        self.recorded = 0
        self.done = 0
        self.verified = 0
        self.failed = 0
        self.never = 0
        self.cost = 0.0
        self.durations: list[float] = []
        self.running: dict[str, float] = {}

    def observe(self, event: BatchEvent) -> None:
        key = str(event.key) if event.key is not None else ""
        if event.kind == "planned":
            self.total, self.recorded = event.queued, event.done
        elif event.kind == "started":
            self.running[key] = self.clock()
        elif event.kind == "finished" and event.record is not None:
            began = self.running.pop(key, None)
            if began is not None:
                self.durations.append(self.clock() - began)
            self.done += 1
            self.verified += bool(event.record.verified)
            self.failed += not event.record.verified
            self.cost += event.record.cost_usd
        elif event.kind == "never_started":
            self.never += 1

    def eta_s(self) -> float | None:
        """Seconds left at the pace so far (mean task-run time over the slots in use), once one finished."""
        if not self.durations:
            return None
        left = self.total - self.done - self.never
        mean = sum(self.durations) / len(self.durations)
        slots = max(1, min(self.workers, left))
        return max(0.0, left * mean / slots - self._oldest_running_s())

    def _oldest_running_s(self) -> float:
        return max((self.clock() - began for began in self.running.values()), default=0.0) if self.running else 0.0

    def render(self) -> RenderableType:
        now = self.clock()
        eta = self.eta_s()
        parts = [
            Text("harness batch", style="bold"),
            Text(f"{self.done}/{self.total} done"),
            Text(f"{self.verified} verified", style="green"),
            Text(f"{self.failed} not verified", style="yellow" if self.failed else "dim"),
            Text(f"{len(self.running)} running"),
            Text(f"${self.cost:.4f}"),
            Text(f"{_duration(now - self.started)} elapsed"),
            Text(f"~{_duration(eta)} left" if eta is not None else "time left: after the first finishes"),
        ]
        if self.recorded:
            parts.append(Text(f"({self.recorded} recorded before)", style="dim"))
        if self.never:
            parts.append(Text(f"{self.never} never started (budget)", style="red"))
        head = Phrases(parts)
        table = Table(box=None, show_header=False, pad_edge=False)
        table.add_column("running", overflow="ellipsis", no_wrap=True)
        table.add_column("for", justify="right")
        ordered = sorted(self.running.items(), key=lambda item: item[1])
        for key, began in ordered[:SHOWN_RUNNING]:
            table.add_row(Text(visible(key), style="cyan"), _duration(now - began))
        if len(ordered) > SHOWN_RUNNING:
            table.add_row(Text(f"… and {len(ordered) - SHOWN_RUNNING} more", style="dim"), "")
        return Group(head, table) if ordered else head


def live_display(console: Console, workers: int) -> tuple[BatchProgress, Callable[[BatchEvent], None], object]:
    """(progress, event handler, the rich Live to enter) for a terminal."""
    from rich.live import Live

    progress = BatchProgress(workers)
    live = Live(
        progress.render(), console=console, refresh_per_second=4, transient=True, get_renderable=progress.render
    )

    def show(event: BatchEvent) -> None:
        progress.observe(event)
        if event.kind == "finished" and event.record is not None:
            console.print(finished_line(event))

    return progress, show, live


def finished_line(event: BatchEvent) -> RenderableType:
    """A finished task-run's line: its mark and key, outcome, cost, and the batch's counts."""
    record = event.record
    assert record is not None
    mark = Text.from_markup("[green]✓[/]" if record.verified else "[yellow]·[/]")
    key = event.key
    named = (
        [mark.append(f" {visible(key.task_id)}"), Text(f"× {visible(key.model)} #{key.run_index}")] if key else [mark]
    )
    return Phrases(
        [
            *named,
            Text(visible(record.outcome)),
            Text(f"${record.cost_usd:.4f}"),
            Text(f"done {event.done}, running {event.running}, queued {event.queued}", style="dim"),
        ],
        indent=2,
    )


class Phrases:
    """Phrases two spaces apart, a line broken only between two of them (never inside one, as a word
    wrap breaks "7 not / verified"); a phrase wider than the line folds. Lines after the first are
    indented by indent; no line ends in spaces."""

    def __init__(self, parts: list[Text], indent: int = 0) -> None:
        self.parts, self.indent = parts, indent

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        width = max(1, options.max_width)
        line = Text()
        for part in self.parts:
            if line.plain.strip() and len(line) + 2 + len(part) > width:
                yield line
                line = Text(" " * self.indent)
            elif line.plain.strip():
                line.append("  ")
            if len(line) + len(part) > width:  # wider than a line: folded at the width
                *whole, part = (line + part).divide(range(width, len(line) + len(part), width))
                yield from whole
                line = Text()
            line.append_text(part)
        if line.plain.strip():
            yield line


def _duration(seconds: float) -> str:
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
