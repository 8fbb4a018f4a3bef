"""`--workers auto`'s rule, on the paces a batch's records report: slow start, then one more per
healthy result at the limit; halving on engine failures, 429s and memory pressure; no growth while
the sandbox or the model is slower than twice the batch's best (a quarter back at the overshoot); never above the ceiling or below one; every
change one line of the batch's log, which the report reads back (and skips what is not a change)."""

from __future__ import annotations

import json

from harness.batch.adaptive import Concurrency, Pace, read_log
from harness.batch.records import Attempt, TaskRunKey, TaskRunRecord
from harness.report.metrics import report
from harness.report.render import as_markdown

HEALTHY = Pace(engine_trouble=False, rate_limited=0, call_overhead_ms=40.0, model_ms_per_token=20.0)


def _limiter(ceiling: int, tmp_path=None, memory: float = 0.8, cpu=None) -> Concurrency:
    clock = iter(range(1000, 2000))
    return Concurrency(
        ceiling,
        tmp_path / "concurrency.jsonl" if tmp_path else None,
        memory=lambda: memory,
        cpu=cpu,
        clock=lambda: next(clock),
    )


def test_slow_start_doubles_then_grows_by_one_and_stops_at_the_ceiling(tmp_path):
    limiter = _limiter(12, tmp_path)
    assert limiter.limit == 2
    assert limiter.finished(HEALTHY, running=1) == 4  # full (1 still running + the one that finished)
    assert limiter.finished(HEALTHY, running=3) == 8
    assert limiter.finished(HEALTHY, running=1) == 8, "a result while the limit was not in use grows nothing"
    assert limiter.finished(HEALTHY, running=7) == 12, "doubling stops at the ceiling"
    assert limiter.finished(HEALTHY, running=11) == 12
    changes = read_log(tmp_path)
    assert [c.limit for c in changes] == [2, 4, 8, 12]
    assert changes[0].why == "start at 2 of at most 12" and "slow start" in changes[1].why


def test_trouble_halves_and_ends_the_slow_start(tmp_path):
    limiter = _limiter(16, tmp_path)
    limiter.finished(HEALTHY, running=1)
    limiter.finished(HEALTHY, running=3)  # 8
    assert limiter.finished(HEALTHY._replace(engine_trouble=True), running=7) == 4
    assert limiter.finished(HEALTHY, running=3) == 5, "after trouble: one more at a time"
    assert limiter.finished(HEALTHY._replace(rate_limited=3), running=4) == 2
    assert read_log(tmp_path)[-1].why == "the model endpoint rate-limited (3 retries after 429)"
    assert limiter.finished(HEALTHY._replace(engine_trouble=True), running=1) == 1
    assert limiter.finished(HEALTHY._replace(engine_trouble=True), running=0) == 1, "never below one"


def test_a_pace_twice_the_batch_best_stops_the_growth_and_steps_back_a_quarter_at_the_overshoot(tmp_path):
    limiter = _limiter(16, tmp_path)
    limiter.finished(HEALTHY, running=1)  # 4; best overhead 40 ms, 20 ms per token
    assert limiter.finished(HEALTHY._replace(call_overhead_ms=70.0), running=3) == 8, "under twice the best"
    assert limiter.finished(HEALTHY._replace(call_overhead_ms=95.0), running=7) == 6, "the doubling overshot"
    assert "sandbox overhead per call 95 ms" in limiter.changes[-1].why
    slow = HEALTHY._replace(model_ms_per_token=55.0)
    assert limiter.finished(slow, running=5) == 6 and limiter.changes[-1].why.startswith("holding: model 55 ms")
    assert limiter.finished(slow, running=5) == 6 and len(read_log(tmp_path)) == 5, "holding is said once"
    assert limiter.finished(HEALTHY, running=5) == 7, "the pace is back: one more"
    unknown = HEALTHY._replace(call_overhead_ms=None, model_ms_per_token=None)  # no calls, no usage: no verdict
    assert limiter.finished(unknown, running=6) == 8


def test_it_starts_where_a_fixed_count_would_within_the_ceiling():
    assert Concurrency(16, start=4, memory=lambda: 0.8, cpu=None).limit == 4
    assert Concurrency(3, start=4, memory=lambda: 0.8, cpu=None).limit == 3


def test_busy_cores_hold_the_growth_on_this_machine_and_free_ones_let_it_go_on():
    busy = iter([0.0, 0.5, 0.95, 0.97, 0.6])  # the first call starts the measure
    limiter = _limiter(16, cpu=lambda: next(busy))
    assert limiter.finished(HEALTHY, running=1) == 4
    assert (
        limiter.finished(HEALTHY, running=3) == 4
        and limiter.changes[-1].why == "holding: the machine's cores are 95% busy"
    )
    assert limiter.finished(HEALTHY, running=3) == 4 and len(limiter.changes) == 3
    assert limiter.finished(HEALTHY, running=3) == 5, "cores free again: one more (the slow start is over)"


def test_memory_pressure_halves_before_more_start():
    limiter = _limiter(8, memory=0.05)
    limiter.limit = 8
    assert limiter.pressure(running=8) == 4 and "memory pressure (5% available)" in limiter.changes[-1].why
    assert limiter.pressure(running=4) == 2
    assert _limiter(8).pressure(running=2) == 2, "with memory to spare nothing moves"


def test_the_pace_of_a_record_reads_its_engine_causes_its_429s_and_its_medians():
    key = TaskRunKey(task_id="t", model="scripted:x", run_index=0)
    record = TaskRunRecord(key=key, status="done", call_overhead_ms=12.5, rate_limited=2, model_ms_per_token=3.0)
    assert Pace.of(record) == Pace(False, 2, 12.5, 3.0)
    retried = record.model_copy(update={"attempts": [Attempt(outcome="infra_error", cause="sandbox_failed")]})
    assert Pace.of(retried).engine_trouble
    assert not Pace.of(record.model_copy(update={"cause": "endpoint_unreachable"})).engine_trouble


def test_the_report_reads_the_log_back_and_skips_lines_that_are_no_change(tmp_path):
    limiter = _limiter(4, tmp_path)
    limiter.finished(HEALTHY, running=1)
    limiter.ended()
    with (tmp_path / "concurrency.jsonl").open("a") as log:
        log.write("not json\n" + json.dumps({"ts": "soon", "limit": 2}) + "\n" + json.dumps([1, 2]) + "\n")
    changes = read_log(tmp_path)
    assert [(c.limit, c.why) for c in changes] == [
        (2, "start at 2 of at most 4"),
        (4, "healthy at the limit (slow start)"),
        (4, "the batch ended"),
    ]
    text = as_markdown([report([], source="b", concurrency=changes)])
    assert "### Concurrency (`--workers auto`)" in text
    assert "- +1.0 s: limit 4 (1 running): healthy at the limit (slow start)" in text
