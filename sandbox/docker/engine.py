"""Talking to the Docker engine: connect, translate SDK errors (the one place), resolve images.

Docker SDK and transport errors become `sandbox.errors` in `translate()` and nowhere else; every
message says what to do next.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from collections.abc import Iterator
from typing import Any

import docker
import requests
from docker.models.images import Image

from sandbox.docker import images
from sandbox.docker.ids import object_id
from sandbox.errors import EngineUnavailable, ImageNotFound, RuntimeUnavailable, SandboxError, SpecError

ENGINE_FIX = "start the engine (`make engine`, or `sudo systemctl start docker`) or point DOCKER_HOST at one"


def connect(base_url: str | None = None, timeout: int = 120) -> docker.DockerClient:
    """A client for the engine at base_url (default socket); EngineUnavailable if none answers."""
    try:
        return docker.DockerClient(base_url=base_url, version="auto", timeout=timeout)
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as error:
        where = base_url or "the default socket"
        reason = _transport_reason(str(error)) or type(error).__name__
        raise EngineUnavailable(f"no Docker engine answers at {where} ({reason}); {ENGINE_FIX}") from None


def streams_pass(base_url: str) -> bool:
    """Whether an attached stream of the client at base_url (the SDK's spelling: a Unix socket is
    `http+docker://localhost`) is a plain socket to the engine, which another process can be given
    and speak through (TLS keeps its state in this process, SSH goes through a program of its own)."""
    return base_url == "http+docker://localhost" or base_url.startswith("http://")


def _transport_reason(text: str) -> str:
    for needle, short in (
        ("Connection refused", "connection refused"),
        ("No such file", "no socket there"),
        ("Permission denied", "permission denied on the socket"),
        ("timed out", "timed out"),
        ("Name or service not known", "unknown host"),
        ("Not supported URL scheme", "bad URL scheme"),
    ):
        if needle in text:
            return short
    return text.splitlines()[0][:120] if text else ""


@contextlib.contextmanager
def translate(what: str = "engine call") -> Iterator[None]:
    """Map docker SDK and transport errors to sandbox.errors (usable as a decorator too)."""
    try:
        yield
    except docker.errors.ImageNotFound as error:
        raise ImageNotFound(f"image not found ({_explain(error)}); build it: harness images build") from None
    except docker.errors.NotFound as error:
        raise SandboxError(f"{what}: not found ({_explain(error)})") from None
    except docker.errors.APIError as error:
        text = _explain(error)
        if "runtime" in text.lower() and ("unknown" in text.lower() or "not" in text.lower()):
            raise RuntimeUnavailable(f"{what}: {text}") from None
        if error.status_code == 400:
            raise SpecError(f"{what}: the engine rejected the request ({text})") from None
        raise SandboxError(f"{what}: engine error ({text}){_engine_hint(text)}") from None
    except (requests.exceptions.ConnectionError, ConnectionError, FileNotFoundError) as error:
        raise EngineUnavailable(f"{what}: lost the Docker engine ({type(error).__name__}); {ENGINE_FIX}") from None
    except docker.errors.DockerException as error:
        raise SandboxError(f"{what}: {error}") from None
    except requests.exceptions.RequestException as error:  # a read timeout, a broken chunked answer
        raise EngineUnavailable(
            f"{what}: the engine connection failed ({type(error).__name__}); {ENGINE_FIX}"
        ) from None


STALE_ROOTLESS_NETNS = "runtime directory for rootless netns"
"""What rootless Podman 4.3 says for every container on a network once its network namespace's folder
is gone (its slirp4netns failed to start once, e.g. without access to /dev/net/tun)."""


def _engine_hint(text: str) -> str:
    """What to do about an engine error this machine can mend, or ''."""
    if STALE_ROOTLESS_NETNS in text:
        return (
            "; the rootless engine's network namespace is stale: `make podman-rootless` (as root) removes it, "
            "or remove $XDG_RUNTIME_DIR/netns/rootless-netns-* as the engine's user"
        )
    return ""


def _explain(error: docker.errors.APIError) -> str:
    return str(getattr(error, "explanation", None) or error).strip().splitlines()[0][:300]


def resolve_image(client: docker.DockerClient, name: str) -> tuple[str, str]:
    """(reference, image id): `py311` means the current harness-built image; refs/ids are used as-is."""
    ref, image = _lookup(client, name)
    return ref, object_id(image)


def resolve_image_path(client: docker.DockerClient, name: str) -> tuple[str, str | None]:
    """(image id, the PATH the image declares — its own `ENV PATH=...`, e.g. a virtual environment
    first — or None), from the one lookup."""
    _, image = _lookup(client, name)
    env = (image.attrs.get("Config") or {}).get("Env") or []
    path = next((item[len("PATH=") :] for item in env if item.startswith("PATH=")), None)
    return object_id(image), path or None


INSPECT_TRIES = 3
"""An image inspection Podman failed for another image's sake is asked again, this many times in all."""


