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

import contextlib
import fnmatch
import hashlib
import json
import os
import re
import shlex
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import docker

from sandbox import labels
from sandbox.docker import hardening, transfer, tunnel
from sandbox.docker.call import exec_output, exit_code_of
from sandbox.docker.commit import commit_paused
from sandbox.docker.containers import DockerSandbox
from sandbox.docker.engine import located, resolve_image_path, translate
from sandbox.docker.ids import present_images, remove_container
from sandbox.errors import SetupError, SpecError
from sandbox.network import egress
from sandbox.network.secrets import Secret
from sandbox.owner import SANDBOX_UID
from sandbox.session.session import Prepare, Ready, Session, SessionConfig, SetupRecord, StepImages
from sandbox.session.workspace import copy_repository
from sandbox.settings import StartedFrom, parse_setup_mount, redact_url
from sandbox.spec import Mount, Sandbox, SandboxSpec
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
SETUP_FORMAT = 2
"""What a setup image is made like (in its cache key): 2 keeps none of setup's proxy or CA variables
(images of 1 carried them into every later call)."""
SETUP_LOG = "setup.log"
"""In the session folder: every setup command's full output (beside it, `<id>.setup.log`, when setup
failed and the session was not made)."""


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


def cache_key(
    base_image_id: str, commands: Sequence[str], network: bool, digest: str, mounts: Sequence[str] = ()
) -> str:
    fields: dict[str, object] = {
        "base": base_image_id,
        "commands": list(commands),
        "network": network,
        "deps": digest,
        "format": SETUP_FORMAT,
    }
    if mounts:  # what a wheelhouse serves decides the result too (named, not hashed: it may be large)
        fields["mounts"] = list(mounts)
    blob = json.dumps(fields)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def find_cached(client: docker.DockerClient, key: str) -> Any | None:
    """The setup image committed for key, if any.

    An image committed from a container inherits its image's labels, so a step image of a session
    started from this one carries the key too: only an image whose kind is still `setup` is the
    pristine result of the commands. `all=True` because an untagged image with a child (that step
    image) is "intermediate" and hidden from the default listing, which would leave only the child.
    """
    with translate("looking up the setup cache"):
        found = present_images(
            client, all=True, filters={"label": [f"{labels.SETUP_KEY}={key}", f"{labels.KIND}=setup"]}
        )
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
    ca: Path | None = None,
    ca_flag: str = "--setup-ca",
    proxy: str | None = None,
    mounts: Sequence[str] = (),
    log: Path | None = None,
) -> SetupRecord:
    """Run commands once on top of spec.image (or reuse the cached result); return step 0's image.

    timeout_s bounds all the commands together. log: a file that gets every command's full output
    as it finishes (the error names only the deciding line).
    ca, proxy and mounts reach the setup container only: the CA bundle (read now, checked to be PEM)
    joins the image's own bundle for the commands, the proxy is their HTTP(S)_PROXY, the mounts are
    read-only. Tool calls never see any of them."""
    started = time.monotonic()
    journal = SetupLog(log)
    ca_pem = read_ca(ca, ca_flag) if ca is not None else None
    binds = [parse_setup_mount(item) for item in mounts]
    for host, _ in binds:
        if not host.exists():
            raise SetupError(f"setup mount source {host} does not exist")
    base_id, base_path = resolve_image_path(client, spec.image)
    key = cache_key(base_id, commands, network or bool(spec.egress), dependency_digest(workspace), list(mounts))
    extras = {
        "ca_sha256": hashlib.sha256(ca_pem).hexdigest() if ca_pem is not None else None,
        "proxy": redact_url(proxy) if proxy else None,
        "mounts": list(mounts),
    }
    cached = find_cached(client, key)
    if cached is not None:
        journal.write(f"setup reused from the cache (key {key}, image {cached.id}): no command ran\n")
        return SetupRecord(
            image=cached.id,
            key=key,
            cached=True,
            network_mode=cached.labels.get(labels.SETUP_NETWORK, "none"),
            **extras,
        )
    scratch = Path(tempfile.mkdtemp(prefix="harness-setup-"))
    try:
        copy_repository(workspace, scratch / "workspace")
        setup_spec = spec.model_copy(update={"read_only_root": False, "network": "bridge" if network else "none"})
        # with egress (spec.egress) the network stays none: the relay to the session's proxy is the way out
        setup_mounts = [Mount(source=host.resolve(), target=target) for host, target in binds]
        _, elsewhere = located(client)
        through_engine = elsewhere is not None and spec.egress is not None  # egress by sandbox.docker.tunnel
        if through_engine:
            setup_mounts += hardening.tunnel_mounts(str(spec.egress))
        environment: dict[str, str] = {}
        if ca_pem is not None:
            (scratch / "ca").mkdir()
            (scratch / "ca" / "setup-ca.pem").write_bytes(ca_pem)
            os.chmod(scratch / "ca", 0o755)
            setup_mounts.append(Mount(source=scratch / "ca", target=CA_DIR))
            environment.update(dict.fromkeys(CA_VARIABLES, CA_BUNDLE))
        if proxy:
            environment.update(dict.fromkeys(PROXY_VARIABLES, proxy))
        if network or spec.egress:  # images tell cargo it is offline (tool calls are); setup with network is not
            environment["CARGO_NET_OFFLINE"] = "false"
        config = hardening.container_config(
            base_id,
            setup_spec,
            scratch / "workspace",
            setup_mounts,
            "0:0",
            labels.of_process(run_id, "setup"),
            path=base_path,
            tunnel=through_engine,
        )
        config["host_config"]["cap_add"] = list(SETUP_CAPS)
        if spec.egress:  # given to each command, not the container: a commit keeps a container's own variables,
            # and the image would point every later call at a relay and CA files that are not there
            carried = hardening.egress_environment(Path(spec.egress))
            config["environment"] = {k: v for k, v in config["environment"].items() if k not in carried}
            environment = {**carried, **environment}
        copied = scratch / "workspace"
        keep_node_modules = (copied / "package.json").is_file() and not (copied / "node_modules").exists()
        layout = _without_binds(config, setup_spec, copied, setup_mounts, elsewhere)
        try:
            image, mode = _run_and_commit(
                client,
                config,
                commands,
                key,
                run_id,
                Deadline(timeout_s, journal),
                environment,
                ca_pem is not None,
                keep_node_modules,
                layout,
                Path(str(spec.egress)) if through_engine else None,
            )
        except SetupError as error:
            if network or spec.egress or not _OFFLINE.search(str(error)):
                raise
            raise SetupError(
                f"{error.headline or 'a setup command failed'}: setup has no network: {OFFLINE_FIX}"
            ) from None
        mode = "egress" if spec.egress else mode
    finally:
        remove_tree(scratch, ignore_errors=True)
    return SetupRecord(
        image=image,
        key=key,
        cached=False,
        network_mode=mode,
        duration_ms=int((time.monotonic() - started) * 1000),
        **extras,
    )


