"""Long-lived containers a session keeps beside its calls: an MCP server whose stdio the host side
speaks to. Same posture as a call container (capabilities dropped, no-new-privileges, the sandbox
user, read-only root, limits, no network unless the egress relay is given), the workspace mounted
read-only unless the declaration says it may write, stdin kept open for the protocol, labelled
with the session so `harness sandbox prune` finds what a dead controller left.

On an engine that cannot take this machine's folders (another machine's, or rootless) nothing is
bound: the workspace is a copy in the container's own volume (`sandbox.docker.copies`), sent before
it starts and brought up to date around each use (`Started.around`), and egress goes through the
engine (`sandbox.docker.tunnel`) for as long as the container runs."""

from __future__ import annotations

import contextlib
import ipaddress
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import docker
import requests

from sandbox import labels as labels_of
from sandbox.docker import copies, hardening, transfer, tunnel
from sandbox.docker.call import exit_code_of
from sandbox.docker.engine import engine_kind, located, resolve_image_path, translate
from sandbox.docker.ids import object_id, remove_container
from sandbox.errors import SandboxError, SetupError, SpecError
from sandbox.spec import Mount, SandboxSpec


@dataclass
class Started:
    """A long-lived container as started: its id, what each use of it runs inside (on an engine
    elsewhere: its workspace copy brought up to date), and what ends with it (the egress tunnel)."""

    cid: str
    around: Callable[[], contextlib.AbstractContextManager[None]] = contextlib.nullcontext
    ends: contextlib.ExitStack = field(default_factory=contextlib.ExitStack)


def start_server(
    client: docker.DockerClient,
    spec: SandboxSpec,
    argv: Sequence[str],
    workspace: Path,
    *,
    user: str,
    labels: dict[str, str],
    writable: bool = False,
    environment: dict[str, str] | None = None,
) -> Started:
    """Start argv in a hardened container that keeps stdin open."""
    return _start_long_lived(
        client, spec, workspace, user=user, labels=labels, environment=environment, writable=writable,
        log_size="1m", what="an MCP server container", command=list(argv), stdin_open=True,
    )  # fmt: skip


def start_agent(
    client: docker.DockerClient,
    spec: SandboxSpec,
    argv: Sequence[str],
    workspace: Path,
    *,
    user: str,
    labels: dict[str, str],
    environment: dict[str, str],
    mounts: Sequence[Mount],
    relay: tuple[int, str],
) -> Started:
    """A hosted agent's container: argv (its ACP agent on stdio, stdin kept open) in the call posture
    on the workspace, writable (the agent edits it with its own tools, each edit asking harness first),
    with mounts, and with no way out but 127.0.0.1:PORT, which a relay carries to the socket at PATH (the endpoint's: relay is (PORT, PATH)).
    Not on an engine elsewhere: the endpoint's socket is this machine's."""
    _, why = located(client)
    if why is not None:
        raise SpecError(
            f"a hosted agent needs the engine on this machine ({why}): the endpoint it reaches is a socket here"
        )
    port, path = relay
    command = ["/bin/sh", "-c", f'python3 {hardening.RELAY_TARGET} {port} {path} && exec "$@"', "sh", *argv]
    return _start_long_lived(
        client, spec, workspace, user=user, labels=labels, environment=environment, writable=True,
        log_size="1m", what="a hosted agent's container", command=command, stdin_open=True,
        mounts=[*mounts, Mount(source=hardening.relay_source(), target=hardening.RELAY_TARGET)],
    )  # fmt: skip


