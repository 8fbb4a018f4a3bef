"""The id of an object the engine returned (the SDK types it as optional, the engine always sets it),
and images and containers listed without tripping over one removed meanwhile."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import docker
from docker.models.containers import Container
from docker.models.images import Image
from docker.models.resource import Model

from sandbox.errors import SandboxError


def object_id(obj: Model) -> str:
    """obj.id, or SandboxError when the engine answered with an object that has none."""
    if not obj.id:
        raise SandboxError("the engine returned an object without an id; check it with `harness doctor`")
    return obj.id


def image_id(raw: str) -> str:
    """An image id as Docker spells it (`sha256:<hex>`): Podman's commit answers the bare hex, and a
    setup reused from the cache (read back by the engine) must name the image as the first one did."""
    bare = raw.removeprefix("sha256:")
    return f"sha256:{bare}" if len(bare) == 64 and all(c in "0123456789abcdef" for c in bare) else raw


def remove_container(api: Any, cid: str, tries: int = 10) -> None:
    """Kill and remove a container, again while the engine says it is still stopping it (Podman
    answers 500 "could not be stopped" to a forced removal of a container whose process is exiting;
    Docker 409 while a removal is in progress). A container already gone is removed; any other error
    is raised."""
    for attempt in range(tries):
        try:
            api.remove_container(cid, force=True, v=True)  # v: its anonymous volumes (an engine elsewhere)
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
    an image another process removes in between (a test, a prune) made the whole listing fail.

    Several `label` filters are asked one at a time (the first of the engine, the rest here): Podman's
    Docker-compatible API answers an image listing with two of them with nothing at all."""
    filters = dict(query.get("filters") or {})
    wanted = filters.get("label")
    rest: list[str] = []
    if isinstance(wanted, list | tuple) and len(wanted) > 1:
        filters["label"], rest = [wanted[0]], list(wanted[1:])
    found = []
    for summary in image_summaries(
        client, name=query.get("name"), all=query.get("all", False), filters=filters or None
    ):
        try:
            image = client.images.get(summary["Id"])
        except docker.errors.APIError as error:
            if said_removed(error):
                continue
            raise
        if all(labelled(image.labels or {}, condition) for condition in rest):
            found.append(image)
    return found


PODMAN_GONE = ("does not exist", "no such container", "no such image", "image not known")
"""How Podman's Docker-compatible API says an object another process removed a moment ago is gone (a 500,
where Docker answers 404)."""


def _said_gone(error: docker.errors.APIError) -> bool:
    said = str(error.explanation or error).lower()
    return any(words in said for words in PODMAN_GONE)


def said_removed(error: docker.errors.APIError) -> bool:
    """Whether error says the object asked for was removed meanwhile (Docker's 404, Podman's 500)."""
    return isinstance(error, docker.errors.NotFound) or _said_gone(error)


def image_summaries(client: docker.DockerClient, **query: Any) -> list[dict[str, Any]]:
    """The engine's image listing (`client.api.images(**query)`), asked again when an image another
    process removes while it is listed fails the whole answer (Podman 4.3: 500, "retrieving size of
    image ...: image not known", or "reading image ...: image not known"); five times at most."""
    return listed_images(client.api, **query)


def listed_images(api: docker.APIClient, **query: Any) -> list[dict[str, Any]]:
    """image_summaries for a low-level client."""
    for attempt in range(4):
        try:
            return list(api.images(**query))
        except docker.errors.APIError as error:
            if not (_said_gone(error) or "retrieving size of image" in str(error.explanation or error).lower()):
                raise
            time.sleep(0.05 * (attempt + 1))
    return list(api.images(**query))


LISTING_TRIES = 4
"""A container listing that Podman failed for a container ending meanwhile is asked this many times in all."""


def listed_containers(api: Any, filters: dict[str, Any]) -> list[dict[str, Any]]:
    """`api.containers(all=True, filters=filters)`, asked again when Podman 4.3 failed the whole listing
    for one container whose process ended meanwhile (rootless: it reads each one's cgroup, a 500 "open
    /proc/PID/cgroup: no such process") or that another process removed."""
    for attempt in range(1, LISTING_TRIES + 1):
        try:
            return list(api.containers(all=True, filters=filters))
        except docker.errors.APIError as error:
            ended = "no such process" in str(error.explanation or error).lower()
            if not (ended or _said_gone(error)) or attempt == LISTING_TRIES:
                raise
            time.sleep(0.05 * attempt)
    raise AssertionError("unreachable")


def present_containers(client: docker.DockerClient, filters: dict[str, Any]) -> list[Container]:
    """Every container (running or not) the filters match, without the listing's race: one removed
    between the listing and its inspection is left out (Docker answers 404; Podman 500, "does not
    exist in database" or "no such container"), and a listing failed by one ending is asked again."""
    found = []
    for summary in listed_containers(client.api, filters):
        try:
            found.append(client.containers.get(summary["Id"]))
        except docker.errors.APIError as error:
            if said_removed(error):
                continue
            raise
    return found


def labelled(labels: Mapping[str, str], condition: str) -> bool:
    """Whether labels meet a `label` filter's condition (`KEY` present, or `KEY=VALUE`)."""
    key, equals, value = condition.partition("=")
    return key in labels and (not equals or labels[key] == value)


def unqualified(tag: str) -> str:
    """A tag without the registry an engine put before a name it was given without one (Podman's
    Docker-compatible API tags `harness-session/x:step-1` as `docker.io/harness-session/x:step-1`)."""
    for registry in ("docker.io/", "localhost/"):
        if tag.startswith(registry):
            return tag[len(registry) :]
    return tag
