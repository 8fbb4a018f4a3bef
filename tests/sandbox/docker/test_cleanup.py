"""Labelled leftovers are found and removed; containers of a live controller are left alone."""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys

import docker
import pytest

from sandbox.docker.ids import present_images
from sandbox.docker.images import current_ref
from sandbox.docker.prune import find_containers, orphaned, remove_containers

pytestmark = pytest.mark.docker


def test_orphans_are_told_apart_from_live_runs(docker_client, run_label, sandbox_image, test_label) -> None:
    # The "dead" controller is alive while the containers are made and listed, and ended after: a
    # prune another test runs meanwhile (`harness sandbox prune`, every run's leftovers) leaves them be.
    controller = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    ref = current_ref(docker_client, sandbox_image)
    made = []
    try:
        for pid in (controller.pid, os.getpid()):
            labels = {"harness.run": run_label, "harness.pid": str(pid), **test_label}
            made.append(docker_client.containers.create(ref, ["true"], labels=labels, network_mode="none"))
        found = find_containers(docker_client, test_label)
        assert {c.id for c in found} == {c.id for c in made}
        assert not any(orphaned(c) for c in found), "both controllers are alive"
    finally:
        controller.kill()
        controller.wait()
    orphans = [c for c in found if orphaned(c)]
    assert [c.labels["harness.pid"] for c in orphans] == [str(controller.pid)]
    assert remove_containers(docker_client, orphans) == 1
    assert [c.labels["harness.pid"] for c in find_containers(docker_client, test_label)] == [str(os.getpid())]
    assert remove_containers(docker_client, find_containers(docker_client, test_label)) == 1
    assert find_containers(docker_client, test_label) == []


def test_a_container_a_dead_controller_made_after_the_listing_goes_with_the_same_prune(
    docker_client, run_label, sandbox_image, test_label, monkeypatch
) -> None:
    """A create the controller sent just before it was killed can complete after prune listed the
    containers (over TCP, through a relay): the prune lists again and removes it too."""
    from sandbox.docker import prune as pruning

    # Labelled with this live process, and taken for a dead one's by this prune only: a prune another
    # test runs meanwhile (every run's leftovers) would otherwise take one of them and the count here.
    ref = current_ref(docker_client, sandbox_image)
    labels = {"harness.run": run_label, "harness.pid": str(os.getpid()), **test_label}
    docker_client.containers.create(ref, ["true"], labels=labels, network_mode="none")
    listed, judged = pruning.find_containers, pruning.orphaned
    late: list[str] = []

    def listing_then_a_late_create(client, wanted):
        found = listed(client, wanted)
        if not late:  # the dead controller's in-flight create lands just after the first listing
            late.append(docker_client.containers.create(ref, ["true"], labels=labels, network_mode="none").id)
        return found

    monkeypatch.setattr(pruning, "find_containers", listing_then_a_late_create)
    monkeypatch.setattr(pruning, "orphaned", lambda c: set(test_label.items()) <= c.labels.items() or judged(c))
    assert pruning.prune(docker_client, run_id=run_label, extra=test_label) == 2
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
    assert not present_images(docker_client, name="harness-session/fork1")


