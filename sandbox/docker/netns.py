"""One empty network namespace per session, shared by its call containers, on an engine elsewhere.

What a container start with `network_mode=none` costs the engine is mostly its network setup for
the container's new namespace (a prestart hook and the switch that turns IPv6 off, each a run of
the engine's own program), not the namespace (measured here: start 350 ms with `network_mode=none`,
145 ms when joining an existing namespace; the engine's CPU per start and removal ~475 ms against
~230 ms). On this machine's engine a call's container skips that setup and still gets a namespace
of its own (`hardening.own_namespace`: networking disabled, the runtime makes it, harness binds
/etc/hosts), for what joining costs. An engine elsewhere cannot bind that file from here, so there
a call container whose spec says `network: none` joins a *holder*: a hardened, idle container
started with `network_mode=none`, whose namespace holds only the loopback interface. The calls
still have no network at all.

What sharing gives up, and why that is acceptable: calls of one session (and only of one — the
holder is keyed by the session label) could reach each other over loopback or abstract Unix
sockets. They already share the session workspace, a far wider channel, and every call container
is killed at the end of its call, so nothing listens past it. Other runtimes (gVisor keeps its own
network stack) and other network modes never share.

A session's first container need not wait for its holder: with `first_apart` it starts in an empty
namespace of its own while the holder starts beside it (measured here: the first call of a scripted
run ready ~100 ms sooner, for one start at the higher engine CPU), and every later one joins the
holder. Batches turn it off: their throughput is bounded by the engine's CPU, not one call's wait.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import docker

from sandbox import labels
from sandbox.docker.hardening import KEEPALIVE, has_egress
from sandbox.errors import SandboxError

SHARED_RUNTIMES = ("runc",)
"""Runtimes whose containers can join another container's network namespace."""
HOLDER_HOST: dict[str, Any] = {
    "network_mode": "none",
    "cap_drop": ["ALL"],
    "security_opt": ["no-new-privileges"],
    "read_only": True,
    "mem_limit": "32m",
    "memswap_limit": "32m",
    "nano_cpus": 100_000_000,
    "pids_limit": 8,
    "log_config": {"type": "none", "config": {}},
    "init": True,
}
"""A holder runs `sleep` under docker-init and nothing else: no mounts, no capabilities, tiny limits."""


def shares(config: dict[str, Any]) -> bool:
    """True when a call with this container config joins a holder instead of getting its own namespace
    (never a container with egress: its relay, or its tunnel on an engine elsewhere, serves 127.0.0.1
    in a namespace of its own)."""
    host_config = config["host_config"]
    return (
        not config.get("network_disabled")
        and host_config.get("network_mode") == "none"
        and host_config.get("runtime", "runc") in SHARED_RUNTIMES
        and not has_egress(config)
    )


class NetnsHolders:
    """Holder containers by scope (the session label); created on first need, removed by `close`."""

    def __init__(
        self,
        api: docker.APIClient,
        translate: Callable[[str], Any],
        remove: Callable[[str], None],
        first_apart: bool = True,
    ) -> None:
        self._api, self._translate, self._remove = api, translate, remove
        self.first_apart = first_apart
        """`join_soon` lets a scope's first container start apart (sooner, at twice the engine's CPU)."""
        self._lock = threading.Lock()
        self._holders: dict[str, str] = {}
        self._starting: dict[str, threading.Thread] = {}
        """Holders being started in the background, by scope (see `join_soon`)."""

    def join(self, config: dict[str, Any]) -> dict[str, Any]:
        """config with its network mode pointed at this scope's holder (started if need be)."""
        holder = self.holder(config)
        host = {**config["host_config"], "network_mode": f"container:{holder}"}
        return {**config, "host_config": host}

    def join_soon(self, config: dict[str, Any]) -> dict[str, Any] | None:
        """Like `join`, except for the scope's first container: None, and the holder starts in the
        background meanwhile, so that container starts in a namespace of its own beside it instead
        of after it (the session's first call waits for one start, not two in a row)."""
        if not self.first_apart:
            return self.join(config)
        scope = config["labels"].get(labels.SESSION, "")
        with self._lock:
            starter = self._starting.get(scope)
            if starter is None and scope not in self._holders:
                background = threading.Thread(target=self._start_quietly, args=(scope, config), daemon=True)
                self._starting[scope] = background
                background.start()
                return None
        if starter is not None:
            starter.join()
        return self.join(config)

    def _start_quietly(self, scope: str, config: dict[str, Any]) -> None:
        try:
            self.holder(config)
        except SandboxError:
            pass  # the next join starts one in the foreground and reports what fails
        finally:
            with self._lock:
                self._starting.pop(scope, None)

    def holder(self, config: dict[str, Any]) -> str:
        scope = config["labels"].get(labels.SESSION, "")
        with self._lock:  # held while starting: concurrent first calls wait for one holder, not start two
            if scope not in self._holders:
                self._holders[scope] = self._start(config)
            return self._holders[scope]

    def discard(self, cid: str) -> None:
        """Forget (and remove) a holder that can no longer be joined; the next call starts a new one."""
        with self._lock:
            for scope, holder in list(self._holders.items()):
                if holder == cid:
                    del self._holders[scope]
        self._remove(cid)

    def close(self) -> None:
        with self._lock:
            starting = list(self._starting.values())
        for starter in starting:  # a holder still starting is removed with the rest, not left behind
            starter.join()
        with self._lock:
            holders, self._holders = list(self._holders.values()), {}
        for cid in holders:
            self._remove(cid)

    def _start(self, config: dict[str, Any]) -> str:
        holder_labels = {**config["labels"], labels.KIND: "netns"}
        with self._translate("creating the sandbox network namespace"):
            host = self._api.create_host_config(**HOLDER_HOST, runtime=config["host_config"].get("runtime"))
            cid = self._api.create_container(
                config["image"],
                list(KEEPALIVE),  # never the call stub: nothing attaches to a holder
                user=config["user"],
                labels=holder_labels,
                host_config=host,
                detach=True,
            )["Id"]
        try:
            with self._translate("starting the sandbox network namespace"):
                self._api.start(cid)
        except SandboxError:
            self._remove(cid)
            raise
        return cid


def holder_gone(error: BaseException) -> bool:
    """True for the engine's answer to joining a holder that was removed (404) or stopped (409) meanwhile
    (Podman answers 500 and says it: "looking up container to share net namespace with: no container
    with name or ID ... found", or that the container is not running)."""
    if not isinstance(error, docker.errors.APIError):
        return False
    said = str(error.explanation or "").lower()
    podman = "share net namespace" in said and ("no such container" in said or "not running" in said)
    return error.status_code in (404, 409) or podman
