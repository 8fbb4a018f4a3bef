"""The five numbers people compare coding agents by, from batch records: completion rate, tool-call
turns, first-tool accuracy, cost per task, long-context success; per model and category, with
pass@k, where it failed, and a note wherever n is too small to lean on."""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.batch.adaptive import Change
from harness.batch.plain import TaskRun
from harness.readback import LEGACY_OUTCOMES, is_infra
from harness.report.overlaps import overlaps
from harness.report.patchstats import patch_stats

EXPLORING = {"read_file", "list_dir", "search_code", "git_status", "git_diff", "git_log", "run_tests", "run_command"}
"""First calls that count as sensible where a task names none: look, or run the tests, first."""
WRITING = {"apply_patch", "write_file"}
LONG_CONTEXT_TOKENS = 32_000
"""A task-run whose largest prompt passed this counts as long-context by size."""
SMALL_N = 10
"""Below this many task-runs a figure carries a note that n is small."""


@dataclass(kw_only=True)
class Completion:
    """Whether a task-run counts as completed, and if not, why."""

    completed: bool
    why: str = ""


def completion(record: TaskRun) -> Completion:
    """Verified, with the tests untouched, no assertion removed, and the change within the task's size."""
    if not record.verified:
        return Completion(completed=False, why=record.outcome or record.status)
    stats = patch_stats(record.patch, record.read_only)
    if stats.removed_assertions:
        return Completion(completed=False, why=f"removed {stats.removed_assertions} assertion(s) from the tests")
    if stats.test_files:
        return Completion(completed=False, why=f"edited the tests ({', '.join(stats.test_files[:3])})")
    if stats.test_config:
        return Completion(completed=False, why=f"edited the test configuration ({', '.join(stats.test_config[:3])})")
    if record.max_files is not None and len(stats.files) > record.max_files:
        return Completion(completed=False, why=f"touched {len(stats.files)} files (at most {record.max_files})")
    if record.max_lines is not None and stats.lines_changed > record.max_lines:
        return Completion(completed=False, why=f"changed {stats.lines_changed} lines (at most {record.max_lines})")
    return Completion(completed=True)


@dataclass(kw_only=True)
class FirstTool:
    """Whether the first tool call was sensible, and by which rule."""

    sensible: bool | None
    """None when the run made no tool call."""
    rule: str


def first_tool(record: TaskRun) -> FirstTool:
    if record.first_tool is None:
        return FirstTool(sensible=None, rule="no tool call")
    if record.first_tools:
        return FirstTool(sensible=record.first_tool in record.first_tools, rule="the task's first_tools")
    if record.first_tool in WRITING:
        return FirstTool(sensible=False, rule="default: writing before reading")
    return FirstTool(sensible=record.first_tool in EXPLORING, rule="default: explore or run the tests first")


@dataclass(kw_only=True)
class Figures:
    """The numbers of one group of task-runs (a model, a category, a whole batch)."""

    task_runs: int
    completed: int
    completion_rate: float | None
    """Completed over the task-runs that did not fail on the machine (infrastructure failures are no
    verdict on the agent: they are counted apart, `infra_failures`)."""
    infra_failures: int = 0
    """Task-runs the machine failed (the sandbox could not run the calls, the endpoint was unreachable)."""
    turns_mean: float | None
    """Tool-call turns of completed task-runs."""
    turns_median: float | None
    first_tool_accuracy: float | None
    first_tool_rules: dict[str, int] = field(default_factory=dict)
    cost_total_usd: float
    cost_per_run_usd: float | None
    input_tokens_per_run: float | None = None
    """Mean input tokens per task-run."""
    cached_share: float | None = None
    """Share of all input tokens the provider served from its prompt cache."""
    estimated_share: float | None = None
    """Share of all tokens harness counted because the model server reported no usage (estimates)."""
    long_context_tagged: float | None
    """Completion on task-runs of tasks tagged long_context."""
    long_context_by_size: float | None
    """Completion on task-runs whose largest prompt passed LONG_CONTEXT_TOKENS."""
    pass_at_k: float | None
    """Share of tasks with at least one completed run (k = the runs per task)."""
    k: int
    pass_at_1: float | None = None
    """The unbiased pass@1: the mean over tasks of each one's completed share of its runs."""
    pass_at: dict[int, float] = field(default_factory=dict)
    """The unbiased pass@k (Chen et al. 2021) for every k the runs allow (1 to the fewest runs any
    task had): the chance that k runs drawn from a task's n, c of them completed, hold one."""
    cost_per_verified_usd: float | None = None
    """What the whole group cost over the tasks it completed at least once."""
    note: str = ""
    """Said when n is small."""


