"""mini-swe-agent's default agent, driven by its own deterministic test model, fixes the offline
example through the harness environment (real engine), and every action is a step `harness
rollback` can undo."""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
if "MSWEA_GLOBAL_CONFIG_DIR" not in os.environ:  # its own config folder, removed when the tests end
    os.environ["MSWEA_GLOBAL_CONFIG_DIR"] = tempfile.mkdtemp(prefix="mswea-config-")
    atexit.register(shutil.rmtree, os.environ["MSWEA_GLOBAL_CONFIG_DIR"], ignore_errors=True)
pytest.importorskip("minisweagent", reason="the mini extra is not installed")

from minisweagent.agents.default import DefaultAgent
from minisweagent.environments import get_environment
from minisweagent.models.test_models import DeterministicModel, make_output

from sandbox.session.session import Session

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "calc"
HARNESS = str(Path(sys.executable).parent / "harness")
pytestmark = [pytest.mark.docker, pytest.mark.timeout(240)]


def agent_templates() -> dict[str, str]:
    import minisweagent

    config = yaml.safe_load((Path(minisweagent.__file__).parent / "config" / "default.yaml").read_text())
    return {key: config["agent"][key] for key in ("system_template", "instance_template")}


def action(thought: str, command: str) -> dict:
    return make_output(f"THOUGHT: {thought}\n\n```mswea_bash_command\n{command}\n```", [{"command": command}])


def test_default_agent_fixes_the_example_through_harness(
    tmp_path: Path, run_label: str, docker_client, harbor_python: Path
) -> None:
    state = tmp_path / "sessions"
    env = get_environment(
        {
            "environment_class": "harness.integrations.minisweagent.HarnessEnvironment",
            "repo": str(EXAMPLE),
            "state_dir": str(state),
            "run_id": run_label,
        }
    )
    model = DeterministicModel(
        outputs=[
            action("Run the tests first.", "python3 -m pytest -q"),
            action("add() subtracts; fix its sign.", "sed -i '/sum of a and b/{n;s/a - b/a + b/}' calc/ops.py"),
            action("Check with a scratch file outside the workspace.", "echo checked > /tmp/note && cat /tmp/note"),
            action("Re-run the tests.", "python3 -m pytest -q && cat /tmp/note"),
            action("Done.", "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && grep -n 'return a' calc/ops.py"),
        ]
    )
    agent = DefaultAgent(model, env, **agent_templates(), step_limit=10, cost_limit=100)
    try:
        result = agent.run("Fix the failing tests in calc.")
    finally:
        env.cleanup()

    assert result["exit_status"] == "Submitted", result
    assert "return a + b" in result["submission"]
    observations = [m["content"] for m in agent.messages if m["role"] == "user"][1:]
    assert "<returncode>1</returncode>" in observations[0] and "failed" in observations[0]
    assert "<returncode>0</returncode>" in observations[3] and "4 passed" in observations[3]
    assert "checked" in observations[3]  # /tmp persisted from the previous action (writable root)

    # Each action that changed the workspace is a step; rolling back undoes the fix.
    session_id = env.session_id
    with Session.open(state, session_id) as session:
        fix_step = next(r.step for r in session.records if r.note.startswith("action: sed -i"))
    done = subprocess.run(
        [HARNESS, "rollback", session_id, "--to", str(fix_step - 1), "--state-dir", str(state)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HARNESS_RUN_ID": run_label},
    )
    assert done.returncode == 0, done.stderr
    with Session.open(state, session_id) as session:
        assert (session.workspace / "calc" / "ops.py").read_text() == (EXAMPLE / "calc" / "ops.py").read_text()

    left = docker_client.containers.list(all=True, filters={"label": f"harness.session={session_id}"})
    assert left == []

    # The run's trajectory, converted to ATIF by Harbor's own converter, renders in harness's page.
    agent.save(tmp_path / "mini.json")
    atif = tmp_path / "mini.atif.json"
    convert = (
        "import json, sys\n"
        "from harbor.agents.installed.mini_swe_agent import convert_mini_swe_agent_to_atif\n"
        "data = convert_mini_swe_agent_to_atif(json.load(open(sys.argv[1])), 'mini-run').to_json_dict()\n"
        "open(sys.argv[2], 'w').write(json.dumps(data))\n"
    )
    done = subprocess.run(
        [str(harbor_python), "-c", convert, str(tmp_path / "mini.json"), str(atif)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    shown = subprocess.run([HARNESS, "view", str(atif), "--no-open"], capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    page = atif.with_suffix(".html").read_text()
    assert "mini-run" in page and "Run the tests first." in page and "sed -i" in page


def test_forward_env_is_refused(tmp_path: Path) -> None:
    from pydantic import ValidationError

    from harness.integrations.minisweagent import HarnessEnvironmentConfig

    with pytest.raises(ValidationError, match="never passes host environment variables"):
        HarnessEnvironmentConfig(forward_env=["HOME"], state_dir=tmp_path)
