"""A call's network namespace made by the runtime (`hardening.own_namespace`), without an engine: the
config it asks for, the hosts file it binds, and what it does when that file is gone."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.docker import hardening, netns
from sandbox.spec import SandboxSpec


def _config(tmp_path: Path) -> dict:
    return hardening.container_config("sha256:x", SandboxSpec(image="py311"), tmp_path, [], "1:1", {}, stub=True)


def test_networking_disabled_and_harness_hosts_file_bound_read_only(tmp_path: Path) -> None:
    config = _config(tmp_path)
    own = hardening.own_namespace(config)
    assert own["network_disabled"] is True and own["host_config"]["network_mode"] == "none"
    assert own["host_config"]["binds"][str(hardening.hosts_source())] == {"bind": "/etc/hosts", "mode": "ro"}
    assert set(own["host_config"]["binds"]) - set(config["host_config"]["binds"]) == {str(hardening.hosts_source())}
    assert "network_disabled" not in config, "the config given is not changed"
    assert not netns.shares(own) and netns.shares(config), "its own namespace: never a holder's"
    assert hardening.config_key(own) != hardening.config_key(config), "warm containers of each kept apart"
    joined = {**config, "host_config": {**config["host_config"], "network_mode": "harness-services-x"}}
    assert hardening.own_namespace(joined) == joined, "a call on a services network keeps the engine's"


def test_the_hosts_file_names_loopback_alone() -> None:
    names = {}
    for line in hardening.hosts_source().read_text().splitlines():
        address, *aliases = line.split()
        names[address] = aliases
    assert "localhost" in names["127.0.0.1"] and "localhost" in names["::1"]
    assert all(address.startswith(("127.", "::1", "fe00:", "ff0")) for address in names), names


def test_without_the_hosts_file_the_engine_makes_the_namespace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The engine makes a missing bind source as an empty folder: /etc/hosts would be one.
    monkeypatch.setattr(hardening, "hosts_source", lambda: tmp_path / "gone.txt")
    config = _config(tmp_path)
    assert hardening.own_namespace(config) == config
