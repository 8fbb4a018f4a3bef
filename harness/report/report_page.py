"""A report as one self-contained page: the headline figures side by side (a column per batch, with
the differences to the first), charts of outcomes, turns and cost, the groups by model and category,
where it failed, and every task-run in a sortable table linking to its trajectory page."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from harness.batch.adaptive import invocations
from harness.batch.records import TaskRunRecord
from harness.report import charts
from harness.report.html import esc, page, table
from harness.report.metrics import Figures, Report, completion, first_tool
from harness.report.overlaps import Overlap, by_session
from harness.report.patchstats import patch_stats
from harness.report.render import (
    ROWS,
    concurrency_lines,
    curve_line,
    delta,
    format_value,
    infra_line,
    left_line,
    spend_line,
)


@dataclass(frozen=True)
class Batch:
    """One batch on the page: its report, its records, and where each task-run's page is."""

    report: Report
    records: list[TaskRunRecord]
    href: Callable[[TaskRunRecord], str | None]
    """A relative link to a task-run's trajectory page, None when it has none."""
    marks: dict[str, str] = dataclasses.field(default_factory=dict)
    """The reviewer's marks by session id (harness.report.marks)."""


def render(batches: Sequence[Batch]) -> str:
    names = [b.report.source or f"batch {n + 1}" for n, b in enumerate(batches)]
    parts = [_headline(batches, names)]
    for name, batch in zip(names, batches, strict=True):
        parts.append(_batch(name, batch, several=len(batches) > 1))
    return page("harness report", "\n".join(parts))


def _headline(batches: Sequence[Batch], names: list[str]) -> str:
    rows = []
    for label, field in ROWS:
        cells: list[tuple[str, object]] = [(esc(label), label)]
        first = getattr(batches[0].report.overall, field)
        for n, batch in enumerate(batches):
            value = getattr(batch.report.overall, field)
            text = format_value(field, value)
            if n and value is not None and first is not None:
                text += delta(field, value, first)
            cells.append((esc(text), value))
        rows.append(cells)
    notes = [
        f"{name}: {b.report.overall.note}" for name, b in zip(names, batches, strict=True) if b.report.overall.note
    ]
    notes += [
        f"{name}: {curve_line(b.report.overall)}"
        for name, b in zip(names, batches, strict=True)
        if curve_line(b.report.overall)
    ]
    notes += [
        f"{name}: {infra_line(b.report)}" for name, b in zip(names, batches, strict=True) if b.report.infra_failures
    ]
    html = "<h2>Headline figures</h2>" + table(["figure", *names], rows, sortable=False, classes="headline")
    return html + "".join(f'<p class="warn">{esc(note)}</p>' for note in notes)


