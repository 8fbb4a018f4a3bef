"""`harness acp` driven by a real ACP client nobody here wrote: acpx (npm), headless, its JSON output the
protocol's messages both ways. The scripted model fixes the example and, asked a follow-up in the same
session, adds to it; the client sees the plan, each call with its result, the edit as a diff and the
verified result. An `ask` rule is put to the client and its yes and its no decide the call; a cancel
interrupts the call in flight; the agent killed -9 mid-run, the client's next prompt loads the session
and it goes on."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from harness.agent.outcome import RunState
from harness.trajectory import (
    EventRecord,
    RequestRecord,
    StartRecord,
    ToolRecord,
    TurnRecord,
    read_records,
    read_state,
)
from tests.agent.conftest import EXAMPLE, ROOT
from tests.serve.test_mcp_serve import containers_left

pytestmark = [pytest.mark.docker, pytest.mark.timeout(400)]

ACPX_VERSION = "0.19.1"
VENV_BIN = Path(sys.executable).parent


@pytest.fixture(scope="session")
def acpx() -> Path:
    """acpx from the npm registry, installed once beside the virtualenv (`make acpx` does the same)."""
    folder = VENV_BIN.parent / "acpx"
    binary = folder / "node_modules" / ".bin" / "acpx"
    if not binary.exists():
        folder.mkdir(exist_ok=True)
        subprocess.run(
            ["npm", "install", "--silent", "--no-audit", "--no-fund", f"acpx@{ACPX_VERSION}"],
            cwd=folder, check=True, timeout=600,
        )  # fmt: skip
    return binary


class Client:
    """acpx on one repository, its agent `harness acp` with the given defaults, its records in tmp."""

    def __init__(self, acpx: Path, tmp_path: Path, run_label: str, script: Path, *flags: str) -> None:
        self.acpx, self.repo, self.state = acpx, tmp_path / "calc", tmp_path / "sessions"
        shutil.copytree(EXAMPLE, self.repo, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
        (tmp_path / "home").mkdir()
        agent = [str(VENV_BIN / "harness"), "acp", "--model", f"scripted:{script}", "--image", "py311",
                 "--state-dir", str(self.state), *flags]  # fmt: skip
        self.agent = shlex.join(agent)
        self.env = {**os.environ, "HOME": str(tmp_path / "home"), "HARNESS_RUN_ID": run_label}

    def args(self, *rest: str, policy: str = "--deny-all") -> list[str]:
        return [str(self.acpx), "--agent", self.agent, "--cwd", str(self.repo), "--format", "json", "--ttl", "30",
                policy, *rest]  # fmt: skip

    def __call__(self, *rest: str, policy: str = "--deny-all") -> list[dict[str, Any]]:
        done = subprocess.run(self.args(*rest, policy=policy), env=self.env, capture_output=True, text=True,
                              timeout=300, cwd=ROOT)  # fmt: skip
        messages = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
        assert done.returncode == 0 or messages, done.stdout[-2000:] + done.stderr[-2000:]
        return messages

    def start(self, *rest: str) -> subprocess.Popen[str]:
        return subprocess.Popen(self.args(*rest), env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, cwd=ROOT)  # fmt: skip

    def session(self) -> str:
        (found,) = [p.name for p in self.state.iterdir() if (p / "trajectory.jsonl").is_file()]
        return found

    def new(self) -> None:
        """acpx's session for the repository (each later command finds it by its folder)."""
        made = self("sessions", "new")
        assert any(m.get("action") == "session_ensured" for m in made), made

    def close(self) -> None:
        subprocess.run(self.args("sessions", "close"), env=self.env, capture_output=True, timeout=60, cwd=ROOT)