@dataclass(kw_only=True)
class Failures:
    """Where it failed."""

    outcomes: dict[str, int]
    """Task-runs that did not complete, by why (failed_verification, stuck, limit:*, edited the tests...)."""
    tool_errors: dict[str, int]
    """Tool error kinds over all task-runs, most frequent first."""
    obstacles: dict[str, int] = field(default_factory=dict)
    """The models' own end-of-task lines on their biggest obstacle, grouped (case and punctuation
    aside), most frequent first."""
    refused_hosts: dict[str, int] = field(default_factory=dict)
    """Network requests the sessions' egress proxies refused (`--allow-net`), by host."""
    not_applied: dict[str, int] = field(default_factory=dict)
    """What the repositories' devcontainer.json asked for and harness never applied, by key: task-runs."""


@dataclass(kw_only=True)
class Report:
    """One batch's report."""

    source: str
    overall: Figures
    by_model: dict[str, Figures]
    by_category: dict[str, Figures]
    failures: Failures
    never_started: int
    infra_failures: int = 0
    """Task-runs the machine failed, left out of every completion figure."""
    infra_causes: dict[str, int] = field(default_factory=dict)
    """What they failed on (`engine_unavailable`, `image_missing`, `endpoint_unreachable`...), most
    frequent first."""
    per_task: dict[str, dict[str, float]] = field(default_factory=dict)
    """Per task: median cost and turns, completion share over its runs."""
    overlaps: list[dict[str, Any]] = field(default_factory=list)
    """Pairs of verified changes touching the same files (`a`, `b` session ids, `files`, and
    `same_lines`: the files where their hunks cover the same lines of the original)."""
    concurrency: list[dict[str, Any]] = field(default_factory=list)
    """`--workers auto`: each change of the limit (`ts`, `limit`, `running`, `why`), oldest first."""
    spend: dict[str, float | None] = field(default_factory=dict)
    """The batch's spend against the user's ceilings as it ended (batch_usd, today_usd, daily_usd,
    month_usd, monthly_usd); empty for a batch from before they were kept."""
    left_behind: dict[str, int] = field(default_factory=dict)
    """What the batch left on this machine's engine when it ended (containers, volumes, networks);
    empty when it was not counted (a batch on a cluster)."""


def infra_failed(record: TaskRun) -> bool:
    """The machine, not the agent, ended the task-run (after the batch's retries)."""
    return not record.verified and is_infra(record.outcome, record.cause)


def figures(records: Sequence[TaskRun]) -> Figures:
    ran = [r for r in records if r.status != "never_started"]
    infra = [r for r in ran if infra_failed(r)]
    judged_runs = [r for r in ran if not infra_failed(r)]
    done = [(r, completion(r)) for r in judged_runs]
    completed = [r for r, c in done if c.completed]
    firsts = [first_tool(r) for r in ran]
    judged = [f for f in firsts if f.sensible is not None]
    turns = [r.turns for r in completed]
    tagged = [c.completed for r, c in done if r.tags.get("long_context")]
    # by size: only task-runs of a model that read its prompts (a canned model, the offline reference
    # or a script, reports no input tokens: its prompt size says nothing of long context)
    by_size = [
        c.completed for r, c in done if r.peak_context_tokens >= LONG_CONTEXT_TOKENS and r.tokens.get("input", 0) > 0
    ]
    tasks: dict[str, list[bool]] = {}
    for record, verdict in done:
        tasks.setdefault(record.key.task_id, []).append(verdict.completed)
    cost = sum(r.cost_usd for r in ran)
    inputs = sum(r.tokens.get("input", 0) for r in ran)
    curve = pass_at(tasks.values())
    solved = sum(1 for runs in tasks.values() if any(runs))
    return Figures(
        task_runs=len(ran),
        completed=len(completed),
        completion_rate=_share(len(completed), len(judged_runs)),
        infra_failures=len(infra),
        turns_mean=round(statistics.mean(turns), 2) if turns else None,
        turns_median=statistics.median(turns) if turns else None,
        first_tool_accuracy=_share(sum(1 for f in judged if f.sensible), len(judged)),
        first_tool_rules=dict(Counter(f.rule for f in firsts)),
        cost_total_usd=round(cost, 6),
        cost_per_run_usd=round(cost / len(ran), 6) if ran else None,
        input_tokens_per_run=round(inputs / len(ran), 1) if ran else None,
        cached_share=_share(sum(r.tokens.get("cached", 0) for r in ran), inputs),
        estimated_share=_share(
            sum(r.tokens.get("estimated", 0) for r in ran),
            sum(r.tokens.get("input", 0) + r.tokens.get("output", 0) for r in ran),
        ),
        long_context_tagged=_share(sum(tagged), len(tagged)),
        long_context_by_size=_share(sum(by_size), len(by_size)),
        pass_at_k=_share(sum(1 for runs in tasks.values() if any(runs)), len(tasks)),
        k=max((len(runs) for runs in tasks.values()), default=0),
        pass_at_1=curve.get(1),
        pass_at=curve,
        cost_per_verified_usd=round(cost / solved, 6) if solved else None,
        note=f"n={len(ran)}: small, read with care" if 0 < len(ran) < SMALL_N else ("no task-run" if not ran else ""),
    )


