"""Labelled leftovers are found and removed; containers of a live controller are left alone."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sandbox.docker.images import current_ref
from sandbox.docker.prune import find_containers, orphaned, remove_containers

pytestmark = pytest.mark.docker


def test_orphans_are_told_apart_from_live_runs(docker_client, run_label, sandbox_image, test_label) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    ref = current_ref(docker_client, sandbox_image)
    made = []
    for pid in (dead.stdout.strip(), str(__import__("os").getpid())):
        labels = {"harness.run": run_label, "harness.pid": pid, **test_label}
        made.append(docker_client.containers.create(ref, ["true"], labels=labels, network_mode="none"))
    found = find_containers(docker_client, test_label)
    assert {c.id for c in found} == {c.id for c in made}
    orphans = [c for c in found if orphaned(c)]
    assert [c.labels["harness.pid"] for c in orphans] == [dead.stdout.strip()]
    assert remove_containers(docker_client, orphans) == 1
    assert [c.labels["harness.pid"] for c in find_containers(docker_client, test_label)] == [
        str(__import__("os").getpid())
    ]
    assert remove_containers(docker_client, find_containers(docker_client, test_label)) == 1
    assert find_containers(docker_client, test_label) == []


def test_a_zombie_controller_counts_as_gone() -> None:
    """A SIGKILLed detached controller (the warm service) whose new parent does not reap it stays a
    zombie: its containers are leftovers all the same, and a live process's are not."""
    import os
    import time
    from types import SimpleNamespace

    from sandbox import labels

    child = os.fork()
    if child == 0:
        os._exit(0)
    try:
        time.sleep(0.2)  # exited, not yet reaped: a zombie
        assert orphaned(SimpleNamespace(labels={labels.PID: str(child)}))  # type: ignore[arg-type]
        assert not orphaned(SimpleNamespace(labels={labels.PID: str(os.getpid())}))  # type: ignore[arg-type]
        assert orphaned(SimpleNamespace(labels={}))  # type: ignore[arg-type]
    finally:
        os.waitpid(child, 0)