def updates(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [m["params"]["update"] for m in messages if m.get("method") == "session/update"]


def stop_reason(messages: list[dict[str, Any]]) -> str:
    prompts = {m["id"] for m in messages if m.get("method") == "session/prompt"}
    (answer,) = [m for m in messages if m.get("id") in prompts and "result" in m]
    return str(answer["result"]["stopReason"])


def said(messages: list[dict[str, Any]]) -> str:
    return "".join(u["content"]["text"] for u in updates(messages) if u["sessionUpdate"] == "agent_message_chunk")


def script(tmp_path: Path, turns: list[dict[str, Any]]) -> Path:
    path = tmp_path / "model.json"
    path.write_text(json.dumps({"turns": turns}))
    return path


def test_a_prompt_then_a_follow_up_each_verified_the_client_sees_plan_calls_diff_and_result(tmp_path, run_label, acpx):
    fix = (ROOT / "examples" / "calc-fix.yaml").read_text()
    more = """
  - text: "Adding multiply() as asked."
    tool_calls:
      - name: apply_patch
        arguments:
          path: calc/ops.py
          old_text: "def subtract("
          new_text: "def multiply(a: float, b: float) -> float:\\n    return a * b\\n\\n\\ndef subtract("
  - text: "multiply() is in calc/ops.py."
"""
    model = tmp_path / "model.yaml"
    model.write_text(fix + more)
    client = Client(acpx, tmp_path, run_label, model, "--verify", "python3 -m pytest -q")
    try:
        client.new()
        first = client("Fix the failing tests in calc.")
        second = client("Also add multiply(a, b).")
    finally:
        client.close()
    assert stop_reason(first) == "end_turn" and stop_reason(second) == "end_turn"
    seen = updates(first)
    plans = [u for u in seen if u["sessionUpdate"] == "plan"]
    assert plans[0]["entries"][0]["status"] == "in_progress" and all(
        e["status"] == "completed" for e in plans[-1]["entries"]
    )
    calls = {u["toolCallId"]: u for u in seen if u["sessionUpdate"] == "tool_call"}
    done = [u for u in seen if u["sessionUpdate"] == "tool_call_update"]
    assert set(calls) == {u["toolCallId"] for u in done} and len(calls) == 5
    assert {calls[u["toolCallId"]]["kind"] for u in done} == {"execute", "read", "search", "edit"}
    diffs = [c for u in done for c in u.get("content") or [] if c.get("type") == "diff"]
    assert diffs and diffs[0]["path"] == "calc/ops.py" and "return a + b" in diffs[0]["newText"]
    assert "verify `python3 -m pytest -q` passed" in said(first) and "harness: verified" in said(first)
    assert "Adding multiply()" in said(second) and "harness: verified" in said(second)
    session = client.session()
    assert client.repo.joinpath("calc", "ops.py").read_text() == EXAMPLE.joinpath("calc", "ops.py").read_text()
    shown = subprocess.run([str(VENV_BIN / "harness"), "diff", session, "--state-dir", str(client.state)],
                           capture_output=True, text=True, timeout=60)  # fmt: skip
    assert "+    return a + b" in shown.stdout and "+def multiply" in shown.stdout


def test_an_ask_rule_is_put_to_the_client_yes_runs_the_call_no_refuses_it(tmp_path, run_label, acpx):
    config = tmp_path / "config.toml"
    config.write_text('approval_timeout_s = 60\n\n[gate]\nask_programs = ["echo"]\n')
    ask = {"name": "run_command", "arguments": {"command": "echo asked"}}
    model = script(tmp_path, [{"text": "", "tool_calls": [ask]}, {"text": "asked once"},
                              {"text": "", "tool_calls": [ask]}, {"text": "asked twice"}])  # fmt: skip
    client = Client(acpx, tmp_path, run_label, model, "--no-verify", "--config", str(config))
    try:
        client.new()
        chosen = client("set", "max_steps", "7")
        wrong = client("set", "model", "nonsense")
        yes = client("Say asked.", policy="--approve-all")
        no = client("Say it again.", policy="--deny-all")
        fixed = client("set", "image", "node")
    finally:
        client.close()
    assert any(m.get("action") == "config_set" and m.get("value") == "7" for m in chosen), chosen
    assert "error" in wrong[0] and "nonsense" in wrong[0]["error"]["message"], wrong  # the client or harness refuses it
    assert "fixed once it has run" in json.dumps(fixed), fixed
    started = [r for r in read_records(client.state / client.session()) if isinstance(r, StartRecord)]
    assert started[0].config["limits"]["max_steps"] == 7
    for messages in (yes, no):
        asked = [m for m in messages if m.get("method") == "session/request_permission"]
        assert len(asked) == 1 and "echo asked" in asked[0]["params"]["toolCall"]["title"], asked
    tools = [r for r in read_records(client.state / client.session()) if isinstance(r, ToolRecord)]
    assert [(t.decision.action if t.decision else None, t.is_error) for t in tools] == [("allow", False),
                                                                                     ("deny", True)]  # fmt: skip
    assert tools[0].envelope is not None and tools[0].envelope.stdout == "asked\n"


def test_cancel_interrupts_the_call_a_killed_agent_is_loaded_and_goes_on(tmp_path, run_label, acpx, docker_client):
    slow = {"name": "run_command", "arguments": {"command": 'python3 -c "import time; time.sleep(6)"'}}
    model = script(tmp_path, [{"text": "Waiting.", "tool_calls": [slow]}, {"text": "Done waiting."}])
    client = Client(acpx, tmp_path, run_label, model, "--no-verify")
    try:
        client.new()
        running = client.start("Wait six seconds.")
        _wait_for_call(client)
        client("cancel")
        out, _ = running.communicate(timeout=120)
        first = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
        assert stop_reason(first) == "cancelled"
        cut = [u for u in updates(first) if u["sessionUpdate"] == "tool_call_update"]
        assert [u["status"] for u in cut] == ["failed"] and "killed in flight" in json.dumps(cut)
        session = client.session()
        state = read_state(client.state / session, RunState)
        assert state is not None and state.result is not None and state.result.outcome == "interrupted"
        assert containers_left(docker_client, client.state, session) == []

        running = client.start("Go on.")
        _wait_for_call(client, count=2)
        agents = subprocess.run(["pgrep", "-f", f"harness acp .*--state-dir {client.state}"],
                                capture_output=True, text=True).stdout.split()  # fmt: skip
        assert agents
        for pid in agents:
            os.kill(int(pid), signal.SIGKILL)
        running.communicate(timeout=120)
        last = client("Go on.")
    finally:
        client.close()
    loads = [m for m in last if m.get("method") == "session/load"]
    assert loads and loads[0]["params"]["sessionId"] == session
    assert stop_reason(last) == "end_turn" and "Done waiting." in said(last), said(last)
    state = read_state(client.state / session, RunState)
    assert state is not None and state.result is not None and state.result.outcome == "unverified"
    records = read_records(client.state / session)
    killed = [r.detail for r in records if isinstance(r, EventRecord) and r.event == "calls_interrupted"]
    assert len(killed) == 2 and all("run_command" in d for d in killed), killed
    messages = [m for r in records if isinstance(r, RequestRecord) for m in r.messages]
    assert [m.role for m in messages[-3:]] == ["assistant", "tool", "user"], "a follow-up comes after the results"
    assert containers_left(docker_client, client.state, session) == []


def _wait_for_call(client: Client, count: int = 1, timeout: float = 90) -> None:
    """Until the run of the `count`th prompt has started and its slow call is running."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        folders = [p.parent for p in client.state.glob("*/trajectory.jsonl")]
        records = read_records(folders[0]) if folders else []
        turns = [r for r in records if isinstance(r, TurnRecord) and r.turn.tool_calls]
        if turns and sum(isinstance(r, StartRecord) for r in records) >= count:
            time.sleep(2.0)  # its container is up
            return
        time.sleep(0.2)
    raise AssertionError("the call did not start")