def _start_long_lived(
    client: docker.DockerClient,
    spec: SandboxSpec,
    workspace: Path,
    *,
    user: str,
    labels: dict[str, str],
    environment: dict[str, str] | None,
    writable: bool,
    log_size: str,
    what: str,
    networking: dict | None = None,
    network: str | None = None,
    tmpfs: dict[str, str] | None = None,
    host_settings: dict[str, Any] | None = None,
    mounts: Sequence[Mount] = (),
    **settings: object,
) -> Started:
    """A container in the call posture (hardening.container_config) that outlives one call: the
    workspace read-only unless writable, its output kept by the engine (json-file, log_size), the
    given settings (command, stdin) over the config; started, or removed if it cannot start."""
    _, why = located(client)  # elsewhere: a copy of the workspace there, nothing bound
    image_id, path = resolve_image_path(client, spec.image)
    elsewhere = why is not None
    config = hardening.container_config(image_id, spec, workspace, mounts, user, labels, path=path, tunnel=elsewhere)
    host = dict(config["host_config"])
    host["log_config"] = {"type": "json-file", "config": {"max-size": log_size, "max-file": "1"}}
    host["tmpfs"] = {**host.get("tmpfs", {}), **(tmpfs or {})}
    if network is not None:
        host["network_mode"] = network
    host.update(host_settings or {})
    if not elsewhere:
        binds = dict(host["binds"])
        workspace_bind = str(Path(workspace).resolve())
        binds[workspace_bind] = {**binds[workspace_bind], "mode": "rw" if writable else "ro"}
        host["binds"] = binds
        command = settings.get("command")
        if spec.egress and isinstance(command, list):
            settings = {**settings, "command": hardening.with_relay(command, trust=hardening.has_ca(spec.egress))}
    config.update(settings, host_config=host)
    if not elsewhere:  # without network, as a call's: a namespace the runtime makes
        config = hardening.own_namespace(config)
    config["environment"] = {**config["environment"], **(environment or {})}
    layout: dict[str, list[transfer.Part]] = {}
    if elsewhere:
        config, layout = _unbound(client, config, spec, workspace, user, writable)
    api = client.api
    with translate(f"creating {what}"):
        made = api.create_container(
            **{**config, "host_config": api.create_host_config(**config["host_config"])},
            networking_config=networking, detach=True,
        )  # fmt: skip
    started = Started(str(made["Id"]))
    try:
        if elsewhere:
            copy = copies.WorkspaceCopy(api, started.cid, workspace, spec.workdir, user, writable=writable)
            with translate(f"sending the workspace to {what} on the engine"):
                copy.send_all(layout)
            started.around = copy.around
        with translate(f"starting {what}"):
            api.start(started.cid)
        if elsewhere:
            with translate(f"making the workspace's links in {what}"):
                copy.make_links()
            if spec.egress:
                started.ends.enter_context(tunnel.carried(api, started.cid, user, Path(spec.egress)))
    except BaseException:
        stop_server(client, started)
        raise
    return started


def _unbound(
    client: docker.DockerClient,
    config: dict,
    spec: SandboxSpec,
    workspace: Path,
    user: str,
    writable: bool,
) -> tuple[dict, dict[str, list[transfer.Part]]]:
    """config for an engine elsewhere (volumes where the binds were, from the image derived for the
    copy's owner: the user for a writable one, root for a read-only one), and what goes into each
    volume (the egress tunnel's end and the session's CAs beside the workspace)."""
    mounts = hardening.tunnel_mounts(spec.egress) if spec.egress else []
    config, layout = transfer.unbound(config, spec, workspace, mounts)
    layout[spec.workdir] = [transfer.Part(part.rel, part.source, writable) for part in layout[spec.workdir]]
    owner = user if writable else "0:0"
    marks = {**config["labels"], labels_of.KIND: "remote-image"}  # its helper container's (prune finds it)
    with translate(f"preparing image {config['image'][:19]} for an engine on another machine"):
        image = transfer.derived_image(client.api, config["image"], spec.workdir, owner, marks)
    return {**config, "image": image}, layout


def stop_server(client: docker.DockerClient, started: Started) -> None:
    """Remove the container (and end what ended with it first: its tunnel)."""
    with contextlib.suppress(Exception):
        started.ends.close()
    with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
        remove_container(client.api, started.cid)


def running(client: docker.DockerClient, cid: str) -> bool:
    try:
        return bool(client.api.inspect_container(cid)["State"]["Running"])
    except docker.errors.NotFound:
        return False


