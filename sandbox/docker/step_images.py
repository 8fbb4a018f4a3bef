"""A session's step-image operations on a Docker engine (injected into `Session`).

Writable-root calls commit the container as the step's image. The session keeps each such image
tagged (so image pruning keeps it), checks a step's image still exists before a rollback touches
the workspace, and removes its images when it is deleted.
"""

from __future__ import annotations

from pathlib import Path

import docker

from sandbox.docker.engine import resolve_image, translate
from sandbox.docker.prune import remove_session_images
from sandbox.errors import SandboxError, SnapshotError


class EngineStepImages:
    """`sandbox.session.session.StepImages` on a Docker engine."""

    def __init__(self, client: docker.DockerClient) -> None:
        self.client = client

    def keep(self, session_id: str, step: int, image: str) -> None:
        """Tag a step's committed image `harness-session/<id>:step-<n>`."""
        with translate("tagging a session image"):
            self.client.api.tag(image, f"harness-session/{session_id.lower()}", f"step-{step}")

    def check(self, image: str) -> None:
        """Raise SnapshotError unless the image still exists."""
        try:
            resolve_image(self.client, image)
        except SandboxError as error:
            raise SnapshotError(f"cannot roll back: the step's image is gone ({error})") from None

    def remove(self, session_id: str, state_dir: Path) -> int:
        """Remove every image of the session; returns how many went."""
        return remove_session_images(self.client, session_id, state_dir)