def _inspected(client: docker.DockerClient, ref: str) -> Image:
    """client.images.get(ref), asked again when Podman failed it for another image: Podman 4.3 reads
    an image's neighbours to answer, and one that another process removes meanwhile (a step image, a
    derived one) fails the whole inspection (500, "reading image <another id>: image not known")."""
    for attempt in range(1, INSPECT_TRIES + 1):
        try:
            return client.images.get(ref)
        except docker.errors.NotFound:
            raise
        except docker.errors.APIError as error:
            if attempt == INSPECT_TRIES or error.status_code != 500 or "image not known" not in str(error.explanation):
                raise
            time.sleep(0.1 * attempt)
    raise AssertionError("unreachable")


def _lookup(client: docker.DockerClient, name: str) -> tuple[str, Image]:
    harness_names = images.image_names()
    ref = name
    if ":" not in name and "/" not in name and name in harness_names:
        with translate(f"looking up image {name}"):  # an engine gone away is EngineUnavailable here too
            ref = images.current_ref(client, name)
    try:
        with translate(f"looking up image {ref}"):
            return ref, _inspected(client, ref)
    except ImageNotFound:
        if name in harness_names:
            hint = f"run: harness images build {name}"
        elif ref.startswith(("sha256:", "harness/devcontainer")):  # a session's setup result or devcontainer image
            hint = (
                "a cache image (a setup's result, a devcontainer's image) is gone from the engine; a new run makes "
                "it again (`harness images prune` keeps those the sessions of the state directories it is given name)"
            )
        else:
            hint = "build or load it locally (images are never pulled)"
        raise ImageNotFound(f"image {ref} is not present; {hint}") from None


def engine_kind(version: dict, info: dict) -> tuple[str, bool]:
    """(the engine's product, whether it runs rootless) from its /version and /info answers: Podman
    names itself among the version's components; a rootless Docker says `name=rootless` among its
    security options, a rootless Podman (4.3) only `Rootless: true`."""
    components = [str(c.get("Name", "")) for c in version.get("Components") or [] if isinstance(c, dict)]
    product = "Podman" if any(name.startswith("Podman") for name in components) else "Docker"
    options = [str(option) for option in info.get("SecurityOptions") or []]
    return product, info.get("Rootless") is True or any("name=rootless" in option for option in options)


def available_runtimes(client: docker.DockerClient) -> list[str]:
    """OCI runtimes registered with the engine (e.g. runc, runsc)."""
    return sorted(runtime_options(client))


def runtime_options(client: docker.DockerClient) -> dict[str, list[str]]:
    """Each registered runtime and the arguments the engine passes it."""
    with translate("reading engine info"):
        return runtimes_of(client.info())


def runtimes_of(info: dict[str, Any]) -> dict[str, list[str]]:
    """Each runtime an engine's /info answer registers, and the arguments the engine passes it."""
    runtimes = info.get("Runtimes") or {}
    return {name: list((options or {}).get("runtimeArgs") or []) for name, options in runtimes.items()}