CA_DIR = "/tmp/harness-setup-ca"
"""Where the setup CA is bound (under /tmp, a tmpfs: nothing of it is committed)."""
CA_BUNDLE = "/tmp/harness-setup-bundle.pem"
"""The image's own CA bundle plus the setup CA, made in the setup container before the commands."""
CA_VARIABLES = (
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "PIP_CERT",
    "NODE_EXTRA_CA_CERTS",
    "CARGO_HTTP_CAINFO",
    "GIT_SSL_CAINFO",
    "CURL_CA_BUNDLE",
)
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")
_BUNDLE = (
    f"cat /etc/ssl/certs/ca-certificates.crt {CA_DIR}/setup-ca.pem > {CA_BUNDLE} 2>/dev/null"
    f" || cp {CA_DIR}/setup-ca.pem {CA_BUNDLE};"
    f" if [ -f {egress.CONTAINER_DIR}/{egress.CA_NAME} ]; then cat {egress.CONTAINER_DIR}/{egress.CA_NAME} >> {CA_BUNDLE}; fi"
)
"""The setup's bundle: the image's, the setup CA, and the session CA when the session has secrets."""
_KEEP_NODE_MODULES = (
    "if [ -d /workspace/node_modules ] && [ ! -e /node_modules ]; then mv /workspace/node_modules /node_modules; fi"
)
"""What setup installs into the workspace's node_modules is kept at /node_modules in the image (the
workspace copy setup ran on is thrown away); Node and npm look there from /workspace."""


def read_ca(path: Path, flag: str = "--setup-ca") -> bytes:
    """The CA bundle's bytes, checked as the egress proxy's are (sandbox.network.egress.pem_bundle);
    NamedFileError (a bad flag) naming the flag that gave it."""
    from sandbox.network.egress import pem_bundle

    return pem_bundle(Path(path).expanduser().absolute(), flag)


