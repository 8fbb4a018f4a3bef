"""Environment preparation (step 0): `--setup` commands run once, their result becomes the base image.

Setup runs in one container with a writable root, as root inside it (installers write system
paths) but with only a few capabilities, no-new-privileges, the same limits as tool calls, no host
environment and no mount except a throwaway copy of the workspace (so the session's own workspace
is exactly the import). Network is `none` unless `--setup-network` was given; the engine's view of
the container's NetworkMode is recorded. The committed image is labelled with a cache key made of
the base image id, the commands, the network flag and the hashes of the dependency files, so a
second session of the same repository finds it by label and starts in seconds. Tool calls after
setup use the session's spec, whose network stays `none`.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import docker

from sandbox import labels
from sandbox.docker import hardening
from sandbox.docker.engine import resolve_image, translate
from sandbox.errors import SetupError
from sandbox.owner import SANDBOX_UID
from sandbox.session.session import Prepare, Ready, Session, SessionConfig, SetupRecord, StepImages
from sandbox.session.workspace import copy_repository
from sandbox.spec import SandboxSpec
from sandbox.tree import remove_tree, walk

DEPENDENCY_FILES = (
    "pyproject.toml",
    "setup.py",
    "setup.cfg",
    "requirements*.txt",
    "constraints*.txt",
    "Pipfile",
    "*.lock",
    "package.json",
    "package-lock.json",
    "pnpm-lock.yaml",
    "go.mod",
    "go.sum",
    "Cargo.toml",
    "Gemfile",
    "*.whl",
)
"""File names whose content decides what setup installs (part of the cache key)."""
SETUP_CAPS = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "SETUID", "SETGID"]
"""What package managers need as root (apt drops to its own user); nothing else."""
SETUP_TIMEOUT_S = 900.0


def dependency_digest(workspace: Path) -> str:
    """sha256 over (path, content) of every dependency file, never following links or entering .git."""
    found: list[tuple[str, bytes]] = []
    for folder, dirs, files in walk(workspace):
        dirs[:] = [d for d in dirs if d.lower() != ".git"]
        for name in files:
            path = os.path.join(folder, name)
            if (
                any(fnmatch.fnmatch(name, pattern) for pattern in DEPENDENCY_FILES)
                and not os.path.islink(path)
                and os.path.isfile(path)
            ):
                found.append((os.path.relpath(path, workspace), hashlib.sha256(Path(path).read_bytes()).digest()))
    sha = hashlib.sha256()
    for rel, digest in sorted(found):
        sha.update(rel.encode() + b"\0" + digest)
    return sha.hexdigest()


def cache_key(base_image_id: str, commands: Sequence[str], network: bool, digest: str) -> str:
    blob = json.dumps({"base": base_image_id, "commands": list(commands), "network": network, "deps": digest})
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def find_cached(client: docker.DockerClient, key: str) -> Any | None:
    """The setup image committed for key, if any.

    An image committed from a container inherits its image's labels, so a step image of a session
    started from this one carries the key too: only an image whose kind is still `setup` is the
    pristine result of the commands. `all=True` because an untagged image with a child (that step
    image) is "intermediate" and hidden from the default listing, which would leave only the child.
    """
    with translate("looking up the setup cache"):
        found = client.images.list(all=True, filters={"label": [f"{labels.SETUP_KEY}={key}", f"{labels.KIND}=setup"]})
    found.sort(key=lambda image: image.attrs.get("Created", ""), reverse=True)
    return found[0] if found else None


def prepare_environment(
    client: docker.DockerClient,
    workspace: Path,
    spec: SandboxSpec,
    commands: Sequence[str],
    *,
    network: bool = False,
    run_id: str = "setup",
    timeout_s: float = SETUP_TIMEOUT_S,
) -> SetupRecord:
    """Run commands once on top of spec.image (or reuse the cached result); return step 0's image."""
    started = time.monotonic()
    _, base_id = resolve_image(client, spec.image)
    key = cache_key(base_id, commands, network, dependency_digest(workspace))
    cached = find_cached(client, key)
    if cached is not None:
        return SetupRecord(
            image=cached.id, key=key, cached=True, network_mode=cached.labels.get(labels.SETUP_NETWORK, "none")
        )
    scratch = Path(tempfile.mkdtemp(prefix="harness-setup-"))
    try:
        copy_repository(workspace, scratch / "workspace")
        setup_spec = spec.model_copy(update={"read_only_root": False, "network": "bridge" if network else "none"})
        config = hardening.container_config(
            base_id, setup_spec, scratch / "workspace", (), "0:0", labels.of_run(run_id, "setup")
        )
        config["host_config"]["cap_add"] = list(SETUP_CAPS)
        image, mode = _run_and_commit(client, config, commands, key, run_id, timeout_s)
    finally:
        remove_tree(scratch, ignore_errors=True)
    return SetupRecord(
        image=image, key=key, cached=False, network_mode=mode, duration_ms=int((time.monotonic() - started) * 1000)
    )


