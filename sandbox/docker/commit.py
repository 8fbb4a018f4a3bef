"""A writable-root call's changes committed as the session's next step image.

A container whose root filesystem changed outside the workspace, /tmp (when it is a tmpfs), the
call stub and the mounts is committed (paused) with a step image's labels; once an image has
MAX_LAYERS layers it is flattened into one (export + import with the committed image's config),
because overlay2 stacks about 125 at most and a long writable-root session would reach them.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import docker

from sandbox import labels as labels_of
from sandbox.docker import hardening
from sandbox.docker.call import rootfs_changed
from sandbox.docker.engine import translate
from sandbox.docker.ids import image_id
from sandbox.docker.stubcall import STUB_DIR
from sandbox.errors import SandboxError
from sandbox.spec import Mount, SandboxSpec
from sandbox.tree import walk

MAX_LAYERS = 100
"""A committed step image with this many layers is flattened (overlay2's limit is about 125)."""


def commit_root(
    api: docker.APIClient, cid: str, spec: SandboxSpec, mounts: Sequence[Mount], labels: dict[str, str]
) -> str | None:
    """The id of the image the container's root changes were committed as, or None when it changed
    nothing outside the workspace, /tmp, the stub and the mounts."""
    scratch = ("/tmp",) if hardening.tmp_is_tmpfs(spec) else ()
    keep_out = (*scratch, spec.workdir, STUB_DIR, *(m.target for m in mounts))
    if not rootfs_changed(changed_paths(api, cid), keep_out):
        return None
    with translate("committing the container filesystem"):
        image = commit_paused(api, cid, labels_of.instructions(labels))
        layers = api.inspect_image(image).get("RootFS", {}).get("Layers") or []
    if len(layers) < MAX_LAYERS:
        return str(image)
    return flatten(api, cid, image, labels)


def commit_paused(api: docker.APIClient, cid: str, changes: list[str]) -> str:
    """The container committed as an image (its id), paused while it is; unpaused where the engine
    cannot pause it (Podman's `runc pause` fails where Docker's does not; a rootless Podman on
    cgroup v1 pauses nothing)."""
    try:
        return image_id(api.commit(cid, changes=changes, pause=True)["Id"])
    except docker.errors.APIError as error:
        if "pausing container" not in str(error.explanation or error):
            raise
    return image_id(api.commit(cid, changes=changes, pause=False)["Id"])


def changed_paths(api: docker.APIClient, cid: str) -> list[str]:
    """Paths the container changed: its overlay2 upper directory listed on this host when it can be
    read (tens of ms), else the engine's `docker diff` (which walks the whole image: ~0.7 s here)."""
    with translate("comparing the container filesystem"):
        driver = api.inspect_container(cid).get("GraphDriver") or {}
        overlay = driver.get("Name") in ("overlay2", "overlay")  # Docker's, Podman's
        upper = (driver.get("Data") or {}).get("UpperDir") if overlay else None
        if upper:
            listed = list_tree(Path(upper))
            if listed is not None:
                return listed
        return [change["Path"] for change in api.diff(cid) or []]


def flatten(api: docker.APIClient, cid: str, image: str, labels: dict[str, str]) -> str:
    """The container's filesystem as a one-layer image with the committed image's config (the
    committed image is removed)."""
    with translate("flattening the container filesystem"):
        config = api.inspect_image(image).get("Config") or {}
        changes = [
            *labels_of.instructions({**(config.get("Labels") or {}), **labels}),
            *image_config_changes(config),
        ]
        reply = api.import_image_from_stream(api.export(cid), changes=changes)
    flat = import_result(reply)
    with contextlib.suppress(docker.errors.APIError):
        api.remove_image(image, noprune=False)
    return flat


def list_tree(top: Path) -> list[str] | None:
    """Every path under top as an absolute path of the container ("/etc/x"), without following
    symlinks or recursing on the stack; None when top cannot be read here (a remote engine)."""
    try:
        if not top.is_dir() or not os.access(top, os.R_OK | os.X_OK):
            return None
        found: list[str] = []
        for folder, dirs, others in walk(top):
            found.extend("/" + os.path.relpath(os.path.join(folder, name), top) for name in (*dirs, *others))
        return found
    except OSError:
        return None


def image_config_changes(config: dict[str, Any]) -> list[str]:
    """Dockerfile instructions that carry an image's run config (not its labels) over a `docker import`."""
    changes = []
    for item in config.get("Env") or []:
        key, sep, value = item.partition("=")
        if sep:
            changes.append(f"ENV {key}={json.dumps(value)}")
    if config.get("WorkingDir"):
        changes.append(f"WORKDIR {config['WorkingDir']}")
    if config.get("User"):
        changes.append(f"USER {config['User']}")
    for key, instruction in (("Entrypoint", "ENTRYPOINT"), ("Cmd", "CMD")):
        if config.get(key):
            changes.append(f"{instruction} {json.dumps(config[key])}")
    return changes


def import_result(reply: Any) -> str:
    """The image id a `docker import` reply names (the last status that is an image id)."""
    text = reply.decode() if isinstance(reply, bytes) else str(reply)
    for line in reversed(text.splitlines()):
        with contextlib.suppress(ValueError):
            status = json.loads(line).get("status", "")
            if isinstance(status, str) and status.startswith("sha256:"):
                return status
    raise SandboxError(f"the engine did not name the flattened image: {text[-200:]!r}")
