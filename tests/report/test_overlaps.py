"""Overlapping changes of a batch: the same lines only mean something between changes against the
same commit; mined tasks of different commits are said to be apart, not compared line by line."""

from __future__ import annotations

from harness.batch.records import TaskRunKey, TaskRunRecord
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
    text = as_markdown([report([record("a", "1" * 40), record("c", "2" * 40)], source="b")])
    assert "they start from different commits, 111111111111 and 222222222222" in text