def pass_at(tasks: Iterable[Sequence[bool]]) -> dict[int, float]:
    """The unbiased estimator of pass@k (Chen et al. 2021, "Evaluating Large Language Models Trained
    on Code") for k from 1 to the fewest runs any task had: per task 1 - C(n-c, k) / C(n, k), where c
    of its n runs completed, averaged over the tasks. Unlike "any of the k runs" it does not grow with
    the runs drawn beyond k."""
    counts = [(len(runs), sum(runs)) for runs in tasks if runs]
    if not counts:
        return {}
    most = min(n for n, _ in counts)
    return {
        k: round(statistics.fmean(1.0 - math.comb(n - c, k) / math.comb(n, k) for n, c in counts), 4)
        for k in range(1, most + 1)
    }


def report(
    records: Iterable[TaskRun],
    source: str = "",
    concurrency: Sequence[Change] = (),
    left_behind: dict[str, int] | None = None,
    spend: dict[str, float | None] | None = None,
) -> Report:
    """The report of a batch's records (and, run with `--workers auto`, its limit over time; what it
    left on the engine when it ended)."""
    records = list(records)
    ran = [r for r in records if r.status != "never_started"]
    infra = [r for r in ran if infra_failed(r)]
    failed = Counter(c.why for c in (completion(r) for r in ran if not infra_failed(r)) if not c.completed)
    errors: Counter[str] = Counter()
    refused: Counter[str] = Counter()
    not_applied: Counter[str] = Counter()
    for record in ran:
        errors.update(record.tool_errors)
        refused.update(record.net_refused)
        not_applied.update(set(record.not_applied))
    per_task: dict[str, dict[str, float]] = {}
    for task_id in sorted({r.key.task_id for r in ran}):
        runs = [r for r in ran if r.key.task_id == task_id]
        judged = [r for r in runs if not infra_failed(r)]
        per_task[task_id] = {
            "runs": len(runs),
            "completed_share": _share(sum(completion(r).completed for r in judged), len(judged)) or 0.0,
            "median_cost_usd": statistics.median(r.cost_usd for r in runs),
            "median_turns": statistics.median(r.turns for r in runs),
            "net_refused": sum(sum(r.net_refused.values()) for r in runs),
        }
    return Report(
        source=source,
        overall=figures(records),
        by_model={
            model: figures([r for r in records if r.key.model == model])
            for model in sorted({r.key.model for r in records})
        },
        by_category={
            cat: figures([r for r in records if (r.category or "uncategorised") == cat])
            for cat in sorted({r.category or "uncategorised" for r in records})
        },
        failures=Failures(
            outcomes=dict(failed.most_common()),
            tool_errors=dict(errors.most_common()),
            obstacles=obstacles([r.obstacle for r in ran]),
            refused_hosts=dict(refused.most_common()),
            not_applied=dict(sorted(not_applied.items(), key=lambda item: (-item[1], item[0]))),
        ),
        never_started=sum(1 for r in records if r.status == "never_started"),
        infra_failures=len(infra),
        infra_causes=dict(Counter(r.cause or LEGACY_OUTCOMES.get(r.outcome, r.outcome) for r in infra).most_common()),
        per_task=per_task,
        overlaps=[pair.__dict__ for pair in overlaps(ran)],
        concurrency=[change._asdict() for change in concurrency],
        left_behind=dict(left_behind or {}),
        spend=dict(spend or {}),
    )


def obstacles(lines: Iterable[str]) -> dict[str, int]:
    """Obstacle lines grouped by their words (case, spacing and punctuation aside); each group is
    shown by its most common spelling, most frequent group first."""
    groups: dict[str, Counter[str]] = {}
    for line in lines:
        text = " ".join(line.split())
        if not text:
            continue
        groups.setdefault(" ".join(re.findall(r"\w+", text.lower())), Counter())[text] += 1
    ranked = sorted(groups.values(), key=lambda spellings: (-sum(spellings.values()), spellings.most_common(1)[0][0]))
    return {spellings.most_common(1)[0][0]: sum(spellings.values()) for spellings in ranked}


def _share(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None