def exit_status(client: docker.DockerClient, cid: str) -> int | None:
    """The exit status of a container that stopped (None: running, gone, or not said)."""
    try:
        state = client.api.inspect_container(cid)["State"]
    except docker.errors.APIError:
        return None
    code = state.get("ExitCode")
    return code if isinstance(code, int) and not state.get("Running") else None


def server_logs(client: docker.DockerClient, cid: str, tail: int = 200, stdout: bool = False) -> str:
    """What the server wrote to stderr (an MCP server's stdout is the protocol; a service's is its log too)."""
    try:
        data = client.api.logs(cid, stdout=stdout, stderr=True, tail=tail)
    except docker.errors.APIError:
        return ""
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)


__all__ = ["Started", "exit_status", "object_id", "running", "server_logs", "start_server", "stop_server"]


# --- services: a session's long-lived helpers on a network with no route out ---------------------------


INHIBIT = "com.docker.network.bridge.inhibit_ipv4"
"""The bridge option that keeps a network's bridge without an address on the host."""


@dataclass(frozen=True)
class ServicesNetwork:
    """A session's services network as made: its name, whether the engine is Podman (IPv6 stays on
    there: `joining`), and, where the engine resolves no names on it (rootful Podman's), each
    service's address, kept in the hosts file of every container that joins it."""

    name: str
    podman: bool = False
    addresses: dict[str, str] = field(default_factory=dict)

    def joining(self) -> dict[str, Any]:
        """The host settings of every container on the network (each service and each call): on
        Podman no IPv6 on its interface (`NO_IPV6`: its link-local address would reach the bridge's
        own, and every listener bound to `::` where the bridge lives); the services' names where
        the engine answers none."""
        settings: dict[str, Any] = {"sysctls": dict(NO_IPV6)} if self.podman else {}
        if self.addresses:
            settings["extra_hosts"] = dict(self.addresses)
        return settings

    def endpoint(self, api: docker.APIClient, service: str) -> Any:
        """How the service joins the network: by its name where the engine answers names, at its
        own address otherwise."""
        if self.addresses:
            return api.create_endpoint_config(ipv4_address=self.addresses[service])
        return api.create_endpoint_config(aliases=[service])


def create_network(
    client: docker.DockerClient, name: str, labels: dict[str, str], services: Sequence[str] = ()
) -> ServicesNetwork:
    """An internal network (no route out) for a session's services and calls, whose bridge has no
    address on the host (an internal bridge otherwise holds the gateway's address, and a call reached
    every host listener bound to 0.0.0.0 through it), or is not on this machine's network at all (a
    rootless engine's).

    Docker keeps a bridge without an address for `INHIBIT`. Podman keeps no such option; a rootful
    Podman's network is made without a gateway instead (`_without_gateway`), which means without
    its name server too: the services are given addresses of their own, and every container on the
    network finds them by name in its hosts file."""
    product, rootless = _engine(client)
    podman = product == "Podman"
    with translate("creating the services network"):
        if podman and not rootless:
            return _without_gateway(client, name, labels, services)
        network = client.networks.create(name, driver="bridge", internal=True, labels=labels, options={INHIBIT: "true"})
        network.reload()
        if (network.attrs.get("Options") or {}).get(INHIBIT) != "true" and not rootless:
            network.remove()
            raise SandboxError(
                f"this engine gives a services network's bridge an address on this machine (it does not keep "
                f"{INHIBIT}): a call would reach every listener of this machine through it; services need "
                "Docker or Podman"
            )
        return ServicesNetwork(name, podman)


LIBPOD_NETWORKS = "/v4.0.0/libpod/networks/create"
"""Podman's own API for a network (the Docker-compatible one always gives a bridge network a
gateway): on the same socket, since Podman 4.0."""


