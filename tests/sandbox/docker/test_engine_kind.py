"""Which engine answers the Docker API, from its own answers (the shapes Podman 4.3 and Docker send):
Podman names itself among /version's components; a rootless engine says so in /info's security
options. `harness doctor` prints both."""

from __future__ import annotations

import pytest

from sandbox.docker.engine import another_machine, elsewhere, engine_kind, remote_reason, unenforced_limits

PODMAN_VERSION = {
    "Components": [
        {"Name": "Podman Engine", "Version": "4.3.1", "Details": {"APIVersion": "4.3.1"}},
        {"Name": "Conmon", "Version": "conmon version 2.1.6"},
        {"Name": "OCI Runtime (runc)", "Version": "runc version 1.1.5"},
    ],
    "Version": "4.3.1",
    "ApiVersion": "1.41",
}
DOCKER_VERSION = {
    "Components": [{"Name": "Engine", "Version": "27.5.1"}, {"Name": "containerd"}, {"Name": "runc"}],
    "Version": "27.5.1",
    "ApiVersion": "1.47",
}


def test_podman_and_docker_rootful_and_rootless_are_told_apart():
    assert engine_kind(PODMAN_VERSION, {"SecurityOptions": ["name=seccomp,profile=default"]}) == ("Podman", False)
    rootless = {"SecurityOptions": ["name=seccomp,profile=default", "name=rootless", "name=cgroupns"]}
    assert engine_kind(PODMAN_VERSION, rootless) == ("Podman", True)
    assert engine_kind(DOCKER_VERSION, {"SecurityOptions": ["name=seccomp,profile=builtin"]}) == ("Docker", False)
    assert engine_kind(DOCKER_VERSION, rootless) == ("Docker", True)
    assert engine_kind({}, {}) == ("Docker", False), "an engine that says nothing is taken as Docker"
    assert engine_kind({"Components": "junk"}, {"SecurityOptions": None}) == ("Docker", False)


@pytest.mark.parametrize(
    ("base_url", "engine_host", "remote"),
    [
        ("http+docker://localhost", "builder", False),  # a local socket: this machine (or a VM sharing its files)
        ("http+docker://localnpipe", "desktop", False),
        ("http+docker://ssh", "here", True),
        ("ssh://user@build-host", "here", True),
        ("http://127.0.0.1:2375", "here", False),  # a second daemon on this machine: the same files
        ("http://127.0.0.1:2375", "dind-7f3a", True),  # a daemon in a container: its own files
        ("https://build-host:2376", "build-host", True),
        ("tcp://192.0.2.5:2375", "", False),  # says no name: nothing to tell it apart by
    ],
)
def test_an_engine_on_another_machine_is_told_by_its_address_and_its_host_name(base_url, engine_host, remote):
    assert (remote_reason(base_url, engine_host, "here") is not None) is remote


def test_limits_an_engine_says_it_cannot_set_are_named_unenforced():
    """A rootless engine on cgroup v1 (or without the controllers delegated to it) says in /info that
    it cannot limit memory, CPU or processes; the posture names those, never claims them."""
    rootless_v1 = {"MemoryLimit": False, "SwapLimit": False, "CpuCfsQuota": False, "PidsLimit": False}
    assert unenforced_limits([], "runc", rootless_v1) == ["memory", "cpus", "pids"]
    assert unenforced_limits([], "runc", {"MemoryLimit": True, "CpuCfsQuota": True, "PidsLimit": False}) == ["pids"]
    assert unenforced_limits([], "runc", {}) == [], "an engine that says nothing is taken at the spec's word"
    assert unenforced_limits(["--ignore-cgroups"], "runc", {"MemoryLimit": True}) == ["memory", "cpus", "pids"]
    podman_rootless_v1 = {"Rootless": True, "CgroupVersion": "1", "MemoryLimit": True, "CpuCfsQuota": True}
    assert unenforced_limits([], "runc", podman_rootless_v1) == ["memory", "cpus", "pids"], "it says so, and does not"
    assert engine_kind(PODMAN_VERSION, {"Rootless": True, "SecurityOptions": ["name=seccomp"]}) == ("Podman", True)


