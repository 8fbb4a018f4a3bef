"""Every metric of the report on hand-built batch records, edge cases included: no completed run, k
runs per task, no tool call at all, an assertion removed to turn the tests green, tests edited, a
change over the task's allowed size, two batches side by side, hostile text kept inert."""

from __future__ import annotations

import json
from dataclasses import asdict

from harness.batch.records import TaskRunKey, TaskRunRecord
from harness.report.metrics import completion, first_tool, pass_at, report
from harness.report.render import as_json, as_markdown

FIX = """diff --git a/calc/ops.py b/calc/ops.py
--- a/calc/ops.py
+++ b/calc/ops.py
@@ -1,2 +1,2 @@
-    return a - b
+    return a + b
"""
CHEAT = """diff --git a/tests/test_ops.py b/tests/test_ops.py
--- a/tests/test_ops.py
+++ b/tests/test_ops.py
@@ -1,3 +1,2 @@
 def test_add():
-    assert add(2, 3) == 5
+    pass
"""


def rec(
    task: str,
    k: int = 0,
    *,
    model: str = "m",
    verified: bool = True,
    patch: str | None = FIX,
    turns: int = 3,
    first: str | None = "read_file",
    cost: float = 0.01,
    **fields: object,
) -> TaskRunRecord:
    fields = {"status": "done", "outcome": "verified" if verified else "failed_verification", **fields}
    return TaskRunRecord(
        key=TaskRunKey(task_id=task, model=model, run_index=k),
        verified=verified,
        patch=patch,
        turns=turns,
        first_tool=first,
        cost_usd=cost,
        **fields,
    )


def test_completion_needs_untouched_tests_and_a_change_within_size():
    assert completion(rec("a")).completed
    cheat = completion(rec("a", patch=CHEAT))
    assert not cheat.completed and "removed 1 assertion" in cheat.why
    edited = completion(rec("a", patch=CHEAT.replace("-    assert add(2, 3) == 5\n", "")))
    assert not edited.completed and "edited the tests" in edited.why
    assert not completion(rec("a", max_lines=1)).completed and completion(rec("a", max_lines=2)).completed
    # a verified run whose patch adds a pytest.ini (read from the patch alone, not from verification)
    ini = "diff --git a/pytest.ini b/pytest.ini\nnew file mode 100644\n--- /dev/null\n+++ b/pytest.ini\n@@ -0,0 +1,2 @@\n+[pytest]\n+addopts = -k 'not test_add'\n"
    configured = completion(rec("a", patch=FIX + ini))
    assert not configured.completed and configured.why == "edited the test configuration (pytest.ini)"
    two_files = FIX + FIX.replace("calc/ops.py", "calc/more.py")
    assert (
        completion(rec("a", max_files=1)).completed and not completion(rec("a", patch=two_files, max_files=1)).completed
    )


def test_first_tool_rules_say_which_applied():
    assert first_tool(rec("a", first="run_tests", first_tools=["run_tests"])).rule == "the task's first_tools"
    assert first_tool(rec("a", first="read_file", first_tools=["run_tests"])).sensible is False
    assert asdict(first_tool(rec("a", first="write_file"))) == {
        "sensible": False,
        "rule": "default: writing before reading",
    }
    assert first_tool(rec("a", first="search_code")).sensible is True
    assert first_tool(rec("a", first=None)).sensible is None


def test_the_unbiased_pass_at_k_for_every_k_the_runs_allow():
    """Chen et al.'s estimator, 1 - C(n-c, k) / C(n, k) per task, averaged: 2 of 5 runs completed is
    pass@1 0.4, pass@2 0.7 (1 - 3/10), pass@4 1.0; a task with fewer runs bounds k for all."""
    assert pass_at([[True, True, False, False, False]]) == {1: 0.4, 2: 0.7, 3: 0.9, 4: 1.0, 5: 1.0}
    assert pass_at([[True, False, False, False], [False] * 4]) == {1: 0.125, 2: 0.25, 3: 0.375, 4: 0.5}
    assert pass_at([[True, False, False], [True]]) == {1: round((1 / 3 + 1) / 2, 4)}
    assert pass_at([]) == {}
    runs = [rec("a", k, verified=k < 2, cost=0.1) for k in range(5)] + [rec("b", k, verified=False) for k in range(5)]
    made = report(runs, "night")
    overall = made.overall
    assert overall.pass_at_k == 0.5 and overall.k == 5, "any of the 5: one task of two"
    assert overall.pass_at_1 == 0.2 and overall.pass_at[2] == 0.35
    assert overall.cost_per_verified_usd == 0.55, "everything spent over the one task completed"
    text = as_markdown([made])
    assert "| pass@1 (unbiased) | 20.0% |" in text
    assert "| cost per task completed (USD) | $0.5500 |" in text
    assert "night: unbiased estimates (Chen et al.): pass@1 20.0%, pass@2 35.0%, pass@3 45.0%" in text
    data = json.loads(as_json([made]))[0]
    assert data["overall"]["pass_at"]["2"] == 0.35
    single = report([rec("a")], "one")
    assert single.overall.pass_at == {1: 1.0} and "unbiased estimates" not in as_markdown([single])