def _without_gateway(
    client: docker.DockerClient, name: str, labels: dict[str, str], services: Sequence[str]
) -> ServicesNetwork:
    """A rootful Podman's internal network with no gateway, so its bridge holds no address on this
    machine, and no name server (which would listen on the gateway); each service an address from
    the top of its subnet (the engine gives the calls theirs from the bottom)."""
    api = client.api
    body = {
        "name": name, "driver": "bridge", "internal": True, "dns_enabled": False, "ipv6_enabled": False,
        "labels": labels, "options": {"isolate": "true"},
    }  # fmt: skip
    response = api.post(f"{api.base_url}{LIBPOD_NETWORKS}", json=body, timeout=60)
    try:
        response.raise_for_status()
    except requests.exceptions.HTTPError as error:
        docker.errors.create_api_error_from_http_exception(error)  # (it raises the engine's error)
    try:
        made = response.json()
    except ValueError:
        made = None
    try:
        return ServicesNetwork(name, True, allot(gatewayless_subnet(made), services))
    except BaseException:
        remove_network(client, name)
        raise


def gatewayless_subnet(made: object) -> str:
    """The one subnet of Podman's answer to making a network without a gateway; SandboxError for any
    other answer (several subnets, or a gateway after all: the bridge would hold its address here)."""
    subnets = made.get("subnets") if isinstance(made, dict) else None
    if not isinstance(subnets, list) or len(subnets) != 1 or not isinstance(subnets[0], dict):
        raise SandboxError(f"the engine made the services network with subnets {subnets!r:.200}; one was asked for")
    if subnets[0].get("gateway"):
        raise SandboxError(
            f"the engine gave the services network a gateway ({subnets[0]['gateway']!r:.60}) where none was asked "
            "for: its bridge would hold that address on this machine, and a call would reach every listener here"
        )
    return str(subnets[0].get("subnet"))


def allot(subnet: str, services: Sequence[str]) -> dict[str, str]:
    """Each service an address of subnet, from its top down (away from those the engine hands
    out from the bottom); SandboxError for a subnet that is not one or holds too few."""
    try:
        network = ipaddress.ip_network(subnet, strict=True)
    except ValueError as error:
        raise SandboxError(f"the services network's subnet {subnet!r:.80} is not one: {error}") from None
    if network.version != 4:
        raise SandboxError(f"the services network's subnet {subnet} is not IPv4 (its hosts files name IPv4 addresses)")
    if network.num_addresses < len(services) + 8:
        raise SandboxError(
            f"the services network's subnet {subnet} holds too few addresses for {len(services)} services"
        )
    top = int(network.broadcast_address) - 1
    return {service: str(ipaddress.IPv4Address(top - index)) for index, service in enumerate(services)}


NO_IPV6 = {"net.ipv6.conf.eth0.disable_ipv6": "1"}
"""IPv6 off on a container's interface to a services network (Podman sets the interface up before
the container starts; loopback keeps ::1). Docker turns it off itself."""


def _engine(client: docker.DockerClient) -> tuple[str, bool]:
    """The engine's product and whether it runs rootless (its bridges then live in its user's own
    network namespace, Podman's rootless-netns, where nothing of this machine listens: a bridge's
    address there reaches no listener here)."""
    with translate("reading the engine's version"):
        return engine_kind(client.version(), client.info())


def remove_network(client: docker.DockerClient, name: str, attempts: int = 20) -> None:
    """Remove the network, disconnecting what is still attached; retried for a few seconds, since a
    call container the engine is still removing keeps its endpoint a moment (then prune finds it)."""
    for _ in range(attempts):
        try:
            network = client.networks.get(name)
            for container in network.containers:
                with contextlib.suppress(docker.errors.APIError):
                    network.disconnect(container, force=True)
            network.remove()
            return
        except docker.errors.NotFound:
            return
        except docker.errors.APIError:
            time.sleep(0.25)


