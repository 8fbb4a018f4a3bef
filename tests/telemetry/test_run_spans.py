"""OpenTelemetry spans of a real run: the example fixed by the scripted model with the real CLI and
containers, its spans posted by the SDK's OTLP/HTTP exporter to a receiver on 127.0.0.1 and written
as OTLP JSON lines at once: one trace, the run span the parent of every model call, tool call and
verification, the attributes of each, and nothing the model or the repository wrote by default.
Bad telemetry settings end in one line with the config exit code, before anything runs."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf.json_format import ParseDict
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.cli_process import run_cli
from tests.telemetry.receiver import Receiver, Span, spans_of

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE, FIX = ROOT / "examples" / "calc", ROOT / "examples" / "calc-fix.yaml"
TASK = "Fix the failing tests in calc (telemetry)."
CLI = [sys.executable, "-c", "from harness.cli import main; main()"]


def _harness(
    *args: str, state: Path, label: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "HARNESS_RUN_ID": label, "HARNESS_STATE_DIR": str(state), **(env or {})}
    return run_cli(args, cwd=ROOT, env=full, timeout=240)


def otlp_json_lines(path: Path) -> list[ExportTraceServiceRequest]:
    """Each line read as OTLP/JSON: hex ids back to protobuf's bytes, then the official message's parser
    (which refuses any field or type that is not OTLP's)."""
    requests = []
    for line in path.read_text(encoding="utf-8").splitlines():
        data = json.loads(line)
        for resource in data["resourceSpans"]:
            for scope in resource["scopeSpans"]:
                for span in scope["spans"]:
                    for name in ("traceId", "spanId", "parentSpanId"):
                        if span.get(name):
                            assert len(span[name]) in (16, 32), "OTLP/JSON ids are hex"
                            span[name] = base64.b64encode(bytes.fromhex(span[name])).decode()
        requests.append(ParseDict(data, ExportTraceServiceRequest()))
    return requests


def spans_in(path: Path) -> list[Span]:
    """Every span of an OTLP JSON lines file, oldest export first."""
    return [span for request in otlp_json_lines(path) for span in spans_of(request)]


@pytest.mark.docker
def test_a_run_is_one_trace_of_model_tool_and_verify_spans(tmp_path, run_label):
    spans_file = tmp_path / "spans.jsonl"
    with Receiver() as receiver:
        ran = _harness(
            "run", "--image", "py311", "--model", f"scripted:{FIX}", str(EXAMPLE), "--task", TASK,
            "--verify", "python3 -m pytest -q", "--json", "--otel-endpoint", receiver.url, "--otel-file", str(spans_file),
            state=tmp_path / "sessions", label=run_label,
        )  # fmt: skip
        spans = receiver.spans()
    assert ran.returncode == 0, ran.stdout + ran.stderr
    result = json.loads(ran.stdout)
    assert receiver.requests and all(h["content-type"] == "application/x-protobuf" for h in receiver.headers)

    runs = [s for s in spans if s["name"] == "invoke_agent harness"]
    assert len(runs) == 1
    run = runs[0]
    assert run["parent_id"] == "" and run["resource"]["service.name"] == "harness"
    assert run["attributes"]["harness.outcome"] == "verified" and run["attributes"]["harness.exit_code"] == 0
    assert run["attributes"]["gen_ai.conversation.id"] == result["session_id"]
    assert run["attributes"]["harness.steps"] == result["steps"]
    assert {s["trace_id"] for s in spans} == {run["trace_id"]}, "one trace"
    children = [s for s in spans if s is not run]
    assert all(s["parent_id"] == run["span_id"] for s in children), "every span is the run's child"
    assert all(run["start"] <= s["start"] <= s["end"] <= run["end"] for s in children)

    chats = [s for s in children if s["name"] == "chat calc-fix.yaml"]
    assert len(chats) == result["steps"]
    first = chats[0]["attributes"]
    assert first["gen_ai.operation.name"] == "chat" and first["gen_ai.provider.name"] == "harness.scripted"
    assert first["gen_ai.response.finish_reasons"] == ["tool_use"] and first["harness.step"] == 1
    assert {"gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens", "gen_ai.usage.cache_read.input_tokens",
            "gen_ai.usage.reasoning.output_tokens", "harness.cost_usd", "harness.retries"} <= set(first)  # fmt: skip
    assert (
        first["harness.usage.estimated"] is False
    )  # the script's usage is its own (tests/agent/test_local_model.py: counted)

    tools = {s["attributes"]["gen_ai.tool.call.id"]: s for s in children if s["name"].startswith("execute_tool ")}
    assert [s["attributes"]["gen_ai.tool.name"] for s in tools.values()] == [
        "run_tests", "read_file", "search_code", "apply_patch", "run_tests",
    ]  # fmt: skip
    failing = tools["call_1_0"]["attributes"]
    assert failing["harness.tool.exit_code"] == 1 and failing["harness.tool.status"] == "exit_nonzero"
    assert failing["harness.gate.decision"] == "allow" and failing["harness.gate.rule"]
    assert failing["harness.sandbox.runtime"] == "runc" and failing["harness.tool.bytes_out"] > 0
    assert failing["harness.tool.duration_ms"] > 0
    patch = tools["call_3_0"]["attributes"]
    assert patch["harness.tool.wrote"] is True and len(patch["harness.snapshot.id"]) == 40

    verify = [s for s in children if s["name"] == "verify"]
    assert len(verify) == 1 and verify[0]["attributes"]["harness.verify.passed"] is True
    assert verify[0]["attributes"]["harness.verify.command"] == "python3 -m pytest -q"

    shown = json.dumps([s["attributes"] for s in spans])
    for written in (TASK, "return a + b", "def add", "test_add"):  # the task, the patch, file content, test ids
        assert written not in shown, f"{written!r} is content: not in a span unless --otel-content"
    assert str(ROOT) not in shown, "no host path of the model file"

    from_file = spans_in(spans_file)
    assert sorted((s["span_id"], s["parent_id"], s["name"]) for s in from_file) == sorted(
        (s["span_id"], s["parent_id"], s["name"]) for s in spans
    ), "the file holds the same spans as the collector got"


@pytest.mark.parametrize(
    "flags, env, says",
    [
        (["--otel-endpoint", "collector:4318"], {}, "is not an http:// or https:// URL"),
        ([], {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "OTLP over HTTP only"),
        ([], {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:9", "OTEL_EXPORTER_OTLP_HEADERS": "novalue"}, "OTEL_EXPORTER_OTLP_HEADERS: a header without"),
        (["--otel-file", "/nonexistent-dir/spans.jsonl"], {}, "its folder does not exist"),
    ],
)  # fmt: skip
def test_bad_telemetry_settings_fail_in_one_line_before_anything_runs(tmp_path, run_label, flags, env, says):
    ran = _harness(
        "run", "--image", "py311", "--model", f"scripted:{FIX}", str(EXAMPLE), "--task", TASK, "--no-verify", *flags,
        state=tmp_path / "sessions", label=run_label, env=env,
    )  # fmt: skip
    assert ran.returncode == 78, ran.stdout + ran.stderr
    assert says in ran.stderr and "Traceback" not in ran.stderr and len(ran.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "sessions").exists() or not any((tmp_path / "sessions").iterdir()), "no session made"
