"""On this machine's engine every call's container has an empty network namespace of its own
(loopback only), made by the runtime: no holder, `localhost` resolves and answers. On an engine
elsewhere (its containers get no /etc/hosts from here; archives stand for it below) calls of one
session share one empty namespace: all but the session's first container, which starts in one of its
own while the holder starts beside it; other sessions, other runtimes and `share_netns=False` do not
share; a holder that disappears is replaced."""

from __future__ import annotations

import pytest

from sandbox.docker import netns, transfer
from sandbox.docker.containers import DockerSandbox
from sandbox.docker.engine import engine_kind
from sandbox.docker.ids import image_summaries
from sandbox.docker.prune import find_containers

pytestmark = [pytest.mark.docker, pytest.mark.timeout(180)]

NS = ["sh", "-c", "readlink /proc/self/ns/net; ls /sys/class/net"]


def _namespace(box: DockerSandbox, workspace, spec) -> tuple[str, list[str]]:
    envelope = box.run(NS, workspace=workspace, spec=spec)
    assert envelope.exit_code == 0, envelope.render()
    inode, *interfaces = envelope.stdout.split()
    return inode, interfaces


def _holders(client, test_label) -> list:
    return [c for c in find_containers(client, test_label) if c.labels["harness.kind"] == "netns"]


ELSEWHERE = {"transport": "archive"}
"""As on an engine elsewhere: what holders serve."""


def test_on_this_machines_engine_each_call_has_a_namespace_of_its_own(
    docker_client, run_label, workspace, spec, test_label
) -> None:
    import os

    serve = (
        "import socket, threading; s = socket.create_server(('localhost', 0)); port = s.getsockname()[1]; "
        "threading.Thread(target=lambda: s.accept()[0].sendall(b'hi'), daemon=True).start(); "
        "print(socket.create_connection(('localhost', port)).recv(2).decode())"
    )
    with DockerSandbox(docker_client, run_id=run_label, pool_size=2, session_id="s-own") as box:
        if box.remote:
            pytest.skip(f"the engine cannot take this machine's files ({box.remote}): holders, tested below")
        inode, interfaces = _namespace(box, workspace, spec)
        assert interfaces == ["lo"] and inode != os.readlink("/proc/self/ns/net")
        said = box.run(["python3", "-c", serve], workspace=workspace, spec=spec)
        assert said.exit_code == 0 and said.stdout.strip() == "hi", said.render()  # localhost resolves, loopback is up
        hosts = box.run(["sh", "-c", "getent ahosts localhost; echo x >> /etc/hosts"], workspace=workspace, spec=spec)
        assert "127.0.0.1" in hosts.stdout and hosts.exit_code != 0, hosts.render()  # ours, not the call's to change
        box.pool.wait_idle()
        warm = find_containers(docker_client, test_label)
        assert len(warm) == 2 and not _holders(docker_client, test_label)
        # (inode numbers come again once a namespace is freed: compare two alive side by side)
        spaces = {os.readlink(f"/proc/{c.attrs['State']['Pid']}/ns/net") for c in warm}
        assert len(spaces) == 2 and os.readlink("/proc/self/ns/net") not in spaces
        if (
            engine_kind(docker_client.version(), docker_client.info())[0] == "Docker"
        ):  # (Podman's inspect leaves it out)
            assert all(c.attrs["Config"].get("NetworkDisabled") is True for c in warm)
    assert find_containers(docker_client, test_label) == []


def test_calls_of_a_session_share_one_namespace_with_only_loopback(
    docker_client, run_label, workspace, spec, test_label
) -> None:
    with DockerSandbox(docker_client, run_id=run_label, pool_size=1, session_id="s-one", **ELSEWHERE) as box:
        _, interfaces = _namespace(box, workspace, spec)  # its own: the holder was not up yet
        assert interfaces == ["lo"]
        second, interfaces = _namespace(box, workspace, spec)
        third, _ = _namespace(box, workspace, spec)
        assert second == third and interfaces == ["lo"]
        [holder] = _holders(docker_client, test_label)
        assert holder.labels["harness.session"] == "s-one" and holder.attrs["HostConfig"]["NetworkMode"] == "none"
    assert find_containers(docker_client, test_label) == []  # close removed the holder too


def test_without_first_apart_even_the_first_call_joins_the_holder(
    docker_client, run_label, workspace, spec, test_label
) -> None:
    with DockerSandbox(
        docker_client, run_id=run_label, pool_size=0, session_id="s-batch", first_apart=False, **ELSEWHERE
    ) as box:
        first, interfaces = _namespace(box, workspace, spec)
        assert _namespace(box, workspace, spec)[0] == first and interfaces == ["lo"]
        assert len(_holders(docker_client, test_label)) == 1


def test_sessions_never_share_a_namespace(docker_client, run_label, workspace, spec, test_label) -> None:
    # Each session's first call runs apart (its namespace freed with it, so its inode number may come
    # again): compare the later calls, which are in their sessions' holders, alive side by side.
    with (
        DockerSandbox(docker_client, run_id=run_label, pool_size=0, session_id="s-a", **ELSEWHERE) as a,
        DockerSandbox(docker_client, run_id=run_label, pool_size=0, session_id="s-b", **ELSEWHERE) as b,
    ):
        for box in (a, b):
            _namespace(box, workspace, spec)
        assert _namespace(a, workspace, spec)[0] != _namespace(b, workspace, spec)[0]
    # One sandbox serving two sessions (told apart by the session label of their specs) keeps them apart too.
    with DockerSandbox(docker_client, run_id=run_label, pool_size=0, **ELSEWHERE) as shared:
        c, d = (spec.model_copy(update={"labels": {**spec.labels, "harness.session": name}}) for name in ("s-c", "s-d"))
        for scope in (c, d):
            _namespace(shared, workspace, scope)
        assert _namespace(shared, workspace, c)[0] != _namespace(shared, workspace, d)[0]
        assert _namespace(shared, workspace, c)[0] == _namespace(shared, workspace, c)[0]
        assert len(_holders(docker_client, test_label)) == 2


