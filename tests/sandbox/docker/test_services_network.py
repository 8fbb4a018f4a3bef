"""A session's services network as each engine makes it. Docker keeps the bridge without an address
on this machine (`inhibit_ipv4`); a rootless engine's bridge is in its user's own namespace; a rootful
Podman keeps no such option, so its network is made without a gateway (its bridge then holds no
address here, and the engine answers no names there): each service an address of its own, every
container on the network told the names in its hosts file. The engine test runs on whichever engine
the suite runs on (`make test`, `make test-podman`, `make test-podman-rootful`); a firewall that drops
what such a bridge carries is tested in tests/tools/test_services.py."""

from __future__ import annotations

import ipaddress
import uuid

import pytest

from harness.config import RunConfig
from sandbox.docker import servers
from sandbox.docker.engine import engine_kind
from sandbox.errors import SandboxError


def test_services_are_given_addresses_from_the_top_of_the_subnet():
    assert servers.allot("10.89.3.0/24", ["web", "db"]) == {"web": "10.89.3.254", "db": "10.89.3.253"}
    assert servers.allot("10.89.3.0/24", []) == {}
    with pytest.raises(SandboxError, match="is not one"):
        servers.allot("10.89.3.7/24", ["web"])  # host bits set: not a subnet
    with pytest.raises(SandboxError, match="is not one"):
        servers.allot("None", ["web"])
    with pytest.raises(SandboxError, match="not IPv4"):
        servers.allot("fd00::/64", ["web"])
    with pytest.raises(SandboxError, match="too few"):
        servers.allot("10.0.0.0/29", ["a"])


@pytest.mark.parametrize(
    ("answer", "said"),
    [
        ({"subnets": [{"subnet": "10.89.0.0/24", "gateway": "10.89.0.1"}]}, "gateway .'10.89.0.1'."),
        ({"subnets": [{"subnet": "10.89.0.0/24"}, {"subnet": "10.89.1.0/24"}]}, "one was asked for"),
        ({"subnets": []}, "one was asked for"),
        ({"subnets": "10.89.0.0/24"}, "one was asked for"),
        ({}, "subnets None"),
        (None, "subnets None"),
        ({"subnets": [{"subnet": "10.89.0.0/24", "gateway": "\x1b[2J" + "x" * 500}]}, r"\\x1b\[2J"),
    ],
)
def test_an_answer_other_than_one_subnet_without_a_gateway_is_refused(answer, said):
    with pytest.raises(SandboxError, match=said) as refused:
        servers.gatewayless_subnet(answer)
    assert len(str(refused.value)) < 400 and "\x1b" not in str(refused.value)


def test_the_subnet_of_an_answer_without_a_gateway():
    assert servers.gatewayless_subnet({"subnets": [{"subnet": "10.89.0.0/24"}], "dns_enabled": False}) == "10.89.0.0/24"


def test_what_every_container_on_the_network_is_given():
    assert servers.ServicesNetwork("n").joining() == {}
    assert servers.ServicesNetwork("n", podman=True).joining() == {"sysctls": dict(servers.NO_IPV6)}
    named = servers.ServicesNetwork("n", podman=True, addresses={"web": "10.89.0.254"})
    assert named.joining() == {"sysctls": dict(servers.NO_IPV6), "extra_hosts": {"web": "10.89.0.254"}}


@pytest.mark.parametrize("name", ["web", "db-1", "api_v2", "cache.local", "A" * 63])
def test_a_service_name_that_is_a_host_name_is_taken(name):
    assert name in RunConfig(services={name: {"image": "py311"}}).services


@pytest.mark.parametrize("name", ["", "-web", "web db", "web:80", "web\n10.0.0.1 pypi.org", "é", "A" * 64])
def test_a_service_name_no_call_could_reach_is_refused(name):
    with pytest.raises(ValueError, match="host name"):
        RunConfig(services={name: {"image": "py311"}})


@pytest.mark.docker
def test_the_engines_services_network_keeps_no_address_of_this_machine(docker_client, run_label):
    kind, rootless = engine_kind(docker_client.version(), docker_client.info())
    name = f"harness-svc-test-{uuid.uuid4().hex[:8]}"
    made = servers.create_network(docker_client, name, {"harness.run": run_label}, ["web", "db"])
    try:
        inspected = docker_client.api.inspect_network(name)
        assert inspected["Internal"] is True
        if kind == "Podman" and not rootless:
            subnet = ipaddress.ip_network(inspected["IPAM"]["Config"][0]["Subnet"])
            assert made.addresses == {"web": str(subnet[-2]), "db": str(subnet[-3])}
            assert [c.get("Gateway") in (None, "", "<nil>") for c in inspected["IPAM"]["Config"]] == [True]
            assert made.joining()["extra_hosts"] == made.addresses
        else:
            assert made.addresses == {} and "aliases" in str(made.endpoint(docker_client.api, "web")).lower()
        assert made.podman is (kind == "Podman")
    finally:
        servers.remove_network(docker_client, name)
    assert docker_client.networks.list(names=[name]) == []
