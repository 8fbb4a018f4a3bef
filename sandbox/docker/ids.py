"""The id of an object the engine returned: the SDK types it as optional, the engine always sets it."""

from __future__ import annotations

from docker.models.resource import Model

from sandbox.errors import SandboxError


def object_id(obj: Model) -> str:
    """obj.id, or SandboxError when the engine answered with an object that has none."""
    if not obj.id:
        raise SandboxError("the engine returned an object without an id; check it with `harness doctor`")
    return obj.id
