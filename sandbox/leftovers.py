"""Find and remove what sessions leave behind: their images (label `harness.session`), folders of
unfinished creates (no session.json), and images of sessions whose folder is gone.

Setup images (label `harness.kind=setup`) are a cache shared by sessions of the same repository;
they are removed only when asked for (`setup_cache=True`).
"""

from __future__ import annotations

import contextlib
import shutil
import time
from pathlib import Path

import docker
import requests
from pydantic import BaseModel, Field

from sandbox.docker import translate
from sandbox.session import STATE_LABEL

SESSION_LABEL = "harness.session"
# STATE_LABEL (set by Session.create on every container, so on every commit) names the state
# directory: session ids are unique only within one directory, so a prune or an `rm` in one
# directory never touches the images of another's (e.g. a concurrent run's).
UNFINISHED_AFTER_S = 3600.0
"""A session folder without session.json this old is a crashed create, not one in progress."""


class SessionLeftovers(BaseModel):
    """What a prune would remove."""

    images: list[str] = Field(default_factory=list)
    """Image ids labelled with a session id that no longer exists (plus setup cache when asked)."""
    folders: list[Path] = Field(default_factory=list)
    """Session folders whose create never finished."""


def session_images(client: docker.DockerClient, session_id: str | None = None,
                   state_dir: Path | None = None) -> list[docker.models.images.Image]:
    """Images labelled harness.session (=session_id when given); with state_dir, only those of that
    directory (images made before the state label existed have none and still match)."""
    label = SESSION_LABEL if session_id is None else f"{SESSION_LABEL}={session_id}"
    with translate("listing session images"):
        found = client.images.list(all=True, filters={"label": label})
    if state_dir is None:
        return found
    where = str(Path(state_dir).resolve())
    return [image for image in found if image.labels.get(STATE_LABEL, where) == where]


def find_session_leftovers(client: docker.DockerClient | None, state_dir: Path, *,
                           setup_cache: bool = False) -> SessionLeftovers:
    """Images of sessions of state_dir whose folder is gone, and folders of creates that never finished.

    Only images labelled with this state directory count: an image of another directory's session
    (or one without the label) is never called a leftover here."""
    state_dir = Path(state_dir)
    leftovers = SessionLeftovers()
    if state_dir.is_dir():
        now = time.time()
        for folder in sorted(p for p in state_dir.iterdir() if p.is_dir()):
            if not (folder / "session.json").exists() and now - folder.stat().st_mtime > UNFINISHED_AFTER_S:
                leftovers.folders.append(folder)
    if client is not None:
        live = {p.parent.name for p in state_dir.glob("*/session.json")} if state_dir.is_dir() else set()
        where = str(state_dir.resolve())
        for image in session_images(client):
            if image.labels.get(STATE_LABEL) == where and image.labels.get(SESSION_LABEL) not in live:
                leftovers.images.append(image.id)
        if setup_cache:
            with translate("listing setup images"):
                leftovers.images += [i.id for i in client.images.list(all=True, filters={"label": "harness.kind=setup"})]
    return leftovers


def remove_image(client: docker.DockerClient, image_id: str) -> bool:
    """Remove an image with all its tags; False when it is gone or still used by a container."""
    with contextlib.suppress(docker.errors.APIError, requests.exceptions.RequestException):
        client.api.remove_image(image_id, force=True, noprune=False)
        return True
    return False


def remove_session_images(client: docker.DockerClient, session_id: str, state_dir: Path | None = None) -> int:
    """Remove every image of this session (newest first, so parents go last)."""
    found = sorted(session_images(client, session_id, state_dir), key=lambda i: i.attrs.get("Created", ""),
                   reverse=True)
    return sum(remove_image(client, image.id) for image in found)


def remove_leftovers(client: docker.DockerClient | None, leftovers: SessionLeftovers) -> list[str]:
    """Remove what find_session_leftovers found; returns what was removed (folders, image ids)."""
    removed: list[str] = []
    for folder in leftovers.folders:
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(str(folder))
    if client is not None:
        # Newest first would need the dates; a parent that still has a child fails now and is
        # found again (childless) by the next prune.
        removed += [image_id for image_id in leftovers.images if remove_image(client, image_id)]
    return removed
