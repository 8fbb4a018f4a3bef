"""Which engine answers the Docker API, from its own answers (the shapes Podman 4.3 and Docker send):
Podman names itself among /version's components; a rootless engine says so in /info's security
options. `harness doctor` prints both."""

from __future__ import annotations

from sandbox.docker.engine import engine_kind

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