def test_a_removed_or_stopped_holder_is_replaced(docker_client, run_label, workspace, spec, test_label) -> None:
    # (Namespace inode numbers are reused once a namespace is freed: compare holders, not inodes.)
    with DockerSandbox(docker_client, run_id=run_label, pool_size=0, session_id="s-gone", **ELSEWHERE) as box:
        _namespace(box, workspace, spec)  # apart, the holder starting beside it
        _namespace(box, workspace, spec)  # in the holder
        [holder] = _holders(docker_client, test_label)
        box.pool.wait_idle()  # the calls' containers gone (Podman refuses to remove a holder others joined)
        holder.remove(force=True)  # the engine answers a join with 404
        assert _namespace(box, workspace, spec)[1] == ["lo"]
        [replacement] = _holders(docker_client, test_label)
        assert replacement.id != holder.id
        replacement.kill()  # stopped, not removed: the engine answers 409
        assert _namespace(box, workspace, spec)[1] == ["lo"]
        running = [h for h in _holders(docker_client, test_label) if h.status == "running"]
        assert len(running) == 1 and running[0].id != replacement.id


def test_sharing_can_be_turned_off(docker_client, run_label, workspace, spec, test_label) -> None:
    with DockerSandbox(docker_client, run_id=run_label, pool_size=1, share_netns=False, **ELSEWHERE) as box:
        assert _namespace(box, workspace, spec)[1] == ["lo"]
        box.pool.wait_idle()
        [warm] = find_containers(docker_client, test_label)
        assert warm.labels["harness.kind"] == "pool" and warm.attrs["HostConfig"]["NetworkMode"] == "none"


def test_only_runc_calls_without_network_and_a_namespace_of_their_own_share() -> None:
    assert netns.shares({"host_config": {"network_mode": "none", "runtime": "runc"}})
    assert not netns.shares({"host_config": {"network_mode": "none", "runtime": "runsc"}})
    assert not netns.shares({"host_config": {"network_mode": "bridge", "runtime": "runc"}})
    assert not netns.shares({"network_disabled": True, "host_config": {"network_mode": "none", "runtime": "runc"}})


def test_a_call_with_egress_never_shares_by_the_relay_or_through_the_engine(tmp_path) -> None:
    """Its 127.0.0.1:3128 is its own: the relay's on this machine's engine, the tunnel's on an engine
    elsewhere (where nothing is bound and only its environment says it has egress)."""
    from sandbox.docker import hardening
    from sandbox.spec import SandboxSpec

    (tmp_path / "egress").mkdir()
    spec = SandboxSpec(image="py311", egress=str(tmp_path / "egress"))
    for tunnel in (False, True):
        config = hardening.container_config("sha256:x", spec, tmp_path, [], "1:1", {}, stub=True, tunnel=tunnel)
        assert config["host_config"]["network_mode"] == "none" and not netns.shares(config), tunnel
        assert bool(config["host_config"]["binds"].get(str((tmp_path / "egress").resolve()))) is not tunnel
    plain = hardening.container_config("sha256:x", SandboxSpec(image="py311"), tmp_path, [], "1:1", {}, stub=True)
    assert netns.shares(plain)


def test_an_image_derived_for_an_engine_elsewhere_and_removed_between_calls_is_derived_again(
    docker_client, run_label, workspace, spec
) -> None:
    """The image derived for an engine elsewhere is found by label and shared by every run that needs it,
    and another run's end or a prune removes it when no container uses it: the next call derives it
    again instead of naming the image it remembered. (A working folder of its own: no other test's
    sessions share this derived image.)"""
    import uuid

    from sandbox.docker.prune import remove_image

    own = spec.model_copy(update={"workdir": f"/work-{uuid.uuid4().hex[:8]}"})

    def derived() -> list[str]:  # (by one label: Podman 4.3 lists nothing for two at once)
        listed = image_summaries(docker_client, filters={"label": transfer.READY})
        return [image["Id"] for image in listed if (image.get("Labels") or {})[transfer.READY].startswith(own.workdir)]

    with DockerSandbox(docker_client, run_id=run_label, pool_size=0, share_netns=False, **ELSEWHERE) as box:
        first = box.run(["sh", "-c", "pwd; cat hello.txt"], workspace=workspace, spec=own)
        assert (first.exit_code, first.stdout) == (0, f"{own.workdir}\nhello\n"), first.render()
        [made] = derived()
        box.pool.wait_idle()  # the call's container gone
        assert remove_image(docker_client, made), "no container uses it between calls"
        again = box.run(["sh", "-c", "pwd; cat hello.txt"], workspace=workspace, spec=own)
        assert (again.exit_code, again.stdout) == (0, f"{own.workdir}\nhello\n"), again.render()
        remade = derived()
        assert len(remade) == 1 and remade != [made]
        remove_image(docker_client, remade[0])
