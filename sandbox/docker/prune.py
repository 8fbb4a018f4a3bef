"""Find and remove what runs and sessions leave behind on the engine and in the state directory.

Every container we create carries `harness.run` and `harness.pid` (the controller's pid). By
default only containers whose controller is gone are removed, so a prune never pulls the rug from a
live run; `everything=True` removes all containers labelled `harness.run`.

Session images carry `harness.session` and `harness.state` (the state directory: session ids are
unique only within one directory, so a prune or an `rm` in one directory never touches another's
images). Setup images (`harness.kind=setup`) are a cache shared by sessions of the same
repository; they are removed only when asked for (`setup_cache=True`). Folders of creates that
never finished (no session.json) are leftovers too.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import docker
import requests
from docker.models.containers import Container
from docker.models.images import Image
from pydantic import BaseModel, Field

from sandbox import labels
from sandbox.docker.engine import translate
from sandbox.docker.ids import object_id, present_containers, present_images, remove_container, unqualified
from sandbox.layout import SessionFolder
from sandbox.tree import remove_tree

UNFINISHED_AFTER_S = 3600.0
"""A session folder without session.json this old is a crashed create, not one in progress."""


def find_containers(client: docker.DockerClient, wanted: Mapping[str, str | None]) -> list[Container]:
    """Containers (running or not) carrying every label; a None value matches any value."""
    filters = [k if v is None else f"{k}={v}" for k, v in wanted.items()]
    with translate("listing containers"):
        return present_containers(client, filters={"label": filters})


def remove_containers(client: docker.DockerClient, containers: list[Container]) -> int:
    """Kill and remove each container; those already gone are not counted."""
    removed = 0
    for container in containers:
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError, requests.exceptions.RequestException):
            remove_container(client.api, object_id(container))
            removed += 1
    return removed


def orphaned(container: Container) -> bool:
    """True when the controller process that labelled this container is no longer alive (a zombie
    counts as gone: a killed detached process whose new parent does not reap it stays one)."""
    return orphaned_labels(container.labels)


def orphaned_labels(marks: dict[str, str]) -> bool:
    """orphaned() on an object's labels (a network's, an image's)."""
    pid = (marks or {}).get(labels.PID, "")
    if not pid.isdigit():
        return True
    import psutil  # here: a session imports this module, and only a prune asks

    try:
        return psutil.Process(int(pid)).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:  # not ours to inspect: alive as far as we can tell
        return False


def prune(
    client: docker.DockerClient,
    *,
    everything: bool = False,
    run_id: str | None = None,
    extra: Mapping[str, str] | None = None,
) -> int:
    """Remove leftover harness containers: orphaned ones, or with everything=True all of them;
    with run_id only those of that run, with extra labels only those carrying them too."""
    found = find_containers(client, {labels.RUN: run_id, **(extra or {})})
    doomed = found if everything else [c for c in found if orphaned(c)]
    # network-namespace holders last: Podman refuses to remove one that containers still join
    doomed.sort(key=lambda c: (c.labels or {}).get(labels.KIND) == "netns")
    removed = remove_containers(client, doomed)
    if not extra:
        remove_task_images(client, run_id, everything)
        remove_service_networks(client, run_id, everything)
    return removed


def remove_service_networks(client: docker.DockerClient, run_id: str | None, everything: bool) -> int:
    """Services networks whose session's controller is gone (after their containers went); how many."""
    with translate("listing networks"):
        networks = client.networks.list(filters={"label": _kind_of_run("service", run_id)})
    doomed = [n for n in networks if everything or orphaned_labels(n.attrs.get("Labels") or {})]
    return _removed([n.remove for n in doomed])


def remove_task_images(client: docker.DockerClient, run_id: str | None, everything: bool) -> int:
    """Images built for another framework's task (a Harbor trial) whose builder is gone; how many."""
    with translate("listing task images"):
        images = present_images(client, filters={"label": _kind_of_run("task", run_id)})
    refs = [ref for i in images if everything or orphaned_labels(i.labels) for ref in i.tags or [str(i.id)]]
    return _removed([functools.partial(client.images.remove, ref, force=True) for ref in refs])


def _kind_of_run(kind: str, run_id: str | None) -> list[str]:
    return [f"{labels.KIND}={kind}", *([f"{labels.RUN}={run_id}"] if run_id else [])]


def _removed(removals: list[Callable[[], object]]) -> int:
    """Run each removal; those the engine refuses or finds gone are not counted."""
    removed = 0
    for remove in removals:
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
            remove()
            removed += 1
    return removed


def prune_session(client: docker.DockerClient, session_id: str, state_dir: Path) -> int:
    """Remove what a crashed controller of this session left running (warm containers, its network
    namespace holder); containers of a live controller are never touched."""
    return prune(client, extra=labels.of_session(session_id, str(Path(state_dir).resolve())))


