"""harness inside Harbor: Harbor itself (0.26, in its own Python 3.12+ environment beside harness)
runs local tasks made here, `FROM` a harness image, through `-e harness.integrations.harbor:HarnessEnvironment`:
the oracle agent reaches reward 1 and the nop agent 0; each trial is a harness session (its diff is
the agent's change); an agent that tries the network or to write outside the workspace is
contained; a compose task and a FROM the engine lacks are refused in one line; a killed trial
leaves nothing once `harness sandbox prune` ran."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from sandbox.docker.ids import present_images
from tests.cli_process import run_cli
from tests.harbor_venv import with_harness

pytestmark = [pytest.mark.docker, pytest.mark.slow]
ROOT = Path(__file__).resolve().parents[2]
ENVIRONMENT = "harness.integrations.harbor:HarnessEnvironment"


def make_task(folder: Path, base: str, *, compose: bool = False, network: str = "") -> Path:
    (folder / "environment").mkdir(parents=True)
    (folder / "solution").mkdir()
    (folder / "tests").mkdir()
    (folder / "task.toml").write_text(
        'version = "1.0"\n\n[verifier]\ntimeout_sec = 120.0\n\n[agent]\ntimeout_sec = 600.0\n\n'
        f"[environment]\nbuild_timeout_sec = 300.0\ncpus = 1\nmemory_mb = 1024\n{network}"
    )
    (folder / "instruction.md").write_text("Write the answer, 42, to /app/answer.txt.\n")
    (folder / "environment" / "Dockerfile").write_text(f"FROM {base}\nWORKDIR /app\nCOPY data.txt /app/data.txt\n")
    (folder / "environment" / "data.txt").write_text("some data\n")
    if compose:
        (folder / "environment" / "docker-compose.yaml").write_text("services:\n  main:\n    build: .\n")
    (folder / "solution" / "solve.sh").write_text("#!/bin/bash\ncd /app && echo 42 > answer.txt\n")
    (folder / "tests" / "test.sh").write_text(
        '#!/bin/bash\nif [ "$(cat /app/answer.txt 2>/dev/null)" = 42 ]; then echo 1; else echo 0; fi'
        " > /logs/verifier/reward.txt\n"
    )
    for script in (folder / "solution" / "solve.sh", folder / "tests" / "test.sh"):
        script.chmod(0o755)
    return folder


class Harbor:
    def __init__(self, python: Path, tmp: Path, label: str) -> None:
        self.env = {
            **with_harness(python),
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",
            "HARNESS_RUN_ID": label,
            "COLUMNS": "400",
        }
        self.bin = python.parent / "harbor"
        self.tmp, self.label, self.state = tmp, label, tmp / "state"

    def args(self, task: Path, agent: str, job: str) -> list[str]:
        return [
            str(self.bin), "run", "-p", str(task), "-a", agent, "-e", ENVIRONMENT, "-o", str(self.tmp / "jobs"),
            "--job-name", job, "-n", "1", "-y", "--ek", f"state_dir={self.state}", "--ek", f"run_id={self.label}",
        ]  # fmt: skip

    def run(self, task: Path, agent: str, job: str) -> tuple[subprocess.CompletedProcess, dict]:
        done = subprocess.run(self.args(task, agent, job), env=self.env, capture_output=True, text=True, timeout=900)
        results = sorted((self.tmp / "jobs" / job).glob("*/result.json"))
        return done, json.loads(results[0].read_text()) if results else {}


@pytest.fixture(scope="module")
def harbor(harbor_python: Path, tmp_path_factory, run_label: str) -> Harbor:
    return Harbor(harbor_python, tmp_path_factory.mktemp("harbor"), f"{run_label}-harbor-{uuid.uuid4().hex[:6]}")


@pytest.fixture(scope="module")
def base_image() -> str:
    listed = run_cli(["images", "list", "--json"], timeout=120)
    return next(row["ref"] for row in json.loads(listed.stdout) if row["name"] == "py311")


def _reward(result: dict) -> float | None:
    return ((result.get("verifier_result") or {}).get("rewards") or {}).get("reward")


def test_the_oracle_reaches_1_and_nop_0_each_trial_a_harness_session(harbor, base_image, docker_client):
    task = make_task(harbor.tmp / "task", base_image)
    done, oracle = harbor.run(task, "oracle", "oracle")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert _reward(oracle) == 1.0 and oracle["exception_info"] is None
    done, nop = harbor.run(task, "nop", "nop")
    assert _reward(nop) == 0.0, done.stdout[-3000:]
    sessions = sorted(p.name for p in harbor.state.iterdir() if (p / "session.json").is_file())
    assert len(sessions) == 2 and all(name.startswith("harbor-task") for name in sessions)
    diffs = {name: run_cli(["diff", name, "--state-dir", str(harbor.state)], timeout=120).stdout for name in sessions}
    assert sorted("+42" in diff for diff in diffs.values()) == [False, True], "the oracle's change, in its session"
    shown = run_cli(["session", "show", sessions[0], "--state-dir", str(harbor.state)])
    assert "upload" in shown.stdout and "/tests" in shown.stdout, "every exec and upload is a step"
    oracle_session = next(name for name, diff in diffs.items() if "+42" in diff)
    told = run_cli(["show", oracle_session, "--state-dir", str(harbor.state)])
    assert told.returncode == 0 and "exec" in told.stdout, told.stderr
    viewed = run_cli(
        ["view", oracle_session, "--state-dir", str(harbor.state), "--no-open"],
    )
    assert viewed.returncode == 0, viewed.stderr
    page = (harbor.state / oracle_session / "view.html").read_text()
    assert "solve.sh" in page and "answer.txt" in page, "the trial's calls and its diff, on harness's page"
    left = docker_client.containers.list(all=True, filters={"label": f"harness.run={harbor.label}"})
    task_images = present_images(docker_client, filters={"label": [f"harness.run={harbor.label}", "harness.kind=task"]})
    assert left == [] and task_images == [], "nothing left behind but the sessions' own step images"


def test_an_agent_that_reaches_out_is_contained(harbor, base_image):
    task = make_task(harbor.tmp / "hostile-task", base_image)
    done, result = harbor.run(task, "tests.integrations.harbor_agents:Hostile", "hostile")
    assert result and result["exception_info"] is None, done.stdout[-3000:] + done.stderr[-3000:]
    log = next((harbor.tmp / "jobs" / "hostile").glob("*/agent/hostile.log")).read_text()
    said = dict(line.split(": ", 1) for line in log.splitlines())
    assert said["network"].startswith("exit 1") and "unreachable" in said["network"].lower(), said
    assert said["name"].startswith("exit 1"), said
    assert said["passwd"].startswith("exit 1") and "denied" in said["passwd"].lower(), said
    assert said["root_home"].startswith("exit 1"), said
    assert said["whoami"] == "exit 0: 10001", "root is never given, whatever the agent asks"


def test_one_report_compares_harbor_jobs_and_a_harness_batch(harbor, tmp_path):
    """Run after the trials above: their jobs beside a harness batch in one report, md, json and html
    (a trial whose agent wrote an ATIF trajectory links to it, rendered)."""
    jobs = harbor.tmp / "jobs"
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text(
        f"tasks:\n  - id: calc\n    repo: {ROOT / 'examples' / 'calc'}\n    task: Fix the failing tests in calc.\n"
        "    verify: python3 -m pytest -q\n"
    )
    env = {**os.environ, "HARNESS_RUN_ID": harbor.label, "HARNESS_STATE_DIR": str(tmp_path / "state")}
    ran = run_cli(["batch", str(tasks), "--out", str(tmp_path / "batch"), "--model",
         f"scripted:{ROOT / 'examples' / 'calc-fix.yaml'}", "--workers", "1"], timeout=600, env=env,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    dirs = [str(tmp_path / "batch"), str(jobs / "oracle"), str(jobs / "nop"), str(jobs / "hostile")]
    done = run_cli(["report", *dirs, "--format", "json"], env=env)
    assert done.returncode == 0, done.stderr
    figures = [entry["overall"] for entry in json.loads(done.stdout)]
    assert [f["completion_rate"] for f in figures] == [1.0, 1.0, 0.0, 0.0]
    models = [list(entry["by_model"]) for entry in json.loads(done.stdout)]
    assert models[1] == ["harbor:oracle"] and models[2] == ["harbor:nop"] and models[0][0].startswith("scripted:")
    page = tmp_path / "report.html"
    done = run_cli(["report", *dirs, "--format", "html", "-o", str(page)])
    assert done.returncode == 0, done.stderr
    html = page.read_text()
    assert "harbor:oracle" in html and "harbor:hostile" in html and "trajectory.html" in html
    rendered = next((jobs / "hostile").glob("*/agent/trajectory.html")).read_text()
    assert "try network" in rendered and "unreachable" in rendered.lower()
    bad = run_cli(["report", str(tmp_path)])
    assert bad.returncode == 66 and "no Harbor job directory" in bad.stderr


def test_a_task_allowlist_is_the_sessions_egress_allowlist(harbor, base_image):
    """allowed_hosts = ["127.0.0.1"]: the agent reaches a server there (any port: Harbor names hosts
    only) through the session's egress proxy, and nothing else."""
    import http.server
    import threading

    class Hello(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"hello from the allowed host"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        task = make_task(
            harbor.tmp / "allow-task", base_image,
            network='network_mode = "allowlist"\nallowed_hosts = ["127.0.0.1"]\n',
        )  # fmt: skip
        (task / "instruction.md").write_text(f"Fetch http://127.0.0.1:{server.server_address[1]}/\n")
        done, result = harbor.run(task, "tests.integrations.harbor_agents:Fetcher", "allow")
        assert result and result["exception_info"] is None, done.stdout[-3000:] + done.stderr[-3000:]
    finally:
        server.shutdown()
    log = next((harbor.tmp / "jobs" / "allow").glob("*/agent/fetch.log")).read_text()
    assert "allowed: hello from the allowed host" in log, log
    assert "other: refused:" in log and "hello" not in log.split("other:")[1], log


def test_what_cannot_map_is_refused_in_one_line(harbor, base_image):
    composed = make_task(harbor.tmp / "compose-task", base_image, compose=True)
    done, result = harbor.run(composed, "oracle", "compose")
    said = done.stdout + done.stderr + json.dumps(result)
    assert "runs one container per exec and no compose services" in said
    missing = make_task(harbor.tmp / "missing-task", "registry.invalid/nothing:1")
    done, result = harbor.run(missing, "oracle", "missing")
    said = done.stdout + done.stderr + json.dumps(result)
    assert "needs registry.invalid/nothing:1, which this engine does not have, and harness never pulls" in said


def test_a_killed_trial_leaves_nothing_after_prune(harbor, base_image, docker_client):
    task = make_task(harbor.tmp / "sleep-task", base_image)
    process = subprocess.Popen(
        harbor.args(task, "tests.integrations.harbor_agents:Sleeper", "killed"),
        env=harbor.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        running = []
        while time.monotonic() < deadline and not running:
            running = [
                c
                for c in docker_client.containers.list(filters={"label": f"harness.run={harbor.label}"})
                if "sleep 300" in _processes(c)
            ]
            time.sleep(0.5)
        assert running, "the sleeper's exec never started"
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    pruned = run_cli(["sandbox", "prune", "--state-dir", str(harbor.state)], timeout=300)
    assert pruned.returncode == 0, pruned.stderr
    assert docker_client.containers.list(all=True, filters={"label": f"harness.run={harbor.label}"}) == []
    task_images = present_images(docker_client, filters={"label": [f"harness.run={harbor.label}", "harness.kind=task"]})
    assert task_images == [], "its task image too"


def _processes(container) -> str:
    """The command lines running in a container ("" once it is gone)."""
    try:
        return " ".join(" ".join(row) for row in container.top().get("Processes") or [])
    except Exception:  # noqa: BLE001 - a container that ended between the list and the look
        return ""


def test_an_image_archive_is_imported_and_a_bad_one_refused(tmp_path, docker_client, run_label):
    """What `harness images import` does for a task whose FROM the engine lacks (harness never pulls)."""
    import io
    import tarfile

    layer = tmp_path / "layer.tar"
    with tarfile.open(layer, "w") as archive:
        info = tarfile.TarInfo("hello.txt")
        info.size = 6
        archive.addfile(info, io.BytesIO(b"hello\n"))
    tag = f"harness-test/tiny:{run_label.lower()}"
    docker_client.api.import_image_from_file(str(layer), repository=tag.split(":")[0], tag=tag.split(":")[1])
    saved = tmp_path / "tiny.tar"
    with open(saved, "wb") as handle:
        for chunk in docker_client.images.get(tag).save(named=True):
            handle.write(chunk)
    docker_client.images.remove(tag, force=True)
    try:
        done = run_cli(["images", "import", str(saved)], timeout=120)
        assert done.returncode == 0 and f"imported {tag}" in done.stdout, done.stderr
        assert docker_client.images.get(tag)
    finally:
        docker_client.images.remove(tag, force=True)
    bad = run_cli(["images", "import", str(layer.parent / "nothing.tar")])
    assert bad.returncode == 66 and "no image archive at" in bad.stderr
    (tmp_path / "junk.tar").write_bytes(b"not a tar")
    junk = run_cli(["images", "import", str(tmp_path / "junk.tar")])
    assert junk.returncode != 0 and "is not an image archive" in junk.stderr and "Traceback" not in junk.stderr
