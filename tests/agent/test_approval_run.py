"""Gate `ask` decisions during `harness run`: on a terminal a person answers the prompt; unattended
(no TTY, or --json) the call is denied once the approval timeout passes. Either way the final
decision is what the trajectory records for the call."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import time
from pathlib import Path

import pytest

from harness.trajectory import read_records
from tests.agent.conftest import run_args, turn

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]
GATE = """approval_timeout_s = {timeout}
[[gate.rules]]
name = "ask-ls"
action = "ask"
tools = ["run_command"]
programs = ["ls"]
"""


def config(tmp_path: Path, timeout: float = 1) -> str:
    path = tmp_path / "config.toml"
    path.write_text(GATE.format(timeout=timeout))
    return str(path)


def tool_records(session_dir: Path) -> list:
    return [r for r in read_records(session_dir) if r.kind == "tool"]


def test_unattended_ask_is_denied_after_the_timeout_and_recorded(harness, script, tmp_path):
    model = script(turn("Listing.", ("run_command", {"command": "ls calc"})), turn("I could not list it."))
    started = time.monotonic()
    ran = harness.run(model, "--config", config(tmp_path, timeout=1), session="unattended", verify=None)
    assert ran.code == 10 and ran.json()["outcome"] == "unverified", ran.stdout + ran.stderr
    assert time.monotonic() - started >= 1
    [record] = tool_records(harness.session_dir("unattended"))
    assert (
        record.decision is not None
        and record.decision.action == "deny"
        and record.decision.rule == "ask-ls/unattended-timeout"
    )
    assert record.is_error and record.error_kind == "denied" and record.envelope is None  # never ran
    approvals = harness.session_dir("unattended") / "approvals"
    request = json.loads((approvals / f"{record.call_id}.request.json").read_text())
    assert request["summary"] == "run_command [exec]: ls calc" and request["asked"]["action"] == "ask"
    assert json.loads((approvals / f"{record.call_id}.decision.json").read_text())["action"] == "deny"


def test_on_a_terminal_the_person_is_asked(harness, script, tmp_path):
    model = script(turn("Listing.", ("run_command", {"command": "ls calc"})), turn("Listed it."))
    args = run_args(model, "--config", config(tmp_path, timeout=0), session="tty", verify=None, json_out=False)
    master, slave = pty.openpty()
    child = harness.start(*args, env={"COLUMNS": "200"}, stdin=slave, stdout=slave, stderr=slave, close_fds=True)
    os.close(slave)
    screen, answered = b"", False
    try:
        while child.poll() is None or select.select([master], [], [], 0)[0]:
            if select.select([master], [], [], 0.5)[0]:
                try:
                    screen += os.read(master, 4096)
                except OSError:  # the child closed the terminal
                    break
            if not answered and b"Allow this call?" in screen:
                os.write(master, b"y\n")
                answered = True
        child.wait(timeout=120)
    finally:
        os.close(master)
        if child.poll() is None:
            child.kill()
    text = re.sub(r"\x1b\[[0-9;]*m", "", screen.decode(errors="replace"))  # the terminal gets colours
    assert answered and "approval needed" in text and "run_command [exec]: ls calc" in text, text
    assert child.returncode == 10, text
    [record] = tool_records(harness.session_dir("tty"))
    assert record.decision is not None
    assert record.decision.model_dump() == {
        "action": "allow",
        "rule": "ask-ls/interactive",
        "reason": "approved at the terminal",
    }
    assert not record.is_error and "ops.py" in record.text
    assert not (harness.session_dir("tty") / "approvals").exists()  # the unattended backend was not used


def test_a_person_answers_from_another_terminal_with_harness_approvals(harness, script, tmp_path):
    model = script(turn("Listing.", ("run_command", {"command": "ls calc"})), turn("Listed it."))
    args = run_args(model, "--config", config(tmp_path, timeout=120), session="queued", verify=None)
    child = harness.start(*args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        pending: list = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not pending:
            listed = harness("approvals", "list", "--json")
            pending = json.loads(listed.stdout or "[]")
            time.sleep(0.3)
        assert len(pending) == 1 and pending[0]["summary"] == "run_command [exec]: ls calc", pending
        assert harness("approvals", "allow", "queued:nope").code == 66
        allowed = harness("approvals", "allow", pending[0]["id"])
        assert allowed.code == 0, allowed.stderr
        out, err = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 10, out + err
    [record] = tool_records(harness.session_dir("queued"))
    assert record.decision is not None and record.decision.action == "allow"
    assert record.decision.rule == "ask-ls/unattended" and not record.is_error
    assert json.loads(harness("approvals", "list", "--json").stdout) == []
    assert harness("approvals", "deny", pending[0]["id"]).code == 66, "a decided request takes no answer"