class SessionLeftovers(BaseModel):
    """What a prune would remove."""

    images: list[str] = Field(default_factory=list)
    """Image ids labelled with a session id that no longer exists (plus setup cache when asked)."""
    folders: list[Path] = Field(default_factory=list)
    """Session folders whose create never finished."""


def session_images(
    client: docker.DockerClient, session_id: str | None = None, state_dir: Path | None = None
) -> list[Image]:
    """Images labelled harness.session (=session_id when given); with state_dir, only those of that
    directory (images made before the state label existed have none and still match)."""
    label = labels.SESSION if session_id is None else f"{labels.SESSION}={session_id}"
    with translate("listing session images"):
        found: list[Image] = present_images(client, all=True, filters={"label": label})
    if state_dir is None:
        return found
    where = str(Path(state_dir).resolve())
    return [image for image in found if image.labels.get(labels.STATE, where) == where]


def find_session_leftovers(
    client: docker.DockerClient | None, state_dir: Path, *, setup_cache: bool = False
) -> SessionLeftovers:
    """Images of sessions of state_dir whose folder is gone, and folders of creates that never finished.

    Only images labelled with this state directory count: an image of another directory's session
    (or one without the label) is never called a leftover here."""
    state_dir = Path(state_dir)
    leftovers = SessionLeftovers()
    # a session id never starts with a dot: dot-folders are the state directory's own (shared caches)
    folders = (
        [SessionFolder(p) for p in sorted(state_dir.iterdir()) if p.is_dir() and not p.name.startswith(".")]
        if state_dir.is_dir()
        else []
    )
    now = time.time()
    for folder in folders:
        if not folder.info.exists() and now - folder.root.stat().st_mtime > UNFINISHED_AFTER_S:
            leftovers.folders.append(folder.root)
    if client is not None:
        live = {folder.root.name for folder in folders if folder.info.exists()}
        where = str(state_dir.resolve())
        for image in session_images(client):
            gone = image.labels.get(labels.SESSION) not in live
            if image.labels.get(labels.STATE) == where and gone and not _held_by_others(image, None):
                leftovers.images.append(object_id(image))
        if setup_cache:
            with translate("listing setup images"):
                setup = present_images(client, all=True, filters={"label": f"{labels.KIND}=setup"})
            leftovers.images += [object_id(image) for image in setup]
    return leftovers


def remove_image(client: docker.DockerClient, image_id: str) -> bool:
    """Remove an image with all its tags; False when it is gone or still used by a container."""
    with contextlib.suppress(docker.errors.APIError, requests.exceptions.RequestException):
        client.api.remove_image(image_id, force=True, noprune=False)
        return True
    return False


def remove_session_images(client: docker.DockerClient, session_id: str, state_dir: Path | None = None) -> int:
    """Remove every image of this session (newest first, so parents go last); an image a fork of it
    also holds (tagged for the fork) only loses this session's tags."""
    with translate("listing session images"):
        tagged: list[Image] = present_images(client, name=f"harness-session/{session_id.lower()}")
    unique = {object_id(image): image for image in [*session_images(client, session_id, state_dir), *tagged]}
    found = sorted(unique.values(), key=lambda i: i.attrs.get("Created", ""), reverse=True)
    removed = 0
    for image in found:
        if _held_by_others(image, session_id):
            for tag in _tags_of(image, session_id):
                with contextlib.suppress(docker.errors.APIError, requests.exceptions.RequestException):
                    client.api.remove_image(tag, noprune=True)
        else:
            removed += remove_image(client, object_id(image))
    return removed


def _tags_of(image: Image, session_id: str | None) -> list[str]:
    """The image's `harness-session/<id>:step-N` tags (of session_id, or of any session), as the engine
    spells them: Podman qualifies a name it was given (`docker.io/harness-session/...`)."""
    prefix = "harness-session/" if session_id is None else f"harness-session/{session_id.lower()}:"
    return [tag for tag in image.tags if unqualified(tag).startswith(prefix)]


def _held_by_others(image: Image, session_id: str | None) -> bool:
    """The image is also a step image of another session than session_id (default: the one its
    labels name), such as a fork's or its parent's."""
    own = _tags_of(image, session_id or image.labels.get(labels.SESSION, ""))
    return len(_tags_of(image, None)) > len(own)


def remove_leftovers(client: docker.DockerClient | None, leftovers: SessionLeftovers) -> list[str]:
    """Remove what find_session_leftovers found; returns what was removed (folders, image ids)."""
    removed: list[str] = []
    for folder in leftovers.folders:
        remove_tree(folder, ignore_errors=True)
        removed.append(str(folder))
    if client is not None:
        # Newest first would need the dates; a parent that still has a child fails now and is
        # found again (childless) by the next prune.
        removed += [image_id for image_id in leftovers.images if remove_image(client, image_id)]
    return removed