def test_a_rootless_engine_on_this_machine_gets_the_workspace_as_archives(monkeypatch):
    class Client:
        class api:
            base_url = "http+docker://localhost"

    monkeypatch.delenv("HARNESS_ENGINE_REMOTE", raising=False)
    rootless = {"Name": "here", "SecurityOptions": ["name=rootless"]}
    assert "rootless" in (elsewhere(Client(), rootless) or "")  # type: ignore[arg-type]
    assert another_machine(Client(), rootless) is None  # type: ignore[arg-type]
    assert elsewhere(Client(), {"Name": "here", "SecurityOptions": []}) is None  # type: ignore[arg-type]
    monkeypatch.setenv("HARNESS_ENGINE_REMOTE", "1")
    assert elsewhere(Client(), {"Name": "here"}) == "HARNESS_ENGINE_REMOTE=1"  # type: ignore[arg-type]


def test_what_an_engine_writes_into_a_root_is_not_a_change_and_removal_waits_for_a_stopping_container():
    import docker

    from sandbox.docker.call import rootfs_changed
    from sandbox.docker.ids import remove_container

    podman = ["/etc", "/etc/hosts", "/etc/hostname", "/etc/resolv.conf", "/run", "/run/.containerenv"]
    assert not rootfs_changed(podman, ("/tmp", "/workspace")), "Podman's own files in a writable root"
    assert rootfs_changed([*podman, "/etc/passwd"], ("/tmp", "/workspace")), "a command's change still counts"

    class Stopping:
        """An engine that answers a forced removal as Podman does while the container's process exits."""

        def __init__(self, refusals: int, said: str = "cannot remove container x as it could not be stopped") -> None:
            self.refusals, self.said, self.asked = refusals, said, 0

        def remove_container(self, cid: str, force: bool, v: bool = False) -> None:
            self.asked += 1
            if self.asked <= self.refusals:
                raise docker.errors.APIError("500 Server Error", explanation=self.said)

    engine = Stopping(2)
    remove_container(engine, "c1")
    assert engine.asked == 3, "asked again until the engine could stop it"
    other = Stopping(1, "no such volume")
    with pytest.raises(docker.errors.APIError):
        remove_container(other, "c1")
    assert other.asked == 1, "any other refusal is not retried"


def test_podmans_spellings_of_ids_and_tags_read_as_dockers():
    from sandbox.docker.ids import image_id, unqualified

    bare = "59617" + "0" * 59
    assert image_id(bare) == f"sha256:{bare}" == image_id(f"sha256:{bare}")  # Podman's commit: the bare hex
    assert image_id("not-an-id") == "not-an-id"
    assert unqualified("docker.io/harness-session/s1:step-3") == "harness-session/s1:step-3"
    assert unqualified("localhost/harness/py311:abc") == "harness/py311:abc"
    assert unqualified("harness/py311:abc") == "harness/py311:abc"
    assert unqualified("ghcr.io/x/y:1") == "ghcr.io/x/y:1"


def test_a_stale_rootless_network_namespace_is_named_with_its_fix():
    """Rootless Podman 4.3 fails every container on a network once its namespace's folder is gone (its
    slirp4netns failed once): the error says what mends it; any other engine error says only itself."""
    import docker

    from sandbox.docker.engine import translate
    from sandbox.errors import SandboxError

    said = "failed to mount runtime directory for rootless netns: no such file or directory"
    for explanation, hint in ((said, True), ("container state improper", False)):
        with pytest.raises(SandboxError) as raised, translate("starting the web service"):
            raise docker.errors.APIError("500 Server Error", explanation=explanation)
        message = str(raised.value)
        assert message.startswith(f"starting the web service: engine error ({explanation})")
        assert ("`make podman-rootless`" in message) is hint, message
