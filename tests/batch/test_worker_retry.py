"""A task-run whose engine is gone is the machine's failure, not the agent's: the worker tries it
again as new attempts (with backoff), records each attempt's cause, gives up as `infra_error`
(never a result of the agent), and the report leaves it out of every rate and names the cause."""

from __future__ import annotations

from pathlib import Path

from harness.batch.records import TaskRunKey
from harness.batch.tasks import Task, TaskDefaults
from harness.batch.worker import TaskRunSpec, run_task
from harness.report.metrics import report

ROOT = Path(__file__).resolve().parents[2]


def test_a_dead_engine_is_retried_as_new_attempts_and_left_out_of_the_rates(tmp_path):
    key = TaskRunKey(task_id="calc", model=f"scripted:{ROOT / 'examples' / 'calc-fix.yaml'}", run_index=0)
    spec = TaskRunSpec(
        key=key,
        task=Task(id="calc", repo=ROOT / "examples" / "calc", task="Fix the failing tests in calc."),
        defaults=TaskDefaults(),
        sessions=tmp_path / "sessions",
        run_id="retry-test",
        docker_host="unix:///nonexistent/harness-test-engine.sock",
        attempts=3,
        backoff_s=0.01,
    )
    record = run_task(spec).record
    assert record.status == "gave_up" and record.outcome == "infra_error" and record.cause == "engine_unavailable"
    assert [a.outcome for a in record.attempts] == ["infra_error"] * 3
    assert all(a.cause == "engine_unavailable" for a in record.attempts)
    made = report([record])
    assert made.infra_failures == 1 and made.infra_causes == {"engine_unavailable": 1}
    assert made.overall.completion_rate is None and made.overall.task_runs == 1
