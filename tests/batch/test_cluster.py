"""The same batch on a cluster: a Dask scheduler and `harness worker` processes on 127.0.0.1, the
batch pointed at it with --cluster. A worker process killed mid-task: Dask reruns its task on
another and every task-run is recorded once."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.batch.records import BatchDir
from tests.batch.test_batch_run import _batch, _result, _tasks

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(600)]
BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _workers(address: str) -> int:
    from distributed import Client

    with Client(address, timeout="10s") as client:
        return len(client.scheduler_info()["workers"])


@pytest.fixture
def cluster(run_label):
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = {**os.environ, "HARNESS_RUN_ID": run_label}
    scheduler = subprocess.Popen(
        [str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=env,
    )
    worker = subprocess.Popen(
        [str(BIN / "harness"), "worker", address, "--sessions", "2", "--host", "127.0.0.1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
        env=env,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if _workers(address) == 2:
                    break
            except OSError:
                pass
            time.sleep(0.5)
        else:
            pytest.fail(f"the cluster did not come up: {worker.stderr.read().decode() if worker.stderr else ''}")
        yield address, worker
    finally:
        for process in (worker, scheduler):
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=30)


def test_a_batch_on_a_cluster_of_harness_workers(cluster, tmp_path, run_label):
    address, _ = cluster
    tasks = _tasks(tmp_path, 4)
    done = _batch(str(tasks), "--out", str(tmp_path / "out"), "--cluster", address, label=run_label)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _result(done)["ran"] == 4
    assert sorted(r.key.task_id for r in BatchDir(tmp_path / "out").records()) == sorted(
        ["t0-verified", "t1-failing", "t2-blocked", "t3-verified"]
    )


def test_a_worker_killed_mid_task_loses_nothing(cluster, tmp_path, run_label):
    import psutil

    address, worker = cluster
    tasks = _tasks(tmp_path, 4)
    batch = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from harness.cli import main; main()",
            "batch",
            str(tasks),
            "--out",
            str(tmp_path / "out"),
            "--cluster",
            address,
            "--json",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HARNESS_RUN_ID": run_label},
    )
    sessions = tmp_path / "out" / "sessions"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (sessions.is_dir() and any(sessions.iterdir())):
        time.sleep(0.1)
    # a worker process (not the nanny that restarts it) dies with its session mid-way
    victims = []
    for process in psutil.Process(worker.pid).children(recursive=True):
        try:  # a short-lived child may be gone between the listing and the look at it
            if "python" in process.name() and not process.children():
                victims.append(process)
        except psutil.NoSuchProcess:
            continue
    assert victims, "no worker process to kill"
    victims[0].kill()
    out, err = batch.communicate(timeout=400)
    assert batch.returncode == 0, out + err
    records = BatchDir(tmp_path / "out").records()
    assert len(records) == 4 and all(r.status == "done" for r in records), [(r.key.task_id, r.status) for r in records]
