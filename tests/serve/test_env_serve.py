"""`harness env serve` driven by OpenEnv's own client (openenv-core, installed in an environment of its
own, unchanged): eight episodes of the example at once, four that fix the bug (reward 1) and four that
submit at once (reward 0); a client without the token is refused; every episode is a session that
`harness show` reads afterwards; the server stopped leaves nothing running. Real containers."""

from __future__ import annotations

import json
import signal
import subprocess
import sys

import httpx
import pytest
import yaml

from tests.agent.conftest import EXAMPLE, ROOT, Harness
from tests.harbor_venv import openenv_python

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]

CLI = [sys.executable, "-c", "from harness.cli import main; main()"]
FIX = {
    "path": "calc/ops.py",
    "old_text": '    """Return the sum of a and b."""\n    return a - b\n',
    "new_text": '    """Return the sum of a and b."""\n    return a + b\n',
}

EPISODES = """
import json, sys, threading
from openenv.core.generic_client import GenericEnvClient

url, fix = sys.argv[1], json.loads(sys.argv[2])
results = {}

def episode(n):
    with GenericEnvClient(base_url=url, message_timeout_s=240).sync() as env:
        first = env.reset(task_id="calc")
        steps = [env.step({"tool": "read_file", "arguments": {"path": "calc/ops.py"}})]
        if n % 2 == 0:
            steps.append(env.step({"tool": "apply_patch", "arguments": fix}))
        state = env.state()
        end = env.step({"tool": "submit"})
        results[n] = {
            "session": first.observation["session_id"], "tools": [t["name"] for t in first.observation["tools"]],
            "steps": [(s.done, s.reward, s.observation["exit_code"], s.observation["is_error"]) for s in steps],
            "state": state, "done": end.done, "reward": end.reward, "outcome": end.observation["outcome"],
            "score": end.observation["score"], "patch": end.observation["patch"],
        }

threads = [threading.Thread(target=episode, args=(n,)) for n in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps(results))
"""

REFUSED = """
import sys
from openenv.core.generic_client import GenericEnvClient
try:
    with GenericEnvClient(base_url=sys.argv[1]).sync() as env:
        env.reset()
except ConnectionError as error:
    print("refused:", error)
"""


def test_openenvs_client_runs_eight_episodes_at_once_with_rewards_from_verification(tmp_path, run_label) -> None:
    python = openenv_python()
    harness = Harness(tmp_path / "sessions", run_label)
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text(
        yaml.safe_dump(
            {
                "defaults": {"image": "py311", "verify": "python3 -m pytest -q"},
                "tasks": [{"id": "calc", "repo": str(EXAMPLE), "task": "Fix the failing tests in calc."}],
            }
        )
    )
    server = subprocess.Popen(
        [*CLI, "env", "serve", str(tasks)], cwd=ROOT, env=harness.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        line = server.stdout.readline() if server.stdout else b""
        assert line, server.stderr.read().decode() if server.stderr else "no output"
        told = json.loads(line)
        url = told["url"]
        assert told["tasks"] == ["calc"] and url.startswith("http://127.0.0.1:")
        ran = subprocess.run(
            [str(python), "-c", EPISODES, url, json.dumps(FIX)], capture_output=True, text=True, timeout=280
        )
        assert ran.returncode == 0, ran.stderr[-3000:]
        results = json.loads(ran.stdout)
        assert len(results) == 8 and len({r["session"] for r in results.values()}) == 8, "eight sessions"
        for n, result in ((int(k), v) for k, v in results.items()):
            fixed = n % 2 == 0
            assert result["done"] is True and result["reward"] == (1.0 if fixed else 0.0), (n, result)
            assert result["outcome"] == ("verified" if fixed else "failed_verification"), (n, result)
            assert result["score"] == (1.0 if fixed else 0.5), "no-op: 2 of the example's 4 tests pass"
            assert all(step[:3] == [False, None, 0] for step in result["steps"]), result["steps"]
            assert result["state"]["step_count"] == (2 if fixed else 1) and result["state"]["done"] is False
            assert ("+    return a + b" in result["patch"]) is fixed
            assert {"run_command", "apply_patch", "submit"} <= set(result["tools"])
        root = url.rsplit("/", 1)[0]
        wrong = subprocess.run(
            [str(python), "-c", REFUSED, root + "/not-the-token"], capture_output=True, text=True, timeout=60
        )
        assert "refused:" in wrong.stdout and "403" in wrong.stdout, (wrong.stdout, wrong.stderr[-1000:])
        assert httpx.get(root + "/health").status_code == 403
        assert httpx.get(url + "/health").json()["status"] == "healthy"
        one = next(r for r in results.values() if r["reward"] == 1.0)
        shown = harness("show", one["session"], "--json")
        assert shown.code == 0 and shown.json()["outcome"] == "verified", shown.stderr
    finally:
        server.send_signal(signal.SIGINT)
        try:
            _, err = server.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            raise
    assert server.returncode == 0, err.decode()[-2000:]
    assert "stopped after 8 episode(s)" in err.decode()
    import docker

    sessions = {r["session"] for r in results.values()}
    left = docker.from_env().containers.list(all=True, filters={"label": f"harness.run={run_label}"})
    assert [c.name for c in left if c.labels.get("harness.session") in sessions] == [], "they went with the episodes"
