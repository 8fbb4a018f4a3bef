"""Reports as Markdown (one column per batch when several are compared, with the differences to the
first) and as JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from harness.batch.adaptive import invocations
from harness.errors import NotFoundError
from harness.report import metrics
from harness.report.metrics import Figures, Report

ROWS: list[tuple[str, str]] = [
    ("task-runs", "task_runs"),
    ("infrastructure failures (not in the rates)", "infra_failures"),
    ("completion rate", "completion_rate"),
    ("pass@k (any of the k runs)", "pass_at_k"),
    ("pass@1 (unbiased)", "pass_at_1"),
    ("tool-call turns (mean, completed)", "turns_mean"),
    ("tool-call turns (median, completed)", "turns_median"),
    ("first-tool accuracy", "first_tool_accuracy"),
    ("cost per task-run (USD)", "cost_per_run_usd"),
    ("cost per task completed (USD)", "cost_per_verified_usd"),
    ("cost total (USD)", "cost_total_usd"),
    ("input tokens per task-run", "input_tokens_per_run"),
    ("input served from the prompt cache", "cached_share"),
    ("tokens estimated (no usage reported)", "estimated_share"),
    ("long-context success (tagged)", "long_context_tagged"),
    ("long-context success (by prompt size)", "long_context_by_size"),
]
RATES = {
    "completion_rate",
    "pass_at_k",
    "pass_at_1",
    "first_tool_accuracy",
    "long_context_tagged",
    "long_context_by_size",
    "cached_share",
    "estimated_share",
}


def curve_line(figures: Figures) -> str:
    """The unbiased pass@k for every k the runs allow, when they allow more than one; else ''."""
    if len(figures.pass_at) < 2:
        return ""
    points = ", ".join(f"pass@{k} {format_value('pass_at_k', value)}" for k, value in figures.pass_at.items())
    return f"unbiased estimates (Chen et al.): {points}"


def infra_line(report: Report) -> str:
    """What the machine failed, said above the figures: those task-runs are no verdict on the agent."""
    causes = ", ".join(f"{cause} {count}" for cause, count in report.infra_causes.items())
    return (
        f"{report.infra_failures} task-run(s) failed on the infrastructure, not the agent ({causes}); "
        "left out of the completion rates"
    )


def text_report(dirs: Sequence[Path], fmt: str) -> str:
    """The report of batch directories and Harbor job directories, side by side, as Markdown or JSON
    (a batch's records read as plain data: the report acts on none of them)."""
    from harness.batch.adaptive import read_log
    from harness.batch.plain import plain_records, read_left, read_spend
    from harness.report import harbor_jobs

    for folder in dirs:
        check_source(folder)
    reports = [
        metrics.report(harbor_jobs.records(folder), source=str(folder))
        if harbor_jobs.is_job(folder)
        else metrics.report(
            plain_records(folder),
            source=str(folder),
            concurrency=read_log(folder),
            left_behind=read_left(folder),
            spend=read_spend(folder),
        )
        for folder in dirs
    ]
    return as_json(reports) if fmt == "json" else as_markdown(reports)


def check_source(folder: Path) -> None:
    """NotFoundError unless folder is a batch directory or a Harbor job directory."""
    from harness.report import harbor_jobs

    if not (Path(folder) / "runs").is_dir() and not harbor_jobs.is_job(folder):
        raise NotFoundError(f"{folder} is no batch directory (no runs/ in it) and no Harbor job directory")


def spend_line(spend: dict[str, float | None]) -> str:
    """The batch's spend against the user's ceilings, in one sentence."""

    def dollars(key: str) -> str:
        value = spend.get(key)
        return f"${value:.4f}" if value is not None else "?"

    def ceiling(key: str, name: str) -> str:
        value = spend.get(key)
        return f" of the ${value:.2f} {name} ceiling" if value is not None else f" (no {name} ceiling)"

    return (
        f"Spend: this batch {dollars('batch_usd')}; today {dollars('today_usd')}{ceiling('daily_usd', 'daily')}; "
        f"this month {dollars('month_usd')}{ceiling('monthly_usd', 'monthly')}."
    )


def left_line(left: dict[str, int]) -> str:
    """What a batch left on the engine when it ended, in one sentence."""
    parts = [f"{count} {name}" for name, count in left.items() if count]
    if not parts:
        return "Left on the engine when the batch ended: nothing."
    return (
        f"Left on the engine when the batch ended: {', '.join(parts)} (the next start of harness removes what a "
        "controller now gone left; `harness sandbox prune` the rest)."
    )


def as_json(reports: Sequence[Report]) -> str:
    return json.dumps([asdict(r) for r in reports], indent=1)


def as_markdown(reports: Sequence[Report]) -> str:
    """One table of the headline figures (a column per report), then each report's groups and failures."""
    names = [r.source or f"batch {n + 1}" for n, r in enumerate(reports)]
    lines = [
        "# harness report",
        "",
        "| figure | " + " | ".join(_escape(n) for n in names) + " |",
        "| --- | " + " | ".join("---" for _ in names) + " |",
    ]
    for label, field in ROWS:
        cells = []
        for n, report in enumerate(reports):
            value = getattr(report.overall, field)
            cell = format_value(field, value)
            if n and value is not None and getattr(reports[0].overall, field) is not None:
                cell += delta(field, value, getattr(reports[0].overall, field))
            cells.append(cell)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    notes = [f"{name}: {r.overall.note}" for name, r in zip(names, reports, strict=True) if r.overall.note]
    notes += [
        f"{name}: {curve_line(r.overall)}" for name, r in zip(names, reports, strict=True) if curve_line(r.overall)
    ]
    notes += [f"{name}: {infra_line(r)}" for name, r in zip(names, reports, strict=True) if r.infra_failures]
    if notes:
        lines += ["", *(f"> {_escape(note)}" for note in notes)]
    for name, report in zip(names, reports, strict=True):
        lines += ["", f"## {_escape(name)}", ""]
        lines += [*_groups("by model", report.by_model), "", *_groups("by category", report.by_category)]
        lines += hosted_lines(report.by_model)
        rules = ", ".join(f"{rule}: {count}" for rule, count in report.overall.first_tool_rules.items())
        lines += ["", f"First-tool rule applied: {_escape(rules) or 'none'}."]
        if report.never_started:
            lines.append(
                f"{report.never_started} task-run(s) never started (a batch budget or a spend ceiling was reached)."
            )
        if report.spend:
            lines.append(spend_line(report.spend))
        if report.left_behind:
            lines.append(left_line(report.left_behind))
        lines += ["", "### Where it failed", ""]
        lines += [f"- {_escape(why)}: {count}" for why, count in report.failures.outcomes.items()] or ["- nothing"]
        if report.failures.tool_errors:
            errors = ", ".join(f"{kind} {count}" for kind, count in report.failures.tool_errors.items())
            lines += ["", f"Tool errors: {_escape(errors)}."]
        lines += overlap_lines(report.overlaps)
        if report.failures.refused_hosts:
            lines += ["", "### Network requests refused", ""]
            lines += [f"- {_escape(host)}: {count}" for host, count in report.failures.refused_hosts.items()]
            by_task = {task: int(row["net_refused"]) for task, row in report.per_task.items() if row.get("net_refused")}
            lines += ["", "By task: " + _escape(", ".join(f"{task} {count}" for task, count in by_task.items())) + "."]
        if report.failures.not_applied:
            lines += ["", "### Not applied from the repositories' devcontainer.json", ""]
            lines += [f"- {_escape(key)}: {count} task-run(s)" for key, count in report.failures.not_applied.items()]
        if report.concurrency:
            lines += ["", "### Concurrency (`--workers auto`)", ""]
            lines += [f"- {_escape(line)}" for line in concurrency_lines(report.concurrency)]
        if report.failures.obstacles:
            lines += ["", "### The models' biggest obstacles", ""]
            lines += [f"- {_escape(line)}: {count}" for line, count in report.failures.obstacles.items()]
    return "\n".join(lines) + "\n"


def overlap_lines(pairs: list[dict[str, Any]]) -> list[str]:
    """The changes that touch the same files: each pair from one commit, then one line for the pairs
    from different commits (a mined history's tasks), whose lines cannot be compared."""
    if not pairs:
        return []
    lines = ["", "### Overlapping changes", ""]
    apart = [pair for pair in pairs if pair.get("starts")]
    for pair in pairs:
        if not pair.get("starts"):
            same = f" (same lines in {_escape(', '.join(pair['same_lines']))})" if pair["same_lines"] else ""
            lines.append(f"- {_escape(pair['a'])} and {_escape(pair['b'])}: {_escape(', '.join(pair['files']))}{same}")
    if apart:
        named = ", ".join(f"{pair['a']} and {pair['b']}" for pair in apart[:3]) + (", ..." if len(apart) > 3 else "")
        lines.append(
            f"- {len(apart)} pair(s) touch the same files but start from different commits, so their lines are "
            f"not comparable ({_escape(named)}; `--format json` lists them all)"
        )
    return lines


def hosted_lines(by_model: dict[str, Figures]) -> list[str]:
    """The isolation each loop of the report got: a hosted agent's (`AGENT@MODEL`), harness's own."""
    from harness.environment.agents import AGENTS
    from harness.providers.vendor import ModelSpec

    agents = sorted({ModelSpec.of(model).agent for model in by_model} - {""})
    if not agents:
        return []
    lines = ["", "### Which isolation each loop got", ""]
    if any(not ModelSpec.of(model).agent for model in by_model):
        lines.append("- harness's own loop: every call in a fresh container, gated, recorded and snapshotted")
    for name in agents:
        known = AGENTS.get(name)
        lines.append(f"- {_escape(name)}: {_escape(known.isolation if known else 'not hosted by this version')}")
    return lines


def concurrency_lines(changes: Sequence[dict[str, Any]]) -> list[str]:
    """Each change of the limit, seconds from the batch's start (each invocation starts again)."""
    return [
        f"+{float(change['ts']) - float(run[0]['ts']):.1f} s: limit {change['limit']} ({change['running']} running): "
        f"{change['why']}"
        for run in invocations(changes)
        for change in run
    ]


def _groups(title: str, groups: dict[str, Figures]) -> list[str]:
    lines = [
        f"| {title} | task-runs | completion | pass@k (k) | turns (median) | first tool | cost/run | note |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for name, fig in groups.items():
        lines.append(
            f"| {_escape(name)} | {fig.task_runs} | {format_value('completion_rate', fig.completion_rate)} | "
            f"{format_value('pass_at_k', fig.pass_at_k)} ({fig.k}) | {format_value('turns_median', fig.turns_median)} | "
            f"{format_value('first_tool_accuracy', fig.first_tool_accuracy)} | "
            f"{format_value('cost_per_run_usd', fig.cost_per_run_usd)} | {_escape(fig.note)} |"
        )
    return lines


def format_value(field: str, value: float | int | None) -> str:
    if value is None:
        return "–"
    if field in RATES:
        return f"{100 * value:.1f}%"
    if field.startswith("cost"):
        return f"${value:.4f}"
    return f"{value:g}"


def delta(field: str, value: float, first: float) -> str:
    if field in RATES:
        return f" ({100 * (value - first):+.1f} pt)"
    if field.startswith("cost") and first:
        return f" ({value / first:.2f}×)"
    return f" ({value - first:+g})"


def _escape(text: str) -> str:
    """Text from a model or a repository, made inert in Markdown tables (and in HTML renderers of it)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|").replace("\n", " ")