class SetupLog:
    """The setup's full output, command by command, in a file (or nowhere)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("", encoding="utf-8")

    def write(self, text: str) -> None:
        if self.path is not None:
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(text)


class Deadline:
    """All the setup commands share one time bound."""

    def __init__(self, seconds: float, journal: SetupLog) -> None:
        self.seconds, self.journal = seconds, journal
        self.ends = time.monotonic() + seconds

    def left(self, command: str) -> float:
        remaining = self.ends - time.monotonic()
        if remaining < 1:
            raise SetupError(
                f"setup took its whole time bound of {self.seconds:g} s before {command!r} "
                "(raise it with --setup-timeout or setup_timeout)"
            )
        return remaining


def _without_binds(
    config: dict,
    spec: SandboxSpec,
    workspace: Path,
    mounts: Sequence[Mount],
    why: str | None,
) -> dict[str, list[transfer.Part]] | None:
    """On an engine that cannot take this machine's folders (why: elsewhere, rootless; see `located`):
    config's binds made volumes (in place), and what goes into each (sent before the start); None where
    binds serve."""
    if why is None:
        return None
    unbound, layout = transfer.unbound(config, spec, workspace, mounts)
    config["host_config"] = unbound["host_config"]
    return layout


def _run_and_commit(
    client: docker.DockerClient,
    config: dict,
    commands: Sequence[str],
    key: str,
    run_id: str,
    deadline: Deadline,
    environment: dict[str, str],
    bundle: bool,
    keep_node_modules: bool,
    layout: dict[str, list[transfer.Part]] | None,
    tunnelled: Path | None = None,
) -> tuple[str, str]:
    """tunnelled: the session's egress folder, when the setup's egress goes through the engine."""
    api = client.api
    with translate("creating the setup container"):
        host = api.create_host_config(**config["host_config"])
        cid = api.create_container(**{**config, "host_config": host}, detach=True)["Id"]
    try:
        climbing: list[tuple[str, str]] = []
        if layout is not None:  # the workspace and the mounts as archives, root's as the commands run
            with translate("sending the setup's workspace to the engine"):
                climbing = transfer.send(api, cid, layout, (0, 0))
        with translate("starting the setup container"):
            api.start(cid)
            mode = api.inspect_container(cid)["HostConfig"]["NetworkMode"]
        if climbing:
            command = shlex.join(transfer.link_script(climbing))
            _exec(api, cid, command, deadline, {}, what="making the workspace's symbolic links")
        if bundle:
            _exec(api, cid, _BUNDLE, deadline, {}, what="joining the setup CA to the image's bundle")
        with tunnel.carried(api, cid, "0:0", tunnelled) if tunnelled else contextlib.nullcontext():
            for command in commands:
                _exec(api, cid, command, deadline, environment)
        if keep_node_modules:
            _exec(api, cid, _KEEP_NODE_MODULES, deadline, {}, what="keeping node_modules in the image")
        image_labels = labels.of_run(  # the controller's pid is the container's, not the image's
            run_id, "setup", **{labels.SETUP_KEY: key, labels.SETUP_NETWORK: mode, labels.PID: "", labels.OWNER: ""}
        )
        changes = [*labels.instructions(image_labels), f"USER {SANDBOX_UID}:{SANDBOX_UID}"]
        with translate("committing the setup container"):
            image = commit_paused(api, cid, changes)
        return image, mode
    finally:
        _remove(api, cid)


def _remove(api: docker.APIClient, cid: str) -> None:
    """Remove the setup container; one already gone, or whose removal the engine already runs, is done
    (a failure here would hide why setup stopped)."""
    with translate("removing the setup container"):
        remove_container(api, cid)


def _exec(
    api: docker.APIClient, cid: str, command: str, deadline: Deadline, environment: dict[str, str], what: str = ""
) -> None:
    shown = command if len(command) <= 120 else command[:117] + "..."
    subject = what or f"setup command {shown!r}"
    left = deadline.left(shown)
    argv = ["timeout", "-k", "5", f"{left:.0f}s", "sh", "-c", command]
    started = time.monotonic()
    with translate("running a setup command"):
        exec_id = api.exec_create(cid, argv, stdout=True, stderr=True, environment=environment or None)["Id"]
        output = exec_output(api, exec_id).decode("utf-8", "replace")
        code = exit_code_of(api, exec_id)
    took = time.monotonic() - started
    deadline.journal.write(f"$ {what or command}\n{output}{'' if output.endswith(chr(10)) or not output else chr(10)}"
                           f"[exit {code} after {took:.1f} s]\n\n")  # fmt: skip
    if code != 0:
        if code in (124, 137) and took >= left - 1:
            reason = f"stopped at setup's time bound of {deadline.seconds:g} s (--setup-timeout)"
        else:
            reason = f"exited {code}"
        failed = SetupError(f"{subject} {reason}: {setup_cause(output)}")
        failed.headline = f"{subject} {reason}"
        raise failed


_CAUSES = (
    re.compile(r"(CERTIFICATE_VERIFY_FAILED|self[- ]signed certificate|unable to get local issuer certificate|"
               r"SSL: [A-Z_]+|SELF_SIGNED_CERT_IN_CHAIN|UNABLE_TO_GET_ISSUER_CERT)", re.IGNORECASE),
    re.compile(r"(could not resolve host|temporary failure in name resolution|getaddrinfo (ENOTFOUND|EAI_AGAIN)|"
               r"network is unreachable|no such host|failed to establish a new connection|"
               r"harness egress proxy: .*)", re.IGNORECASE),
    re.compile(r"^(ERROR: (?!Could not find a version|No matching distribution).*)$", re.MULTILINE),
    re.compile(r"^(npm (ERR!|error) (code|errno) .*)$", re.MULTILINE),
    re.compile(r"^(E: .*|error: .*|fatal: .*)$", re.MULTILINE),
    re.compile(r"^(ERROR: .*)$", re.MULTILINE),
)  # fmt: skip
"""The lines that say why an install failed, most telling first: TLS, the network, pip's first ERROR,
npm's error code, apt's or a build's error."""
_OFFLINE = re.compile(
    r"(could not resolve host|temporary failure in name resolution|getaddrinfo (ENOTFOUND|EAI_AGAIN)|"
    r"network is unreachable|no such host|failed to establish a new connection|name or service not known)",
    re.IGNORECASE,
)
"""What a command that needed the network says where setup has none."""
OFFLINE_FIX = (
    "pass --setup-network (setup alone; behind a proxy, --setup-proxy URL and --setup-ca FILE too) or "
    "--allow-net HOST (setup and every call, that host alone, through harness's proxy)"
)
_BOILERPLATE = re.compile(
    r"(see above for output|a complete log of this run can be found|this error originates from a subprocess|"
    r"^hint:|^note:|^npm (ERR!|error) *$|^\s*$)",
    re.IGNORECASE,
)  # fmt: skip