def _batch(name: str, batch: Batch, *, several: bool) -> str:
    report, ran = batch.report, [r for r in batch.records if r.status != "never_started"]
    verdicts = [(record, completion(record)) for record in ran]
    outcomes = Counter("completed" if c.completed else c.why for _, c in verdicts)
    parts = [f"<h2>{esc(name)}</h2>" if several else ""]
    parts.append('<div class="charts">')
    parts.append(charts.bars("Outcomes (task-runs)", outcomes.most_common()))
    parts.append(
        charts.histogram("Tool-call turns (completed)", [float(r.turns) for r, c in verdicts if c.completed], bins=8)
    )
    parts.append(charts.histogram("Cost per task-run", [r.cost_usd for r in ran], bins=8, unit=" USD"))
    parts.append("</div>")
    parts.append("<h3>By model</h3>" + _groups(report.by_model))
    parts.append("<h3>By category</h3>" + _groups(report.by_category))
    rules = ", ".join(f"{rule}: {count}" for rule, count in report.overall.first_tool_rules.items())
    parts.append(f'<p class="muted">First-tool rule applied: {esc(rules or "none")}.</p>')
    if report.never_started:
        never = f"{report.never_started} task-run(s) never started (a batch budget or a spend ceiling was reached)."
        parts.append(f"<p>{never}</p>")
    if report.spend:
        parts.append(f"<p>{esc(spend_line(report.spend))}</p>")
    if report.left_behind:
        parts.append(f"<p>{esc(left_line(report.left_behind))}</p>")
    parts.append("<h3>Where it failed</h3>")
    failures = report.failures
    parts.append(_counts(failures.outcomes, "why", "nothing failed"))
    if failures.tool_errors:
        parts.append("<h3>Recurring tool errors</h3>" + _counts(failures.tool_errors, "error kind", ""))
    if failures.refused_hosts:
        by_task = {task: int(row["net_refused"]) for task, row in report.per_task.items() if row.get("net_refused")}
        parts.append(
            "<h3>Network requests refused</h3>"
            + _counts(failures.refused_hosts, "host", "", "requests")
            + _counts(by_task, "task", "", "requests")
        )
    if failures.not_applied:
        parts.append(
            "<h3>Not applied from the repositories' devcontainer.json</h3>"
            + _counts(failures.not_applied, "asked for", "", "task-runs")
        )
    if failures.obstacles:
        parts.append(
            "<h3>The models' biggest obstacles (their own words)</h3>" + _counts(failures.obstacles, "obstacle", "")
        )
    if report.concurrency:
        parts.append("<h3>Concurrency (--workers auto)</h3>" + _concurrency(report.concurrency))
    parts.append("<h3>Task-runs</h3>" + _runs(batch, verdicts, by_session([Overlap(**p) for p in report.overlaps])))
    parts.append(_overlaps(report.overlaps))
    return "\n".join(parts)


def _overlaps(pairs: list[dict[str, Any]]) -> str:
    """The changes that touch the same files, after the task-runs: the pairs from one commit in a table;
    those from different commits (a mined history's tasks), whose lines cannot be compared, in one line
    that opens to the list."""
    if not pairs:
        return ""

    def rows(chosen: list[dict[str, Any]]) -> list[list[tuple[str, Any]]]:
        return [
            [
                (esc(pair["a"]), pair["a"]),
                (esc(pair["b"]), pair["b"]),
                (esc(", ".join(pair["files"])), len(pair["files"])),
                (_same_lines(pair), len(pair["same_lines"])),
            ]
            for pair in chosen
        ]

    comparable = [pair for pair in pairs if not pair.get("starts")]
    apart = [pair for pair in pairs if pair.get("starts")]
    html = "<h3>Overlapping changes</h3>"
    if comparable:
        html += table(["change", "overlaps with", "files", "same lines"], rows(comparable))
    if apart:
        html += (
            f"<details><summary>{len(apart)} pair(s) of changes touch the same files but start from different "
            "commits: their lines are not comparable</summary>"
            + table(["change", "overlaps with", "files", "same lines"], rows(apart))
            + "</details>"
        )
    return html


def _concurrency(changes: list[dict[str, Any]]) -> str:
    """The limit over the last invocation's time (a step line), then every change with why."""
    points = [(float(change["ts"]), float(change["limit"])) for change in invocations(changes)[-1]]
    chart = charts.steps("Task-runs allowed at once", points, end=points[-1][0])
    rows = [[(esc(line), n)] for n, line in enumerate(concurrency_lines(changes))]
    return f'<div class="charts">{chart}</div>' + table(["change"], rows, sortable=False)


def _same_lines(pair: dict[str, Any]) -> str:
    """The files both change on the same lines; for changes from different commits, why that is unknown."""
    if pair.get("starts"):
        first, second = (esc(str(commit)[:12]) for commit in pair["starts"])
        return f'<span class="muted">not comparable: they start from {first} and {second}</span>'
    return esc(", ".join(pair["same_lines"])) or '<span class="muted">no</span>'


