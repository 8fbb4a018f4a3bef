"""Overlapping changes of a batch: the same lines only mean something between changes against the
same commit; mined tasks of different commits are said to be apart, not compared line by line."""

from __future__ import annotations

from harness.batch.records import TaskRunKey, TaskRunRecord
from harness.report import report_page
from harness.report.metrics import report
from harness.report.overlaps import overlaps
from harness.report.render import as_markdown

PATCH = """diff --git a/pkg/mod.py b/pkg/mod.py
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -10,3 +10,3 @@ def f():
-    return 1
+    return 2
"""


def record(task: str, parent: str | None) -> TaskRunRecord:
    tags = {"commit": f"{task}-commit", **({"parent": parent} if parent else {})}
    key = TaskRunKey(task_id=task, model="reference:", run_index=0)
    return TaskRunRecord(
        key=key, status="done", outcome="verified", verified=True, session_id=key.session_id, patch=PATCH, tags=tags
    )


def test_changes_of_one_commit_compare_lines_and_of_two_commits_say_they_differ() -> None:
    same = overlaps([record("a", "1" * 40), record("b", "1" * 40)])
    assert [(p.files, p.same_lines, p.starts) for p in same] == [(["pkg/mod.py"], ["pkg/mod.py"], [])]
    apart = overlaps([record("a", "1" * 40), record("c", "2" * 40)])
    assert apart[0].files == ["pkg/mod.py"] and apart[0].same_lines == [] and apart[0].starts == ["1" * 40, "2" * 40]


def test_a_mined_batch_s_pairs_from_different_commits_are_one_line_after_the_task_runs() -> None:
    """A mined night: every task starts from its own commit, so 20 pairs of changes that touch one file
    are not comparable: one line (the page: one line that opens to them), after the task-runs' table;
    the pairs of one commit keep their rows."""
    records = [record(f"t{n:02d}", f"{n:040d}") for n in range(6)] + [record("x", "9" * 40), record("y", "9" * 40)]
    made = report(records, source="night")
    assert len(made.overlaps) == 28
    text = as_markdown([made])
    block = text[text.index("### Overlapping changes") :].split("\n\n")[1].splitlines()
    assert block[0].startswith("- x-") and block[0].endswith(": pkg/mod.py (same lines in pkg/mod.py)"), block
    assert block[1].startswith("- 27 pair(s) touch the same files but start from different commits, so their lines")
    assert len(block) == 2 and "`--format json` lists them all" in block[1]
    html = report_page.render([report_page.Batch(made, records, lambda r: None)])
    assert html.index("<h3>Task-runs</h3>") < html.index("<h3>Overlapping changes</h3>")
    assert "<summary>27 pair(s) of changes touch the same files but start from different commits" in html
