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


def test_a_step_image_a_fork_holds_outlives_its_parent(docker_client, run_label, sandbox_image, tmp_path) -> None:
    """A writable-root session's step image that a fork also starts from (tagged for the fork) loses
    only the parent's tag when the parent goes, is no leftover for prune, and goes with the fork."""
    import io

    from sandbox import labels
    from sandbox.docker.ids import unqualified
    from sandbox.docker.prune import find_session_leftovers, remove_session_images
    from sandbox.docker.step_images import EngineStepImages

    state = (tmp_path / "state").resolve()
    state.mkdir()
    dockerfile = f"FROM {current_ref(docker_client, sandbox_image)}\nRUN true\n".encode()
    marks = {labels.SESSION: "parent1", labels.STATE: str(state), "harness.run": run_label, labels.KIND: "step"}
    image, _ = docker_client.images.build(fileobj=io.BytesIO(dockerfile), labels=marks, rm=True, pull=False)
    steps = EngineStepImages(docker_client)
    steps.keep("parent1", 3, image.id)
    steps.keep("fork1", 3, image.id)  # what Session.fork does for the fork's copy of the parent's steps
    remove_session_images(docker_client, "parent1", state)
    kept = docker_client.images.get(image.id)
    assert [unqualified(tag) for tag in kept.tags] == ["harness-session/fork1:step-3"], kept.tags
    assert image.id not in find_session_leftovers(docker_client, state).images, "the fork holds it"
    assert remove_session_images(docker_client, "fork1") == 1
    assert not docker_client.images.list(name="harness-session/fork1")
