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
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml
from distributed.diagnostics.plugin import WorkerPlugin

from harness.batch.records import BatchDir
from tests.batch.test_batch_run import EXAMPLE, FIX, _batch, _result, _tasks

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


def hiding(folder: Path) -> list[str]:
    """A worker command line's prefix that runs it in a mount namespace of its own with a tmpfs over
    folder: it sees none of what the client keeps there, as on another machine."""
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", 'mount -t tmpfs -o size=1m hide "$0" && exec "$@"', str(folder)]  # fmt: skip


@contextmanager
def serving(run_label: str, *, wrap: list[str] | None = None, extra: list[str] | None = None):
    """A scheduler and one `harness worker --sessions 2` (its command line prefixed by wrap)."""
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
        [
            *(wrap or []),
            str(BIN / "harness"),
            "worker",
            address,
            "--sessions",
            "2",
            "--host",
            "127.0.0.1",
            *(extra or []),
        ],
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


@pytest.fixture
def cluster(run_label):
    with serving(run_label) as running:
        yield running


def test_a_batch_on_a_cluster_of_harness_workers(cluster, tmp_path, run_label):
    address, _ = cluster
    tasks = _tasks(tmp_path, 4)
    done = _batch(str(tasks), "--out", str(tmp_path / "out"), "--cluster", address, label=run_label)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _result(done)["ran"] == 4
    assert sorted(r.key.task_id for r in BatchDir(tmp_path / "out").records()) == sorted(
        ["t0-verified", "t1-failing", "t2-blocked", "t3-verified"]
    )
    # the workers see the batch directory: repositories used in place, nothing fetched
    assert {r.repo_source for r in BatchDir(tmp_path / "out").records()} == {"in_place"}


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


def test_a_worker_that_does_not_see_the_batch_gets_the_repository_once_and_sends_each_session_back(tmp_path, run_label):
    """The worker runs in its own mount namespace with a tmpfs over the client's folder: it cannot see
    the repository, the model's script, the tasks file or the batch directory, as on another machine."""
    import shutil

    from harness.batch.shipping import LEFT_BEHIND
    from sandbox.tree import copy_tree

    client_side, store = tmp_path / "client", tmp_path / "worker-store"
    copy_tree(EXAMPLE, client_side / "calc")
    shutil.copy(FIX, client_side / "fix.yaml")
    tasks = [
        {"id": f"t{n}", "repo": str(client_side / "calc"), "task": "Fix the failing tests in calc."} for n in range(4)
    ]
    spec = {
        "defaults": {"verify": "python3 -m pytest -q", "model": [f"scripted:{client_side / 'fix.yaml'}"]},
        "tasks": tasks,
    }
    (client_side / "tasks.yaml").write_text(yaml.safe_dump(spec))
    out = client_side / "out"
    with serving(run_label, wrap=hiding(client_side), extra=["--store", str(store)]) as (address, _):
        first = _batch(str(client_side / "tasks.yaml"), "--out", str(out), "--cluster", address, label=run_label)
        again = _batch(str(client_side / "tasks.yaml"), "--out", str(out), "--cluster", address, label=run_label)
    assert first.returncode == 0, first.stdout + first.stderr
    assert _result(first)["ran"] == 4 and _result(first)["verified"] == 4
    assert again.returncode == 0 and _result(again)["ran"] == 0, "the same command again does nothing"
    records = BatchDir(out).records()
    assert sorted(r.repo_source for r in records) == ["cached", "cached", "cached", "fetched"], "shipped once"
    assert [p.name for p in (store / "repos").iterdir() if not p.name.startswith(".")] != []
    assert len([p for p in (store / "repos").iterdir() if p.is_dir() and not p.name.startswith(".")]) == 1
    batch_id = (out / "batch-id").read_text().strip()
    for record in records:
        back = Path(record.session_dir)
        assert back.parent == (out / "sessions").resolve() and (back / "trajectory.jsonl").is_file()
        assert record.patch and "return a + b" in record.patch
        assert not any((back / name).exists() for name in LEFT_BEHIND), "workspace and snapshots stay on the worker"
        host, _, there = record.worker_session.partition(":")
        assert (
            host == socket.gethostname() and Path(there) == store.resolve() / "sessions" / batch_id / record.session_id
        )
        assert (Path(there) / "steps.jsonl").is_file() and not (Path(there) / "workspace").exists()
        assert (store / "objects" / "git").is_dir(), "its snapshots, in the worker store's shared objects"
        assert (store / "sessions" / batch_id / ".objects").resolve() == (store / "objects").resolve()
    shown = subprocess.run(
        [str(BIN / "harness"), "show", records[0].session_id, "--state-dir", str(out / "sessions")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0 and "apply_patch" in shown.stdout, shown.stdout + shown.stderr


class _Store(WorkerPlugin):
    """Sets every worker's store, those the nanny restarts included."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def setup(self, worker) -> None:
        from harness.batch import shipping

        shipping.use_store(self.path)


def test_a_shipment_lost_with_its_worker_is_reported_and_shipped_again_it_runs(tmp_path, run_label):
    """The worker holding a scattered repository is killed before anyone fetched it: the task-run
    says `shipment_lost` (the client queues it again), and once shipped again it runs. The probe
    names a file no worker can read, so these local workers act as if on another machine."""
    from distributed import Client, LocalCluster

    from harness.batch import shipping
    from harness.batch.records import TaskRunKey
    from harness.batch.tasks import load_tasks
    from harness.batch.worker import TaskRunSpec, run_task

    tasks_file = tmp_path / "tasks.yaml"
    model = f"scripted:{FIX}"
    tasks_file.write_text(
        yaml.safe_dump(
            {
                "defaults": {"verify": "python3 -m pytest -q"},
                "tasks": [{"id": "t0", "repo": str(EXAMPLE), "task": "Fix calc."}],
            }
        )
    )
    loaded = load_tasks(tasks_file)
    plugin = _Store(tmp_path / "store")
    with (
        LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None, silence_logs=50
        ) as local,
        Client(local) as client,
    ):
        client.register_plugin(plugin)
        shipper = shipping.Shipper(client)

        def spec() -> TaskRunSpec:
            return TaskRunSpec(
                key=TaskRunKey(task_id="t0", model=model, run_index=0),
                task=loaded.tasks[0],
                defaults=loaded.defaults,
                sessions=tmp_path / "out" / "sessions",
                run_id=run_label,
                batch_id="0" * 32,
                probe=tmp_path / "no-worker-sees-this",
                files=shipper.files([FIX]),
            )

        shipped = shipper.repo(EXAMPLE)
        (holder,) = client.who_has()[shipped.key]
        os.kill(client.run(os.getpid, workers=[holder])[holder], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and client.who_has().get(shipped.key):
            time.sleep(0.2)
        lost = client.submit(run_task, spec(), shipped, pure=False).result(timeout=120)
        assert lost.record.attempts[-1].outcome == "shipment_lost" and lost.session_files is None
        shipper.lost(EXAMPLE)
        again = shipper.repo(EXAMPLE)
        assert again.key != shipped.key and again.digest == shipped.digest
        done = client.submit(run_task, spec(), again, pure=False).result(timeout=300)
    assert done.record.verified and done.record.repo_source == "fetched", done.record
    assert done.session_files is not None