def start_service(
    client: docker.DockerClient,
    spec: SandboxSpec,
    argv: Sequence[str] | None,
    workspace: Path,
    *,
    name: str,
    network: ServicesNetwork,
    user: str,
    labels: dict[str, str],
    environment: dict[str, str] | None = None,
    tmpfs: Sequence[str] = (),
) -> Started:
    """A service's container: the call posture (no capabilities, no-new-privileges, the limits, a
    read-only root with a fresh /tmp, the workspace read-only), on network, reachable there by name,
    with what every container joining it gets (`ServicesNetwork.joining`); each tmpfs path a fresh writable tmpfs
    bounded like /tmp (a database's data directory)."""
    api = client.api
    networking = api.create_networking_config({network.name: network.endpoint(api, name)})  # type: ignore[arg-type]
    uid, gid = user_ids(client, spec, user, labels)
    if uid == 0:  # decided on the number the engine runs as, not on how the user was spelled
        raise SetupError(
            f"the {name} service's user {user!r} is uid 0 (root) in {spec.image}: a service never runs as root"
        )
    return _start_long_lived(
        client, spec, workspace, user=f"{uid}:{gid}", labels=labels, environment=environment, writable=False,
        log_size="2m", what=f"the {name} service", networking=networking, network=network.name,
        command=list(argv) if argv else None, host_settings=network.joining(),
        tmpfs=_owned_tmpfs(spec, uid, gid, tmpfs, podman=network.podman),
    )  # fmt: skip


def _owned_tmpfs(spec: SandboxSpec, uid: int, gid: int, paths: Sequence[str], podman: bool = False) -> dict[str, str]:
    """Each path a tmpfs owned by uid:gid (the engine gives a tmpfs over an image's directory that
    directory's owner and mode, so a data directory of root's would stay unwritable). Podman refuses
    `uid=`/`gid=` there and takes `U` instead: owned by the container's user, the service's uid:gid."""
    owner = "U" if podman else f"uid={uid},gid={gid}"
    return {path: f"rw,nosuid,nodev,noexec,size={spec.tmpfs},{owner},mode=0755" for path in paths}


def user_ids(client: docker.DockerClient, spec: SandboxSpec, user: str, labels: dict[str, str]) -> tuple[int, int]:
    """The uid and gid the engine runs user as in spec.image: numbers parsed as the engine parses
    them (`00`, `+0` and `-0` are 0), a name asked of the image itself (its /etc/passwd decides)."""
    found = re.fullmatch(r"\s*([+-]?\d+)\s*(?::\s*([+-]?\d+)\s*)?", user)
    if found:
        uid = int(found.group(1))
        gid = int(found.group(2)) if found.group(2) else uid
        if uid < 0 or gid < 0:
            raise SetupError(f"user {user!r}: a uid and gid are not negative")
        return uid, gid
    image_id, _ = resolve_image_path(client, spec.image)  # (a missing image is named, never pulled)
    api = client.api
    said = b""
    with translate(f"finding the uid of {user} in {spec.image}"):  # asked of the image itself, as that user
        host = api.create_host_config(
            network_mode="none", cap_drop=["ALL"], read_only=True, security_opt=["no-new-privileges"]
        )
        cid = api.create_container(image_id, entrypoint=["id"], user=user, labels=labels, host_config=host)["Id"]
        try:
            try:
                api.start(cid)
            except docker.errors.APIError as error:  # a user the image does not know fails the start
                said = str(error.explanation or error).encode()
            else:
                api.wait(cid, timeout=60)
                said = api.logs(cid, stdout=True, stderr=True)
        finally:  # v: the anonymous volume of each VOLUME the image declares (a database's data)
            remove_container(api, cid)
    ids = re.search(rb"uid=(\d+).*?gid=(\d+)", said if isinstance(said, bytes) else b"")
    if ids is None:
        words = said.decode("utf-8", "replace").strip()[:200] if isinstance(said, bytes) else ""
        raise SetupError(f"cannot tell the uid of user {user} in {spec.image}: {words or 'id said nothing'}")
    return int(ids.group(1)), int(ids.group(2))


def exec_in(client: docker.DockerClient, cid: str, argv: Sequence[str], timeout_s: float = 10.0) -> int:
    """Run argv in a running container (a health check); its exit code (-1 when it could not run)."""
    try:
        made = client.api.exec_create(cid, ["timeout", f"{timeout_s:g}s", *argv])
        client.api.exec_start(made["Id"])
        code = exit_code_of(client.api, made["Id"])
    except docker.errors.APIError:
        return -1
    return int(code) if code is not None else -1