def _groups(groups: dict[str, Figures]) -> str:
    headers = ["group", "task-runs", "completion", "pass@k", "k", "turns (median)", "first tool", "cost/run", "note"]
    rows = []
    for name, fig in groups.items():
        rows.append(
            [
                (esc(name), name),
                (str(fig.task_runs), fig.task_runs),
                (format_value("completion_rate", fig.completion_rate), fig.completion_rate),
                (format_value("pass_at_k", fig.pass_at_k), fig.pass_at_k),
                (str(fig.k), fig.k),
                (format_value("turns_median", fig.turns_median), fig.turns_median),
                (format_value("first_tool_accuracy", fig.first_tool_accuracy), fig.first_tool_accuracy),
                (format_value("cost_per_run_usd", fig.cost_per_run_usd), fig.cost_per_run_usd),
                (esc(fig.note), fig.note),
            ]
        )
    return table(headers, rows)


def _counts(counts: dict[str, int], what: str, empty: str, unit: str = "task-runs") -> str:
    if not counts:
        return f'<p class="muted">{esc(empty)}</p>'
    return table([what, unit], [[(esc(k), k), (str(v), v)] for k, v in counts.items()])


def _runs(batch: Batch, verdicts: list, overlapping: dict[str, list[str]]) -> str:
    headers = ["task", "model", "run", "category", "outcome", "completed", "turns", "first tool", "cost (USD)"]
    headers += ["seconds", "peak context", "change", "overlaps", "review", "trajectory"]
    rows = []
    for record, verdict in verdicts:
        first = first_tool(record)
        mark = {True: '<span class="ok">yes</span>', False: '<span class="bad">no</span>', None: "–"}[first.sensible]
        href = batch.href(record)
        link = f'<a href="{esc(href)}">steps</a>' if href else '<span class="muted">none</span>'
        done = '<span class="ok">yes</span>' if verdict.completed else f'<span class="bad">no</span> {esc(verdict.why)}'
        rows.append(
            [
                (esc(record.key.task_id), record.key.task_id),
                (esc(record.key.model), record.key.model),
                (str(record.key.run_index), record.key.run_index),
                (esc(record.category), record.category),
                (esc(record.outcome or record.status), record.outcome or record.status),
                (done, int(verdict.completed)),
                (str(record.turns), record.turns),
                (f"{esc(record.first_tool or '–')} {mark}", record.first_tool or ""),
                (f"{record.cost_usd:.4f}", record.cost_usd),
                (f"{record.duration_s:.1f}", record.duration_s),
                (str(record.peak_context_tokens), record.peak_context_tokens),
                _change_cell(record),
                _overlap_cell(overlapping.get(record.session_id, [])),
                _review_cell(record.session_id, batch.marks.get(record.session_id, "")),
                (link, record.key.session_id),
            ]
        )
    return table(headers, rows, classes="runs")


def _overlap_cell(others: list[str]) -> tuple[str, int]:
    if not others:
        return '<span class="muted">–</span>', 0
    title = esc(", ".join(others))
    return f'<span class="warn" title="{title}">overlaps with {len(others)} other change(s)</span>', len(others)


def _review_cell(session_id: str, mark: str) -> tuple[str, str]:
    """The mark, and the buttons that set it (shown only when the report is served)."""
    sid = esc(session_id)
    buttons = "".join(
        f'<button type="button" class="mark-button" hidden data-session="{sid}" data-mark="{kind}">{label}</button>'
        for kind, label in (("accepted", "accept"), ("rejected", "reject"))
    )
    return f'<span class="mark" data-session="{sid}">{esc(mark or "–")}</span> {buttons}', mark


def _change_cell(record: TaskRunRecord) -> tuple[str, int]:
    """The change's files and lines, beside its task's reference change when there is one."""
    stats = patch_stats(record.patch)
    if not stats.files:
        return '<span class="muted">none</span>', 0
    shown = f"{len(stats.files)} file(s), {stats.lines_changed} line(s)"
    if record.reference_lines is not None:
        shown += f" (reference {record.reference_lines})"
    return f'<span title="{esc(", ".join(stats.files))}">{esc(shown)}</span>', stats.lines_changed