def test_images_prune_removes_the_cache_nothing_names_or_uses(docker_client, run_label, sandbox_image, tmp_path):
    """`harness images prune`: a cached image no session names and no container uses goes (a build
    stage after the image built on it, every tag of it); one a session's record names stays, and one a
    container uses; `--dry-run` removes nothing; a session record that cannot be read stops it all."""
    import io
    import json
    import uuid

    from sandbox import labels

    label = f"{run_label}-cache"  # this test's images only: the prune is told --run (others' caches stay)
    base = current_ref(docker_client, sandbox_image)

    def cached(kind: str, tags: tuple[str, ...] = (), start: str = base) -> str:
        text = f"FROM {start}\nLABEL test.unique={uuid.uuid4().hex}\n".encode()
        marks = {labels.KIND: kind, labels.RUN: label, labels.IMAGE: "devcontainer"}
        image, _ = docker_client.images.build(fileobj=io.BytesIO(text), labels=marks, rm=True, pull=False)
        for tag in tags:
            image.tag(*tag.rsplit(":", 1))  # Podman takes no tag inside the repository name
        return image.id

    token = uuid.uuid4().hex[:12]
    stage = cached(
        "devcontainer-build", (f"harness/devcontainer-build:{token}a", f"harness/devcontainer-build:{token}b")
    )
    on_stage = cached("devcontainer", (f"harness/devcontainer:{token}",), start=stage)
    named, used, loose = cached("setup"), cached("setup"), cached("setup")
    holder = docker_client.containers.create(  # a live run's (no other test's prune takes it for an orphan)
        used, ["true"], labels={labels.RUN: run_label, labels.PID: str(os.getpid())}, network_mode="none"
    )
    state = tmp_path / "state"
    (state / "s1").mkdir(parents=True)
    (state / "s1" / "session.json").write_text(json.dumps({"setup": {"image": named, "cached": True}}))
    cli = [sys.executable, "-c", "from harness.cli import main; main()", "images", "prune", "--state-dir", str(state)]
    cli += ["--run", label]

    def prune(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*cli, *extra], capture_output=True, text=True, timeout=120)

    try:
        seen = prune("--dry-run", "--json")
        assert seen.returncode == 0, seen.stderr
        said = json.loads(seen.stdout)
        short = lambda image_id: image_id.removeprefix("sha256:")[:12]  # noqa: E731
        assert said["dry_run"] and said["named"] == [short(named)] and said["in_use"] == [short(used)]
        removed = said["removed"]  # with the build's intermediate images, untagged (they carry its labels)
        assert f"harness/devcontainer:{token}" in removed and short(loose) in removed
        assert {f"harness/devcontainer-build:{token}{end}" for end in "ab"} & set(removed), (
            "the stage goes once the image on it goes (by one of its tags)"
        )
        assert said["freed_bytes"] == 0, "a dry run frees nothing"
        assert all(docker_client.images.get(i) for i in (stage, on_stage, loose)), "a dry run removes nothing"

        mistyped = prune("--state-dir", str(tmp_path / "no-such-state"))
        assert mistyped.returncode == 66 and "no-such-state: no such folder" in mistyped.stderr, mistyped.stderr
        damaged = tmp_path / "damaged"
        (damaged / "s2").mkdir(parents=True)
        (damaged / "s2" / "run.json").write_text('{"image": "harness/devcon')
        refused = prune("--state-dir", str(damaged))
        assert refused.returncode != 0 and f"cannot read {damaged / 's2' / 'run.json'}" in refused.stderr
        assert "nothing was removed" in refused.stderr and "Traceback" not in refused.stderr
        assert docker_client.images.get(loose), "nothing was removed"

        done = prune()
        assert done.returncode == 0, done.stderr
        assert f"removed {len(removed)} cached image(s)" in done.stdout, done.stdout
        assert "kept 1 a session names, 1 in use" in done.stdout
        present = {
            image.id for image in present_images(docker_client, all=True, filters={"label": f"{labels.RUN}={label}"})
        }
        assert present == {named, used}, "every tag of the stage went with it"
        from sandbox.docker.engine import resolve_image
        from sandbox.errors import ImageNotFound

        with pytest.raises(ImageNotFound, match=r"a cache image .* is gone from the engine; a new run makes it again"):
            resolve_image(docker_client, loose)  # what a session naming it would be told
    finally:
        holder.remove(force=True)