def _run_and_commit(
    client: docker.DockerClient, config: dict, commands: Sequence[str], key: str, run_id: str, timeout_s: float
) -> tuple[str, str]:
    api = client.api
    with translate("creating the setup container"):
        host = api.create_host_config(**config["host_config"])
        cid = api.create_container(**{**config, "host_config": host}, detach=True)["Id"]
    try:
        with translate("starting the setup container"):
            api.start(cid)
            mode = api.inspect_container(cid)["HostConfig"]["NetworkMode"]
        for command in commands:
            _exec(api, cid, command, timeout_s)
        image_labels = labels.of_run(run_id, "setup", **{labels.SETUP_KEY: key, labels.SETUP_NETWORK: mode})
        changes = [f'LABEL {k}="{v}"' for k, v in image_labels.items()] + [f"USER {SANDBOX_UID}:{SANDBOX_UID}"]
        with translate("committing the setup container"):
            image = api.commit(cid, changes=changes, pause=True)["Id"]
        return image, mode
    finally:
        with translate("removing the setup container"):
            api.remove_container(cid, force=True)


def _exec(api: docker.APIClient, cid: str, command: str, timeout_s: float) -> None:
    argv = ["timeout", "-k", "5", f"{timeout_s:g}s", "sh", "-c", command]
    with translate("running a setup command"):
        exec_id = api.exec_create(cid, argv, stdout=True, stderr=True)["Id"]
        output = api.exec_start(exec_id, stream=False) or b""
        code = api.exec_inspect(exec_id).get("ExitCode")
    if code != 0:
        tail = output.decode("utf-8", "replace").strip().splitlines()[-3:]
        reason = "timed out" if code == 124 else f"exited {code}"
        raise SetupError(f"setup command {command!r} {reason}: {' | '.join(tail) or 'no output'}")


def make_prepare(sandbox: Any, spec: SandboxSpec, config: SessionConfig) -> Prepare:
    """The `prepare` hook of Session.create for a DockerSandbox (uses its client and run id)."""

    def prepare(workspace: Path) -> SetupRecord:
        return prepare_environment(
            sandbox.client,
            workspace,
            spec,
            config.setup,
            network=config.setup_network,
            run_id=getattr(sandbox, "run_id", "setup"),
        )

    return prepare


def create_session(
    repo: Path,
    sessions: Path,
    *,
    spec: SandboxSpec,
    config: SessionConfig,
    sandbox: Any,
    session_id: str | None = None,
    ready: Ready | None = None,
    images: StepImages | None = None,
) -> Session:
    """A new session from repo, running its setup commands (if any) once as step 0."""
    sessions.mkdir(parents=True, exist_ok=True)
    prepare = make_prepare(sandbox, spec, config) if config.setup else None
    return Session.create(
        repo, sessions, spec=spec, session_id=session_id, config=config, prepare=prepare, ready=ready, images=images
    )