def test_figures_with_k_runs_per_task_and_pass_at_k():
    records = [
        rec("a", 0),
        rec("a", 1, verified=False),
        rec("b", 0, verified=False),
        rec("b", 1, verified=False),
        rec("c", 0, turns=5, tags={"long_context": True}, peak_context_tokens=50_000, tokens={"input": 60_000}),
    ]
    made = report(records, "night")
    overall = made.overall
    assert (overall.task_runs, overall.completed, overall.completion_rate) == (5, 2, 0.4)
    assert overall.pass_at_k == round(2 / 3, 4) and overall.k == 2
    assert overall.turns_mean == 4 and overall.turns_median == 4
    assert overall.long_context_tagged == 1.0 and overall.long_context_by_size == 1.0
    assert overall.cost_total_usd == 0.05 and overall.cost_per_run_usd == 0.01
    assert "small" in overall.note and made.failures.outcomes == {"failed_verification": 3}
    assert made.per_task["a"]["completed_share"] == 0.5
    # a canned model (the offline reference, a script) reports no input tokens: its prompt size is no
    # long context, so it is not counted by size (there is nothing to count: no figure)
    canned = [rec("c", 0, tags={"long_context": True}, peak_context_tokens=50_000)]
    assert report(canned, "offline").overall.long_context_by_size is None


def test_no_completed_run_and_no_run_at_all():
    none_done = report([rec("a", verified=False, first=None)]).overall
    assert none_done.completed == 0 and none_done.turns_mean is None and none_done.first_tool_accuracy is None
    never = TaskRunRecord(key=TaskRunKey(task_id="z", model="m", run_index=0), status="never_started")
    empty = report([never])
    assert empty.overall.task_runs == 0 and empty.overall.completion_rate is None and empty.never_started == 1
    assert "no task-run" in empty.overall.note


def test_two_batches_side_by_side_with_the_differences_and_hostile_text_inert():
    first = report([rec("a", cost=0.02), rec("b", verified=False)], "before")
    second = report([rec("a", cost=0.01), rec("b", cost=0.01, model="<script>alert(1)</script>|x")], "after")
    text = as_markdown([first, second])
    assert "| completion rate | 50.0% | 100.0% (+50.0 pt) |" in text
    assert "0.67×" in text or "0.50×" in text
    assert "<script>" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;\\|x" in text
    assert '"completion_rate": 0.5' in as_json([first])


def test_input_tokens_per_run_and_the_cached_share():
    records = [
        rec("a", 0, tokens={"input": 1000, "output": 50, "cached": 600}),
        rec("b", 0, tokens={"input": 3000, "output": 70, "cached": 1400}),
    ]
    overall = report(records).overall
    assert overall.input_tokens_per_run == 2000 and overall.cached_share == 0.5
    assert "| input served from the prompt cache | 50.0% |" in as_markdown([report(records)])
    assert report([rec("c", 0)]).overall.cached_share is None  # no input counted: no share


def test_infrastructure_failures_are_counted_apart_and_left_out_of_the_rates():
    """A task-run the machine failed is no verdict on the agent (the SWE-bench rule): out of the
    completion rate's denominator and pass@k, counted with its cause on top, in the JSON under infra_."""
    records = [
        rec("a"),
        rec("b", verified=False, outcome="failed_verification", patch=None),
        rec("c", verified=False, outcome="infra_error", cause="engine_unavailable", patch=None, status="gave_up"),
        rec("d", verified=False, outcome="infra_error", cause="image_missing", patch=None, status="gave_up"),
        rec("e", verified=False, outcome="model_error", cause="endpoint_unreachable", patch=None),
        rec("f", verified=False, outcome="sandbox_error", patch=None),  # as records of earlier versions say it
    ]
    made = report(records, "night")
    assert made.overall.task_runs == 6 and made.overall.infra_failures == 4
    assert made.overall.completion_rate == 0.5 and made.overall.pass_at_k == 0.5, "1 of the 2 the agent had"
    assert made.infra_failures == 4
    assert made.infra_causes == {
        "engine_unavailable": 1,
        "image_missing": 1,
        "endpoint_unreachable": 1,
        "infra_error": 1,
    }
    assert made.failures.outcomes == {"failed_verification": 1}, "where the agent failed, not the machine"
    data = as_json([made])
    assert '"infra_failures": 4' in data and '"infra_causes"' in data
    markdown = as_markdown([made])
    assert "4 task-run(s) failed on the infrastructure, not the agent (engine_unavailable 1" in markdown
    assert markdown.index("failed on the infrastructure") < markdown.index("## night"), "said on top"


def test_refused_network_requests_are_counted_by_host_and_by_task():
    records = [
        rec("t1", net_requests=3, net_refused={"example.invalid": 2}),
        rec("t1", 1, net_requests=1, net_refused={"192.0.2.1": 1}),
        rec("t2", net_requests=2),
    ]
    made = report(records)
    assert made.failures.refused_hosts == {"example.invalid": 2, "192.0.2.1": 1}
    assert made.per_task["t1"]["net_refused"] == 3 and made.per_task["t2"]["net_refused"] == 0
    text = as_markdown([made])
    assert "### Network requests refused" in text and "- example.invalid: 2" in text and "By task: t1 3." in text
    assert '"refused_hosts"' in as_json([made])