def remote_reason(base_url: str, engine_host: str, here: str) -> str | None:
    """Why the engine at base_url is not on this machine, or None when it is.

    A local socket is this machine's engine (or one that shares its files: Docker Desktop's or a
    Podman machine's VM); an engine reached over ssh is another machine's; over TCP the engine's own
    host name says it (a daemon in a container or on another host answers with another name)."""
    scheme, _, rest = base_url.partition("://")
    if scheme == "ssh" or rest.split("/")[0] == "ssh":
        return "it is reached over ssh"
    if scheme in ("tcp", "http", "https") and engine_host and engine_host != here:
        return f"it answers over TCP as host {engine_host!r}, and this machine is {here!r}"
    return None


FORCE_REMOTE = "HARNESS_ENGINE_REMOTE"
"""Set to 1: treat any engine as another machine's (nothing bind-mounted; see sandbox.docker.transfer)."""


def another_machine(client: docker.DockerClient, info: dict[str, Any]) -> str | None:
    """Why the engine behind client (its /info answer given) is not on this machine, or None."""
    return remote_reason(str(client.api.base_url), str(info.get("Name") or ""), socket.gethostname())


def elsewhere(client: docker.DockerClient, info: dict[str, Any]) -> str | None:
    """Why the engine behind client cannot take this machine's folders as its calls' own, or None:
    it runs on another machine, or rootless (its containers' users are other ids on this machine:
    the call's user would not own a bound workspace), or HARNESS_ENGINE_REMOTE=1 says so."""
    why = another_machine(client, info)
    if why is None and engine_kind({}, info)[1]:
        why = "it runs rootless: its containers' users are other ids on this machine"
    if why is None and os.environ.get(FORCE_REMOTE) == "1":
        why = f"{FORCE_REMOTE}=1"
    return why


def located(client: docker.DockerClient) -> tuple[dict[str, Any], str | None]:
    """The engine's /info answer, and why its calls' workspaces travel as archives (None: they are
    bind-mounted; see elsewhere)."""
    with translate("reading engine info"):
        info = client.info()
    return info, elsewhere(client, info)


REMOTE_SERVED = (
    "calls' workspaces, mounts and the call stub travel as archives (nothing bind-mounted), egress through the "
    "engine's API (one exec's stream, every connection framed on it); an MCP server's or a service's workspace is a "
    "copy there, brought up to date before each use; under gVisor the engine's own null device hides its FUSE device"
)
"""What `harness doctor` says of an engine that cannot take this machine's folders."""


PODMAN_NO_GVISOR = "Podman takes gVisor's flags from containers.conf and a seccomp profile only as a file"
"""Why a call under runsc is refused on Podman (its error and `harness doctor` give this reason)."""


CGROUP_LIMITS = ["memory", "cpus", "pids"]
ENGINE_LIMITS = {"memory": "MemoryLimit", "cpus": "CpuCfsQuota", "pids": "PidsLimit"}
"""Each limit, and the /info field in which the engine says whether it can enforce it (false: a
rootless engine on cgroup v1, or without the controllers delegated to it)."""


def unenforced_limits(args: list[str], runtime: str = "", info: dict[str, Any] | None = None) -> list[str]:
    """What a runtime started with these arguments leaves unenforced: cgroup limits under
    `--ignore-cgroups`, or on a rootless engine on cgroup v1 (Podman 4.3 says it sets them, and does
    not), or those the engine's /info answer (info) says it cannot set; under gVisor
    without `--oci-seccomp`, creating device nodes (mknod succeeds on its own virtual filesystem,
    where runc refuses it without CAP_MKNOD; with `--oci-seccomp` the calls' seccomp profile refuses
    it, see hardening.GVISOR_SECCOMP)."""
    if "--ignore-cgroups" in args or (engine_kind({}, info or {})[1] and str((info or {}).get("CgroupVersion")) == "1"):
        missing = list(CGROUP_LIMITS)  # (a rootless engine on cgroup v1 cannot set any, whatever it says)
    else:
        missing = [limit for limit, field in ENGINE_LIMITS.items() if (info or {}).get(field) is False]
    if runtime == "runsc" and "--oci-seccomp" not in args:
        missing.append("mknod")
    return missing
