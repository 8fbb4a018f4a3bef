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

SESSION_LABEL = "harness.session"
UNFINISHED_AFTER_S = 3600.0
"""A session folder without session.json this old is a crashed create, not one in progress."""


class SessionLeftovers(BaseModel):
    """What a prune would remove."""

    images: list[str] = Field(default_factory=list)
    """Image ids labelled with a session id that no longer exists (plus setup cache when asked)."""
    folders: list[Path] = Field(default_factory=list)
    """Session folders whose create never finished."""


def session_images(client: docker.DockerClient, session_id: str | None = None) -> list[docker.models.images.Image]:
    """Images labelled harness.session (=session_id when given)."""
    label = SESSION_LABEL if session_id is None else f"{SESSION_LABEL}={session_id}"
    with translate("listing session images"):
        return client.images.list(all=True, filters={"label": label})


def find_session_leftovers(client: docker.DockerClient | None, state_dir: Path, *,
                           setup_cache: bool = False) -> SessionLeftovers:
    """Images of sessions missing from state_dir, and folders of creates that never finished."""
    state_dir = Path(state_dir)
    leftovers = SessionLeftovers()
    if state_dir.is_dir():
        now = time.time()
        for folder in sorted(p for p in state_dir.iterdir() if p.is_dir()):
            if not (folder / "session.json").exists() and now - folder.stat().st_mtime > UNFINISHED_AFTER_S:
                leftovers.folders.append(folder)
    if client is not None:
        live = {p.parent.name for p in state_dir.glob("*/session.json")} if state_dir.is_dir() else set()
        for image in session_images(client):
            if image.labels.get(SESSION_LABEL) not in live:
                leftovers.images.append(image.id)
        if setup_cache:
            with translate("listing setup images"):
                leftovers.images += [i.id for i in client.images.list(filters={"label": "harness.kind=setup"})]
    return leftovers


def remove_image(client: docker.DockerClient, image_id: str) -> bool:
    """Remove an image with all its tags; False when it is gone or still used by a container."""
    with contextlib.suppress(docker.errors.APIError, requests.exceptions.RequestException):
        client.api.remove_image(image_id, force=True, noprune=False)
        return True
    return False


def remove_session_images(client: docker.DockerClient, session_id: str) -> int:
    """Remove every image labelled with this session id (newest first, so parents go last)."""
    found = sorted(session_images(client, session_id), key=lambda i: i.attrs.get("Created", ""), reverse=True)
    return sum(remove_image(client, image.id) for image in found)


def remove_leftovers(client: docker.DockerClient | None, leftovers: SessionLeftovers) -> int:
    """Remove what find_session_leftovers found; returns how many things were removed."""
    removed = 0
    for folder in leftovers.folders:
        shutil.rmtree(folder, ignore_errors=True)
        removed += 1
    if client is not None:
        removed += sum(remove_image(client, image_id) for image_id in leftovers.images)
    return removed