def setup_cause(output: str) -> str:
    """One line saying why a setup command failed: the line a person would quote first, never the
    installers' closing boilerplate ("See above for output", where a log that is gone was kept)."""
    for pattern in _CAUSES:
        found = pattern.search(output)
        if found:
            start = output.rfind("\n", 0, found.start()) + 1
            end = output.find("\n", found.start())
            return output[start : end if end != -1 else len(output)].strip()[:300]
    lines = [line.strip() for line in output.splitlines() if not _BOILERPLATE.search(line.strip())]
    return " | ".join(lines[-3:])[:300] or "no output"


def make_prepare(sandbox: Sandbox, spec: SandboxSpec, config: SessionConfig) -> Prepare:
    """The `prepare` hook of Session.create for a DockerSandbox (uses its client and run id)."""
    if not isinstance(sandbox, DockerSandbox):
        raise SpecError("setup commands need the Docker engine's sandbox (they are committed as an image)")
    engine_box = sandbox

    def prepare(workspace: Path, egress: Path | None) -> SetupRecord:
        log = workspace.parent / SETUP_LOG  # the session folder's
        try:
            return prepare_environment(
                engine_box.client,
                workspace,
                spec.model_copy(update={"egress": str(egress) if egress else None}),
                config.setup,
                network=config.setup_network,
                run_id=engine_box.run_id,
                timeout_s=config.setup_timeout,
                ca=config.setup_trust,
                ca_flag="--setup-ca" if config.setup_ca is not None else "--ca-bundle",
                proxy=config.setup_proxy,
                mounts=config.setup_mounts,
                log=log,
            )
        except SetupError as error:
            if not log.is_file() or not log.stat().st_size:
                raise
            kept = workspace.parent.parent / f"{workspace.parent.name}.{SETUP_LOG}"  # the session folder goes
            os.replace(log, kept)
            raise SetupError(f"{error} (full log: {kept})") from None

    return prepare


def create_session(
    repo: Path,
    sessions: Path,
    *,
    spec: SandboxSpec,
    config: SessionConfig,
    sandbox: Sandbox,
    session_id: str | None = None,
    ready: Ready | None = None,
    images: StepImages | None = None,
    workspace_from: Path | None = None,
    secrets: Sequence[Secret] = (),
    started_from: StartedFrom | None = None,
) -> Session:
    """A new session from repo, running its setup commands (if any) once as step 0 (workspace_from,
    secrets, started_from: see Session.create)."""
    sessions.mkdir(parents=True, exist_ok=True)
    prepare = make_prepare(sandbox, spec, config) if config.setup else None
    return Session.create(
        repo,
        sessions,
        spec=spec,
        session_id=session_id,
        config=config,
        prepare=prepare,
        ready=ready,
        images=images,
        workspace_from=workspace_from,
        secrets=secrets,
        started_from=started_from,
    )
