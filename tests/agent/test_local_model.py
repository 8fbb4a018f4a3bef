"""A real model drives real runs: SmolLM2-135M-Instruct on llama.cpp's server (tests/local_model.py), the
real CLI and containers. These prove the protocol, not task success (a model this small fixes nothing):
a tool call parsed from real generation (the first turn forced to `run_command`; the server's
function-calling format generates its arguments to the tool's schema), a container's envelope back,
verification, the trajectory and `show`; usage counted by the server's tokenizer and marked
estimated (this server sends none in a stream) through the run, `show`, a batch's report; kill -9
while the model generates, then `harness resume`; a call cut off at the output limit classified."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.trajectory import read_records
from tests import local_model
from tests.agent.conftest import EXAMPLE
from tests.harbor_venv import harbor_python
from tests.telemetry.test_run_spans import spans_in

pytestmark = [pytest.mark.docker, pytest.mark.local_model, pytest.mark.timeout(600)]
MODEL = "openai:smollm2"
TASK = "Run python3 -m pytest -q and fix the failing tests in calc."
FORCED = '[providers.openai]\nforce_tool = "run_command"\ntemperature = 0.0\n'


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[str]:
    with local_model.serving(tmp_path_factory.mktemp("llama") / "server.log") as base_url:
        yield base_url


@pytest.fixture
def forced(tmp_path: Path) -> Path:
    path = tmp_path / "local.toml"
    path.write_text(FORCED)
    return path


def local_run(base_url: str, config: Path, *extra: str, session: str, task: str = TASK) -> list[str]:
    return [
        "run", "--image", "py311", "--model", MODEL, "--base-url", base_url, "--config", str(config),
        str(EXAMPLE), "--task", task, "--verify", "python3 -m pytest -q", "--session", session, "--json", *extra,
    ]  # fmt: skip


def test_a_batch_against_the_local_server_reports_its_tokens_as_estimated(server, harness, tmp_path):
    """The tasks file names the local endpoint and its settings (`defaults.providers`, as a run's config
    file has them): every task-run reaches it."""
    tasks = tmp_path / "tasks.yaml"
    local = {"base_url": server, "force_tool": "run_command", "temperature": 0.0}
    tasks.write_text(
        json.dumps(
            {
                "defaults": {"model": [MODEL], "providers": {"openai": local}, "limits": {"max_steps": 2}},
                "tasks": [{"id": "calc", "repo": str(EXAMPLE), "task": TASK, "verify": "python3 -m pytest -q"}],
            }
        )
    )
    ran = harness("batch", str(tasks), "--out", str(tmp_path / "batch"), "--workers", "1", timeout=400)
    assert ran.code in (0, 1), ran.stdout + ran.stderr
    report = harness("report", str(tmp_path / "batch"))
    assert report.code == 0, report.stderr
    assert "| tokens estimated (no usage reported) | 100.0% |" in report.stdout


class Relay:
    """A loopback TCP relay in front of the model server that tells when the answer to its Nth chat
    request starts to flow: the model is generating (this server sends its headers with the first token)."""

    def __init__(self, upstream: str, nth: int) -> None:
        host, port = upstream.split("//", 1)[1].split("/", 1)[0].split(":")
        self.upstream = (host, int(port))
        self.nth, self.requests = nth, 0
        self.generating = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}/v1"
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            current = [0]
            threading.Thread(target=self._pipe, args=(client, server, current, True), daemon=True).start()
            threading.Thread(target=self._pipe, args=(server, client, current, False), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, current: list[int], upward: bool) -> None:
        try:
            while data := source.recv(65536):
                if upward and b"POST /v1/chat/completions" in data:
                    with self._lock:
                        self.requests += 1
                        current[0] = self.requests
                elif not upward and current[0] == self.nth:
                    self.generating.set()
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                try:
                    end.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._listener.close()


def test_a_real_model_runs_a_tool_survives_kill_9_mid_generation_and_is_verified(server, harness, forced, tmp_path):
    """One run: its first turn a forced tool call the server's grammar generated and harness parsed, a
    container's envelope back; kill -9 while the model generates the next turn; `harness resume`
    asks that turn again and verification decides. Usage counted and marked estimated throughout."""
    spans_file = tmp_path / "spans.jsonl"
    relay = Relay(server, nth=2)  # the turn after the first tool call
    try:
        process = harness.start(*local_run(relay.url, forced, "--max-steps", "3", "--rollout", session="real"))
        try:
            assert relay.generating.wait(240), "the second model call never started to answer"
            os.kill(process.pid, signal.SIGKILL)
        finally:
            process.wait(timeout=60)
    finally:
        relay.close()
    assert process.returncode == -signal.SIGKILL
    before = read_records(harness.session_dir("real"))
    assert [r.kind for r in before].count("turn") == 1 and not any(r.kind == "outcome" for r in before)
    resumed = harness("resume", "real", "--base-url", server, "--otel-file", str(spans_file), "--json")
    result = resumed.json()
    assert result["outcome"] in ("stuck", "failed_verification", "limit:steps"), resumed.stdout + resumed.stderr
    records = read_records(harness.session_dir("real"))
    assert records[-1].kind == "outcome" and [r.step for r in records if r.kind == "turn"][:2] == [1, 2]

    first = next(r for r in records if r.kind == "turn")
    [call] = first.turn.tool_calls  # forced: a call the server's grammar generated, parsed by harness
    assert call.name == "run_command" and call.parse_error is None and call.arguments.get("command")
    tool = next(r for r in records if r.kind == "tool")
    assert tool.call_id == call.id and tool.decision is not None
    assert tool.envelope is not None and isinstance(tool.envelope.exit_code, int), tool.text  # ran in a container
    assert any(r.kind == "verify" for r in records) and result["verify_rounds"] >= 1
    turns = [r.turn for r in records if r.kind == "turn"]
    assert all(t.usage.estimated and t.usage.input_tokens > 0 for t in turns)  # never a silent zero
    assert result["tokens"]["estimated"] == result["tokens"]["input"] + result["tokens"]["output"] > 0
    shown = harness("show", "real")
    assert shown.code == 0 and "estimated: the server reported none" in shown.stdout
    chats = [s["attributes"] for s in spans_in(spans_file) if s["name"].startswith("chat ")]
    assert chats and all(c["harness.usage.estimated"] is True for c in chats)  # the resumed process's turns
    assert [c["gen_ai.usage.input_tokens"] for c in chats] == [t.usage.input_tokens for t in turns[-len(chats) :]]
    # --rollout (kept by the resume): each text turn's sampled tokens and log-probabilities beside it (this
    # server gives no ids, and none for its grammar-made tool calls), exported in Harbor's own shapes
    for turn in turns:
        if not turn.tool_calls:
            assert turn.rollout is not None and len(turn.rollout.tokens) == len(turn.rollout.logprobs) > 0
            assert turn.rollout.completion_ids is None
    exported = tmp_path / "rollout.json"
    assert harness("export", "real", "--format", "rollout", "-o", str(exported)).code == 0
    read = subprocess.run([str(harbor_python()), "-c", HARBOR_READS, str(exported)], capture_output=True, text=True)
    assert read.returncode == 0, read.stderr[-2000:]
    details = json.loads(read.stdout)
    assert details["turns"] == len(turns) and details["rewards"]["reward"] == 0.0
    assert details["sampled"] == [bool(t.rollout and t.rollout.logprobs) for t in turns]


HARBOR_READS = """
import json, sys
from harbor.models.agent.context import AgentContext
from harbor.models.verifier.result import VerifierResult
document = json.load(open(sys.argv[1]))
context = AgentContext.model_validate(document["agent_result"])
rewards = VerifierResult.model_validate(document["verifier_result"]).rewards
[detail] = context.rollout_details
print(json.dumps({"turns": len(detail["logprobs"]), "sampled": detail["extra"]["sampled"], "rewards": rewards}))
"""


def test_a_call_cut_off_at_the_output_limit_is_classified(server, harness, tmp_path):
    """The smallest turn a run allows (16 tokens) and a long command for the model to copy: its
    arguments end mid-string, and harness tells the model so instead of running anything."""
    config = tmp_path / "cut.toml"
    config.write_text(FORCED + "\n[limits]\nmax_turn_tokens = 16\n")
    long = (
        "Run python3 -m pytest -q tests/test_ops.py::test_add tests/test_ops.py::test_mean --maxfail=1 -x and fix calc."
    )
    ran = harness(*local_run(server, config, "--max-steps", "1", session="cut", task=long))
    assert ran.json()["outcome"] == "limit:steps", ran.stdout + ran.stderr
    records = read_records(harness.session_dir("cut"))
    [call] = next(r for r in records if r.kind == "turn").turn.tool_calls
    assert call.name == "run_command" and call.parse_error and "cut off" in call.parse_error
    tool = next(r for r in records if r.kind == "tool")
    assert tool.error_kind == "invalid_json" and tool.is_error and tool.envelope is None
    assert "not valid JSON" in tool.text and "Send the arguments again" in tool.text
