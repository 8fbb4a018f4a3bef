"""Fixtures for end-to-end runs of `harness run`: the CLI as a subprocess (so kill -9 is real),
labelled with this test session's run id, sessions in a temporary state dir."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.cli_process import run_cli

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "calc"
FIX_SCRIPT = ROOT / "examples" / "calc-fix.yaml"
VERIFY = "python3 -m pytest -q"
TASK = "Fix the failing tests in calc."
ADD_FIX = {
    "path": "calc/ops.py",
    "old_text": "    return a - b\n\n\ndef subtract",
    "new_text": "    return a + b\n\n\ndef subtract",
}


@dataclass
class Ran:
    code: int
    stdout: str
    stderr: str

    def json(self) -> dict[str, Any]:
        return json.loads(self.stdout)


CLI = [sys.executable, "-c", "from harness.cli import main; main()"]


def run_args(
    model: str, *extra: str, session: str | None = None, verify: str | None = VERIFY, json_out: bool = True
) -> list[str]:
    """`harness run` of the example with model (and the extra flags)."""
    args = ["run", "--image", "py311", "--model", model, str(EXAMPLE), "--task", TASK, *extra]
    if json_out:
        args.append("--json")
    if verify:
        args += ["--verify", verify]
    else:
        args.append("--no-verify")  # no verify command, and none detected from the example's layout
    if session:
        args += ["--session", session]
    return args


class Harness:
    """Runs the harness CLI in a child process against one state dir."""

    def __init__(self, state_dir: Path, run_label: str) -> None:
        self.state_dir = state_dir
        self.env = {**os.environ, "HARNESS_RUN_ID": run_label, "HARNESS_STATE_DIR": str(state_dir)}
        self.env.pop("HARNESS_CRASH_AT", None)

    def __call__(self, *args: str, env: dict[str, str] | None = None, timeout: float = 240) -> Ran:
        done = run_cli(args, cwd=ROOT, env={**self.env, **(env or {})}, timeout=timeout)
        return Ran(done.returncode, done.stdout, done.stderr)

    def start(self, *args: str, env: dict[str, str] | None = None, **popen: Any) -> subprocess.Popen:
        """The CLI in the background (for tests that act while it runs); popen sets its streams."""
        return subprocess.Popen([*CLI, *args], cwd=ROOT, env={**self.env, **(env or {})}, **popen)

    def run(
        self,
        model: str,
        *extra: str,
        session: str | None = None,
        env: dict[str, str] | None = None,
        verify: str | None = VERIFY,
    ) -> Ran:
        return self(*run_args(model, *extra, session=session, verify=verify), env=env)

    def session_dir(self, session: str) -> Path:
        return self.state_dir / session

    def final(self, session: str, path: str) -> str | None:
        """A file as the session's last step holds it (read from its snapshots: an ended session
        keeps no workspace)."""
        from sandbox.session.session import Session

        opened = Session.open(self.state_dir, session)
        try:
            data = opened.read_file(opened.last_tree, path)
        finally:
            opened.close()
        return None if data is None else data.decode()


@pytest.fixture
def harness(tmp_path: Path, run_label: str) -> Harness:
    return Harness(tmp_path / "sessions", run_label)


@pytest.fixture
def script(tmp_path: Path):
    """Write a scripted-model file from a list of turns; returns `scripted:PATH`."""
    counter = [0]

    def write(*turns: dict[str, Any]) -> str:
        counter[0] += 1
        path = tmp_path / f"script{counter[0]}.yaml"
        path.write_text(yaml.safe_dump({"turns": list(turns)}, sort_keys=False))
        return f"scripted:{path}"

    return write


def turn(text: str = "", *calls: tuple[str, dict[str, Any]]) -> dict[str, Any]:
    """One scripted turn: text and (tool name, arguments) calls."""
    out: dict[str, Any] = {}
    if text:
        out["text"] = text
    if calls:
        out["tool_calls"] = [{"name": name, "arguments": args} for name, args in calls]
    return out


@pytest.fixture
def registry(monkeypatch, tmp_path: Path):
    """An OCI registry of devcontainer features on 127.0.0.1 (HOST:PORT); fetched features cached under tmp_path."""
    from tests.agent.oci_registry import serving

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with serving() as address:
        yield address
