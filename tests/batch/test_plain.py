"""`harness report` reads a batch's records as plain data (harness.batch.plain): the fields it reads
have the model's names and defaults, a record whose fields have other types than the model's is
skipped as the model's reader skips it, and the figures are the same from either reading."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import MISSING, asdict, fields
from pathlib import Path

from harness.batch.plain import PlainRun, plain_records
from harness.batch.records import Attempt, BatchDir, TaskRunKey, TaskRunRecord
from harness.report.metrics import report
from harness.report.render import as_markdown
from tests.report.test_metrics import CHEAT, FIX

HARNESS = str(Path(sys.executable).parent / "harness")


def test_the_plain_fields_are_the_models_with_its_defaults():
    model = TaskRunRecord.model_fields
    for plain in fields(PlainRun):
        assert plain.name in model, plain.name
        if plain.name in ("key", "status"):
            assert model[plain.name].is_required()
            continue
        default = plain.default_factory() if plain.default_factory is not MISSING else plain.default
        assert default == model[plain.name].get_default(call_default_factory=True), plain.name


def _batch(root: Path) -> BatchDir:
    batch = BatchDir(root)
    records = [
        TaskRunRecord(
            key=TaskRunKey(task_id="a", model="m1", run_index=0),
            status="done",
            outcome="verified",
            verified=True,
            patch=FIX,
            turns=3,
            first_tool="read_file",
            cost_usd=0.25,
            tokens={"input": 900, "output": 40, "cached": 300},
            tool_errors={"timeout": 2},
            tags={"long_context": True, "parent": "abc"},
            category="bugfix",
            obstacle="flaky tests",
            peak_context_tokens=40_000,
            net_refused={"evil.invalid": 3},
            not_applied=["features"],
        ),
        TaskRunRecord(
            key=TaskRunKey(task_id="a", model="m1", run_index=1),
            status="done",
            outcome="verified",
            verified=True,
            patch=CHEAT,
            turns=5,
            first_tool="apply_patch",
            read_only=["tests/"],
        ),
        TaskRunRecord(
            key=TaskRunKey(task_id="b", model="m2", run_index=0),
            status="gave_up",
            outcome="infra_error",
            cause="engine_unavailable",
            attempts=[Attempt(outcome="infra_error")],
        ),
        TaskRunRecord(key=TaskRunKey(task_id="c", model="m2", run_index=0), status="never_started"),
        TaskRunRecord(
            key=TaskRunKey(task_id="d", model="m2", run_index=0),
            status="done",
            outcome="sandbox_error",
            first_tools=["run_tests"],
            first_tool="run_tests",
            max_files=0,
        ),
    ]
    for record in records:
        batch.write(record)
    return batch


def test_the_figures_are_the_same_from_the_models_and_from_plain_data(tmp_path):
    batch = _batch(tmp_path / "batch")
    typed, plain = batch.records(), plain_records(batch.root)
    assert [str(r.key) for r in typed] == [f"{p.key.task_id} × {p.key.model} #{p.key.run_index}" for p in plain]
    assert asdict(report(typed, source="x")) == asdict(report(plain, source="x"))
    assert as_markdown([report(typed)]) == as_markdown([report(plain)])


def test_a_record_the_model_refuses_for_its_types_is_skipped_alike(tmp_path):
    batch = _batch(tmp_path / "batch")
    runs = batch.root / "runs"
    bad = {
        "torn": b'{"key": {"task_id": "e", "mod',
        "list": b"[1, 2]",
        "turns": json.dumps(
            {"key": {"task_id": "e", "model": "m", "run_index": 0}, "status": "done", "turns": "three"}
        ).encode(),
        "tokens": json.dumps(
            {"key": {"task_id": "e", "model": "m", "run_index": 0}, "status": "done", "tokens": {"input": "many"}}
        ).encode(),
    }
    for name, data in bad.items():
        (runs / "e" / name).mkdir(parents=True)
        (runs / "e" / name / "0.json").write_bytes(data)
    assert len(batch.records()) == len(plain_records(batch.root)) == 5
    # the model converts spellings no harness writes (a number in a string, a bool for a number); the
    # plain reading takes the JSON types harness writes only
    (runs / "e" / "turns" / "0.json").write_text(
        json.dumps({"key": {"task_id": "e", "model": "m", "run_index": 0}, "status": "done", "turns": "3"})
    )
    assert len(batch.records()) == 6 and len(plain_records(batch.root)) == 5


def test_report_says_the_same_on_its_quick_path_and_through_the_full_command_line(tmp_path):
    batch = _batch(tmp_path / "batch")
    env = {**os.environ, "COLUMNS": "200"}

    def full(*args: str) -> subprocess.CompletedProcess[str]:
        probe = f"import sys; from harness.cli import _load; sys.argv = ['harness', *{list(args)!r}]; _load('report').main()"
        return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=120)

    def quick(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([HARNESS, *args], capture_output=True, text=True, env=env, timeout=120)

    for argv in (
        ["report", str(batch.root)],
        ["report", str(batch.root), str(batch.root), "--format", "json"],
        ["report", str(tmp_path / "nowhere")],
        ["report", str(batch.root), "-o", str(tmp_path / "r.md")],
    ):
        one, other = quick(*argv), full(*argv)
        assert (one.returncode, one.stdout, one.stderr) == (other.returncode, other.stdout, other.stderr), argv
    assert "| completion" in quick("report", str(batch.root)).stdout
    assert quick("report", str(tmp_path / "nowhere")).returncode == 66
