"""Find and remove labelled leftovers of crashed runs.

Every container we create carries `harness.run` and `harness.pid` (the controller's pid). By
default only containers whose controller is gone are removed, so a prune never pulls the rug from a
live run; `everything=True` removes all containers labelled `harness.run`.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Mapping

import docker
import psutil
import requests
from docker.models.containers import Container

from sandbox.docker import translate
from sandbox.session import SESSION_LABEL, STATE_LABEL


def find_containers(client: docker.DockerClient, labels: Mapping[str, str | None]) -> list[Container]:
    """Containers (running or not) carrying every label; a None value matches any value."""
    filters = [k if v is None else f"{k}={v}" for k, v in labels.items()]
    with translate("listing containers"):
        return client.containers.list(all=True, filters={"label": filters}, ignore_removed=True)


def remove_containers(client: docker.DockerClient, containers: list[Container]) -> int:
    """Kill and remove each container; those already gone are not counted."""
    removed = 0
    for container in containers:
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError, requests.exceptions.RequestException):
            client.api.remove_container(container.id, force=True)
            removed += 1
    return removed


def orphaned(container: Container) -> bool:
    """True when the controller process that labelled this container is no longer alive."""
    pid = container.labels.get("harness.pid", "")
    return not (pid.isdigit() and psutil.pid_exists(int(pid)))


def prune(client: docker.DockerClient, *, everything: bool = False, run_id: str | None = None,
          labels: Mapping[str, str] | None = None) -> int:
    """Remove leftover harness containers: orphaned ones, or with everything=True all of them;
    with run_id only those of that run, with labels only those carrying them too."""
    found = find_containers(client, {"harness.run": run_id, **(labels or {})})
    doomed = found if everything else [c for c in found if orphaned(c)]
    return remove_containers(client, doomed)


def prune_session(client: docker.DockerClient, session_id: str, state_dir: Path) -> int:
    """Remove what a crashed controller of this session left running (warm containers, its network
    namespace holder); containers of a live controller are never touched."""
    return prune(client, labels={SESSION_LABEL: session_id, STATE_LABEL: str(Path(state_dir).resolve())})
