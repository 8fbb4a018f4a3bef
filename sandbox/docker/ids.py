"""The id of an object the engine returned (the SDK types it as optional, the engine always sets it),
and images listed without tripping over one removed meanwhile."""

from __future__ import annotations

from typing import Any

import docker
from docker.models.images import Image
from docker.models.resource import Model

from sandbox.errors import SandboxError


def object_id(obj: Model) -> str:
    """obj.id, or SandboxError when the engine answered with an object that has none."""
    if not obj.id:
        raise SandboxError("the engine returned an object without an id; check it with `harness doctor`")
    return obj.id


def remove_container(api: Any, cid: str, tries: int = 10) -> None:
    """Kill and remove a container, again while the engine says it is still stopping it (Podman
    answers 500 "could not be stopped" to a forced removal of a container whose process is exiting;
    Docker 409 while a removal is in progress). A container already gone is removed; any other error
    is raised."""
    import time

    for attempt in range(tries):
        try:
            api.remove_container(cid, force=True)
            return
        except docker.errors.NotFound:
            return
        except docker.errors.APIError as error:
            said = str(error.explanation or error)
            if error.status_code == 409 or "already in progress" in said:  # the engine is removing it already
                return
            if "could not be stopped" not in said or attempt == tries - 1:
                raise
            time.sleep(0.1 * (attempt + 1))


def present_images(client: docker.DockerClient, **query: Any) -> list[Image]:
    """`client.images.list(**query)` without its race: the SDK lists the ids, then inspects each, and
    an image another process removes in between (a test, a prune) made the whole listing fail."""
    found = []
    for summary in client.api.images(name=query.get("name"), all=query.get("all", False), filters=query.get("filters")):
        try:
            found.append(client.images.get(summary["Id"]))
        except docker.errors.ImageNotFound:
            continue
    return found