def test_a_prune_removes_a_dead_controllers_volumes_that_no_container_uses(
    docker_client, run_label, sandbox_image, test_label, monkeypatch
) -> None:
    """An engine that takes archives gives a call's container anonymous volumes, removed with it; a
    removal that failed midway leaves them, labelled like their container: a prune takes those whose
    controller is gone, never one a container still uses."""
    from sandbox.docker import prune as pruning

    marks = {"harness.run": run_label, "harness.pid": str(os.getpid()), **test_label}  # (see the test above)
    judged = pruning.orphaned_labels
    monkeypatch.setattr(
        pruning, "orphaned_labels", lambda found: set(test_label.items()) <= found.items() or judged(found)
    )
    left = docker_client.volumes.create(labels=marks)
    used = docker_client.volumes.create(labels=marks)
    user = docker_client.containers.create(
        current_ref(docker_client, sandbox_image), ["true"], network_mode="none", volumes={used.name: {"bind": "/v"}}
    )
    try:
        pruning.prune(docker_client, run_id=run_label, extra=test_label)
        names = {
            v.name for v in docker_client.volumes.list(filters={"label": f"harness.test={test_label['harness.test']}"})
        }
        assert left.name not in names and names == {used.name}, "the unused one went; the one a container uses stays"
    finally:
        user.remove(force=True)
        used.remove(force=True)


def test_images_of_a_state_directory_deleted_from_this_machine_go_with_any_prune(
    docker_client, run_label, sandbox_image, tmp_path
) -> None:
    """A session's step images whose state directory was a temporary folder, deleted since, are
    leftovers of `harness sandbox prune` whatever state directory it is given, once their maker is
    provably gone; those of a state directory gone from elsewhere (deleted, or on a drive not mounted
    now) are named with the prune that removes them, and stay until it runs. An image another machine
    made (its state directory is that machine's), one whose maker lives, and one whose state
    directory is still here stay."""
    import io
    import uuid

    from sandbox import labels
    from sandbox.process import boot, identity

    maker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    dead = identity(maker.pid)
    maker.kill()
    maker.wait()
    gone_state, given, kept_state = tmp_path / "deleted-state", tmp_path / "state", tmp_path / "another-state"
    unmounted = f"/harness-test-{uuid.uuid4().hex[:8]}/state"  # not a temporary folder, and not there
    given.mkdir()
    kept_state.mkdir()
    ref = current_ref(docker_client, sandbox_image)
    cases = {
        "stranded": (gone_state, maker.pid, dead),
        "unmounted": (unmounted, maker.pid, dead),
        "elsewhere": (gone_state, maker.pid, f"{dead.split('@')[0]}@{boot()}@another-machine/4026531836"),
        "maker-lives": (gone_state, os.getpid(), identity()),
        "state-kept": (kept_state, maker.pid, dead),
    }
    made: dict[str, str] = {}
    cli = [sys.executable, "-c", "from harness.cli import main; main()", "sandbox", "prune", "--state-dir"]

    def left() -> set[str]:
        return {image.id for image in present_images(docker_client, filters={"label": f"harness.run={run_label}"})}

    try:
        for name, (state, pid, ident) in cases.items():
            marks = {
                labels.SESSION: f"s-{name}",
                labels.STATE: str(state),
                labels.PID: str(pid),
                labels.OWNER: ident,
                labels.KIND: "step",
                "harness.run": run_label,
            }
            dockerfile = f"FROM {ref}\nRUN true\n".encode()
            image, _ = docker_client.images.build(fileobj=io.BytesIO(dockerfile), labels=marks, rm=True, pull=False)
            made[name] = image.id
        done = subprocess.run([*cli, str(given)], capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert f"removed session leftover {made['stranded']}\n" in done.stdout, done.stdout
        # (Podman's build leaves intermediate images with the same labels: more than one may be counted)
        assert re.search(
            rf"^kept \d+ step image\(s\) of {unmounted}, a state directory not there now \(deleted, or on a drive "
            rf"not mounted\): `harness sandbox prune --state-dir {unmounted}` removes them$",
            done.stdout,
            re.MULTILINE,
        ), done.stdout
        assert made["stranded"] not in left()
        assert {made[name] for name in ("unmounted", "elsewhere", "maker-lives", "state-kept")} <= left()
        named = subprocess.run([*cli, unmounted], capture_output=True, text=True, timeout=120)
        assert named.returncode == 0 and f"removed session leftover {made['unmounted']}\n" in named.stdout
        assert made["unmounted"] not in left() and {made["elsewhere"], made["state-kept"]} <= left()
    finally:
        for image_id in made.values():
            with contextlib.suppress(docker.errors.APIError):
                docker_client.images.remove(image_id, force=True)
