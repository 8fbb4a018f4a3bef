"""Build and list the harness images: base → `harness/sandbox:<v>` → `harness/<name>:<v>`.

The base is `harness/base:bookworm`: already present, else a registry base (debian:bookworm-slim)
when a registry answers, else bootstrapped offline with debootstrap and `docker import`. Each
version is a content hash of its inputs (Dockerfile bytes, the files of `images/<name>/`, the parent
image id), so building again with nothing changed only looks the tags up and takes seconds.
About 280 lines: versions, the locked build, the registry base and the offline bootstrap are one
chain that a first build walks end to end.

Environments (`build_env`): the same chain on another Debian release (bullseye, trixie), for a
language whose interpreter or toolchain a repository needs in another version than bookworm's:
`harness/base:<release>` → its sandbox layer → `harness/env-<language>:<release>-<version>`,
labelled with the language and release so later checks find it among the local images.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import functools
import hashlib
import io
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal, TypeVar

import docker
import requests
from pydantic import BaseModel

from sandbox import labels
from sandbox.docker.ids import object_id, present_images
from sandbox.errors import BuildRefused, ImageBuildError, ImageNotFound


def _inputs_root() -> Path:
    """Where Dockerfile.sandbox and images/ are: copied beside this module in an installed wheel,
    else the top level of the checkout."""
    packaged = Path(__file__).resolve().parent / "assets"
    return packaged if (packaged / "Dockerfile.sandbox").is_file() else Path(__file__).resolve().parents[2]


INPUTS_ROOT = _inputs_root()
"""The folder holding Dockerfile.sandbox and images/ (their bytes are the image versions' inputs)."""
BASE_REF = "harness/base:bookworm"
REGISTRY_BASE = "debian:bookworm-slim"
SANDBOX = "sandbox"
BOOTSTRAP_PACKAGES = "python3,python3-pip,python3-venv,python3-pytest,git,ripgrep,ca-certificates,procps,iproute2"
RELEASES = ("bullseye", "bookworm", "trixie")
"""Debian releases an environment can be built from (each ships its own Python, Go, Node and Rust)."""
LANGUAGE_IMAGES = {"python": "py311", "go": "go", "javascript": "node", "rust": "rust"}
"""The images/ folder whose Dockerfile makes each language's layer."""
ENV_LANGUAGE = "harness.env.language"
ENV_RELEASE = "harness.env.release"

Log = Callable[[str], None]
T = TypeVar("T")


class ImageStatus(BaseModel):
    """One harness image and whether the tag for the current inputs exists."""

    name: str
    ref: str | None
    """harness/<name>:<version> for the current inputs (None when the base is missing)."""
    status: Literal["current", "stale", "missing"]
    image_id: str | None = None


def image_names(root: Path = INPUTS_ROOT) -> list[str]:
    """`sandbox` followed by every folder of images/ that has a Dockerfile."""
    folders = sorted(p.parent.name for p in (root / "images").glob("*/Dockerfile"))
    return [SANDBOX, *folders]


def _digest(parts: list[bytes]) -> str:
    sha = hashlib.sha256()
    for part in parts:
        sha.update(len(part).to_bytes(8, "big") + part)
    return sha.hexdigest()[:12]


def _folder_bytes(folder: Path) -> list[bytes]:
    parts: list[bytes] = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        parts += [str(path.relative_to(folder)).encode(), path.read_bytes()]
    return parts


def versions(base_id: str, root: Path = INPUTS_ROOT) -> dict[str, str]:
    """Content-hash version of every image, given the base image id."""
    sandbox_v = _digest([b"sandbox", (root / "Dockerfile.sandbox").read_bytes(), base_id.encode()])
    out = {SANDBOX: sandbox_v}
    for name in image_names(root)[1:]:
        out[name] = _digest([name.encode(), *_folder_bytes(root / "images" / name), sandbox_v.encode()])
    return out


def _image_id(client: docker.DockerClient, ref: str) -> str | None:
    try:
        return client.images.get(ref).id
    except docker.errors.ImageNotFound:
        return None


def current_ref(client: docker.DockerClient, name: str, root: Path = INPUTS_ROOT) -> str:
    """harness/<name>:<version> for the current inputs; raises ImageNotFound if it cannot be known."""
    base_id = _image_id(client, BASE_REF)
    if base_id is None:
        raise ImageNotFound(f"base image {BASE_REF} is missing; run: harness images build {name}")
    return f"harness/{name}:{versions(base_id, root)[name]}"


def list_images(client: docker.DockerClient, root: Path = INPUTS_ROOT) -> list[ImageStatus]:
    """Status of the base and every harness image: current, stale (older build only) or missing."""
    base_id = _image_id(client, BASE_REF)
    rows = [ImageStatus(name="base", ref=BASE_REF, status="current" if base_id else "missing", image_id=base_id)]
    wanted = versions(base_id, root) if base_id else {}
    for name in image_names(root):
        ref = f"harness/{name}:{wanted[name]}" if name in wanted else None
        image_id = _image_id(client, ref) if ref else None
        if image_id:
            rows.append(ImageStatus(name=name, ref=ref, status="current", image_id=image_id))
            continue
        older = present_images(client, filters={"label": f"{labels.IMAGE}={name}"})
        rows.append(ImageStatus(name=name, ref=ref, status="stale" if older else "missing"))
    for image in present_images(client, filters={"label": ENV_LANGUAGE}):  # environments built for a declaration
        name = f"env-{image.labels.get(ENV_LANGUAGE, '?')} ({image.labels.get(ENV_RELEASE, '?')})"
        for tag in image.tags:
            rows.append(ImageStatus(name=name, ref=tag, status="current", image_id=image.id))
    for image in present_images(client, filters={"label": f"{labels.KIND}={DEVCONTAINER}"}):  # a repository's own
        name = f"devcontainer (from {image.labels.get(DEVCONTAINER_FROM, '?')})"
        for tag in image.tags:
            rows.append(ImageStatus(name=name, ref=tag, status="current", image_id=image.id))
    return rows


def build(
    client: docker.DockerClient, name: str | None = None, log: Log = lambda _: None, root: Path = INPUTS_ROOT
) -> list[ImageStatus]:
    """Build `name` (default: every image) and what it stands on; skip whatever is current."""
    names = image_names(root)
    if name is not None and name not in names:
        raise ImageNotFound(f"no image named {name!r}; known: {', '.join(names)}")
    with _build_lock(log):
        return _build_locked(client, names, name, log, root)


BUILDERS = 4
"""Images built at once over one sandbox layer (the language images, the hosted agents'): their builds
wait mostly on downloads, so on two cores four at once take about as long as the longest."""


@contextlib.contextmanager
def _build_lock(log: Log, scope: str = "bookworm") -> Iterator[None]:
    """One build of a scope at a time per machine: two concurrent first builds of the images over a
    Debian release would each bootstrap its base; two of a hosted agent's image would each install it.
    Builds of different scopes (another release's environment, another agent) go on side by side."""
    path = Path(tempfile.gettempdir()) / (
        "harness-images.lock" if scope == "bookworm" else f"harness-images-{scope}.lock"
    )
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"another build of {scope}'s images is running; waiting for it")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def at_once(builds: Sequence[Callable[[], T]], workers: int = BUILDERS) -> list[T]:
    """Each build's result, the builds run side by side (up to workers at once); every build runs to
    its end, then the first failure is raised (none is left running behind an error)."""
    if len(builds) <= 1:
        return [build() for build in builds]
    with ThreadPoolExecutor(max_workers=min(workers, len(builds)), thread_name_prefix="harness-build") as pool:
        futures = [pool.submit(build) for build in builds]
        concurrent.futures.wait(futures)
    return [future.result() for future in futures]


def _build_locked(
    client: docker.DockerClient, names: list[str], name: str | None, log: Log, root: Path
) -> list[ImageStatus]:
    base_id = ensure_base(client, log)
    wanted = versions(base_id, root)
    sandbox_ref = _sandbox_layer(client, base_id, BASE_REF, log, root)
    targets = names[1:] if name is None else ([] if name == SANDBOX else [name])
    builds = [
        functools.partial(_build_one, client, other, f"harness/{other}:{wanted[other]}", wanted[other], log,
                          path=root / "images" / other, buildargs={"SANDBOX": sandbox_ref})
        for other in targets
    ]  # fmt: skip
    at_once(builds)
    return list_images(client, root)


def _sandbox_layer(client: docker.DockerClient, base_id: str, base_ref: str, log: Log, root: Path) -> str:
    """harness/sandbox:<version> over the base base_ref (built unless current); its reference."""
    version = versions(base_id, root)[SANDBOX]
    ref = f"harness/{SANDBOX}:{version}"
    _build_one(
        client, SANDBOX, ref, version, log,
        fileobj=(root / "Dockerfile.sandbox").read_bytes(), buildargs={"BASE": base_ref},
    )  # fmt: skip
    return ref


def _build_one(
    client: docker.DockerClient,
    name: str,
    ref: str,
    version: str,
    log: Log,
    *,
    fileobj: bytes | None = None,
    path: Path | None = None,
    buildargs: dict[str, str],
    extra_labels: dict[str, str] | None = None,
    nocache: bool = False,
) -> None:
    if _image_id(client, ref):
        log(f"{ref} is current")
        return
    log(f"building {ref}")
    image_labels = {labels.IMAGE: name, labels.CONTENT: version, **(extra_labels or {})}
    source: dict[str, Any] = {"fileobj": io.BytesIO(fileobj)} if fileobj is not None else {"path": str(path)}
    with _build_errors(f"building {ref}"):
        client.images.build(
            **source,
            tag=ref,
            buildargs=buildargs,
            labels=image_labels,
            rm=True,
            forcerm=True,
            pull=False,
            nocache=nocache,
        )
    log(f"built {ref}")


@contextlib.contextmanager
def _build_errors(what: str) -> Iterator[None]:
    """The engine's build failures as ImageBuildError: what failed, and the build's last lines."""
    try:
        yield
    except docker.errors.BuildError as error:
        tail = " | ".join(str(line.get("stream", line.get("error", ""))).strip() for line in list(error.build_log)[-3:])
        raise ImageBuildError(f"{what} failed: {error.msg} ({tail})") from None
    except docker.errors.APIError as error:
        raise ImageBuildError(f"{what} failed: {error.explanation or error}") from None


def ensure_base(client: docker.DockerClient, log: Log, release: str = "bookworm") -> str:
    """Id of harness/base:<release>, pulling or bootstrapping it first when it is missing."""
    ref = f"harness/base:{release}"
    base_id = _image_id(client, ref)
    if base_id:
        return base_id
    if _pull_registry_base(client, log, release):
        return object_id(client.images.get(ref))
    bootstrap_base(client, log, release)
    return object_id(client.images.get(ref))


def build_from_scratch(
    client: docker.DockerClient, repository: str, name: str, log: Log, root: Path = INPUTS_ROOT
) -> dict[str, float]:
    """What a bare machine does for `name`, under `repository/...` tags and without the build cache
    (`harness bench setup`): bootstrap the base, build the sandbox layer over it, then the image;
    seconds of each step. The caller removes the images."""
    seconds: dict[str, float] = {}
    started = time.monotonic()
    bootstrap_base(client, log, repository=f"{repository}/base")
    seconds["base"] = time.monotonic() - started
    base_ref = f"{repository}/base:bookworm"
    sandbox_ref = f"{repository}/{SANDBOX}:scratch"
    started = time.monotonic()
    _build_one(
        client, SANDBOX, sandbox_ref, "scratch", log,
        fileobj=(root / "Dockerfile.sandbox").read_bytes(), buildargs={"BASE": base_ref}, nocache=True,
    )  # fmt: skip
    seconds[SANDBOX] = time.monotonic() - started
    started = time.monotonic()
    _build_one(
        client, name, f"{repository}/{name}:scratch", "scratch", log,
        path=root / "images" / name, buildargs={"SANDBOX": sandbox_ref}, nocache=True,
    )  # fmt: skip
    seconds[name] = time.monotonic() - started
    return seconds


def build_env(
    client: docker.DockerClient, language: str, release: str, log: Log = lambda _: None, root: Path = INPUTS_ROOT
) -> str:
    """harness/env-<language>:<release>-<version>: the language's image on that Debian release (built
    once: a later call with the same inputs finds the tag). The version argument of the Python layer
    is whatever the release ships."""
    if language not in LANGUAGE_IMAGES:
        raise ImageNotFound(f"no environment for {language!r}; known: {', '.join(LANGUAGE_IMAGES)}")
    if release not in RELEASES:
        raise ImageNotFound(f"no Debian release {release!r} to build from; known: {', '.join(RELEASES)}")
    folder = root / "images" / LANGUAGE_IMAGES[language]
    with _build_lock(log, release):
        base_id = ensure_base(client, log, release)
        sandbox_ref = _sandbox_layer(client, base_id, f"harness/base:{release}", log, root)
        sandbox_v = sandbox_ref.rsplit(":", 1)[1]
        version = _digest([b"env", language.encode(), release.encode(), *_folder_bytes(folder), sandbox_v.encode()])
        ref = f"harness/env-{language}:{release}-{version}"
        _build_one(
            client, f"env-{language}", ref, version, log, path=folder,
            buildargs={"SANDBOX": sandbox_ref, **({"PYTHON": "any"} if language == "python" else {})},
            extra_labels={ENV_LANGUAGE: language, ENV_RELEASE: release},
        )  # fmt: skip
    return ref


def env_images(client: docker.DockerClient) -> dict[str, str]:
    """The environments built on this engine: tag -> language."""
    found: dict[str, str] = {}
    for image in present_images(client, filters={"label": ENV_LANGUAGE}):
        for tag in image.tags:
            found[tag] = image.labels.get(ENV_LANGUAGE, "")
    return found


def _pull_registry_base(client: docker.DockerClient, log: Log, release: str = "bookworm") -> bool:
    registry = REGISTRY_BASE.replace("bookworm", release)
    log(f"trying registry base {registry}")
    try:
        repo, tag = registry.split(":")
        image = client.images.pull(repo, tag=tag)
        image.tag("harness/base", release)
        return True
    except Exception as error:  # noqa: BLE001 - any failure (DNS, refused, timeout, auth) means "no registry"
        log(f"no registry base ({str(error).splitlines()[0][:120]}); bootstrapping offline")
        return False


def apt_mirror(etc: Path = Path("/etc/apt")) -> str:
    """The Debian mirror apt already uses (deb822 .sources or one-line .list entries)."""
    candidates = sorted((etc / "sources.list.d").glob("*.sources")) + sorted((etc / "sources.list.d").glob("*.list"))
    candidates.append(etc / "sources.list")
    for path in candidates:
        text = path.read_text(errors="replace") if path.is_file() else ""
        uris = re.findall(r"^URIs:\s*(\S+)", text, re.MULTILINE) + re.findall(
            r"^deb\s+(?:\[[^\]]*\]\s+)?(\S+)", text, re.MULTILINE
        )
        for uri in uris:
            if "security" not in uri:
                return uri
    return "http://deb.debian.org/debian"


def bootstrap_base(
    client: docker.DockerClient, log: Log, release: str = "bookworm", repository: str = "harness/base"
) -> None:
    """The base image made offline from the apt mirror by debootstrap, imported as repository:release."""
    if os.geteuid() != 0:
        raise ImageBuildError(
            f"harness/base:{release} is missing and no registry answers; run `harness images build` as root "
            "(debootstrap needs root) or make a registry reachable"
        )
    if shutil.which("debootstrap") is None:
        log("installing debootstrap")
        _run(["apt-get", "update", "-qq"], "apt-get update")
        _run(["apt-get", "install", "-y", "-qq", "debootstrap"], "installing debootstrap")
    mirror = apt_mirror()
    with tempfile.TemporaryDirectory(prefix="harness-base-") as tmp:
        rootfs, tarball = Path(tmp) / "rootfs", Path(tmp) / "rootfs.tar"
        log(f"debootstrap {release} from {mirror} (about a minute)")
        _run(
            ["debootstrap", "--variant=minbase", f"--include={BOOTSTRAP_PACKAGES}", release, str(rootfs), mirror],
            "debootstrap",
        )
        _run(["tar", "-C", str(rootfs), "-cf", str(tarball), "."], "tar of the bootstrap")
        answer = client.api.import_image_from_file(
            str(tarball), repository=repository, tag=release, changes=[f"LABEL {labels.IMAGE}=base"]
        )
    if _image_id(client, f"{repository}:{release}") is None:  # Podman's API imports as :latest, whatever the tag
        found = re.findall(r"(?:sha256:)?([0-9a-f]{64})", str(answer))
        if not found:
            raise ImageBuildError(f"the engine imported the bootstrap but named no image ({str(answer)[:200]})")
        client.images.get(found[-1]).tag(repository, release)
    log(f"imported {repository}:{release}")


def _run(argv: list[str], what: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise ImageBuildError(f"{what} failed (exit {done.returncode}): {last}")


# --- images of other frameworks' tasks (Harbor) ------------------------------------------------------

HARBOR_DIRS = ("/logs", "/logs/agent", "/logs/verifier", "/logs/artifacts", "/tests", "/solution", "/installed-agent")
"""Folders a Harbor trial writes (logs, the tests and solution it uploads, an agent's install)."""


def asked_images(dockerfile: str, build_args: dict[str, str] | None, what: str) -> list[str]:
    """The images a Dockerfile's build would need from the engine (sandbox.docker.dockerfile: FROM and
    COPY --from, variables substituted); ImageBuildError when it asks what no build may (an ADD of a
    URL, a RUN flag reaching past the build, an image named through a variable nobody gave): BuildRefused."""
    from sandbox.docker.dockerfile import DockerfileRefused, read

    try:
        return read(dockerfile, build_args, what=what).images
    except DockerfileRefused as refused:
        raise BuildRefused(str(refused)) from None


def _onbuild_checked(client: docker.DockerClient, reference: str, what: str) -> None:
    """BuildRefused when the image's ONBUILD triggers (run by a build over it) ask what no build may."""
    from sandbox.docker.dockerfile import DockerfileRefused, onbuild_refusals

    try:
        triggers = (client.api.inspect_image(reference).get("Config") or {}).get("OnBuild") or []
    except (docker.errors.APIError, requests.exceptions.RequestException):
        return
    if triggers:
        try:
            onbuild_refusals([str(t) for t in triggers], f"{what} {reference}")
        except DockerfileRefused as refused:
            raise BuildRefused(str(refused)) from None


def build_task(
    client: docker.DockerClient, context: Path, tag: str, user: int, log: Log = lambda _: None, run_id: str = ""
) -> tuple[str, str]:
    """Build a task's environment (context/Dockerfile) without pulling, then harness's layer over
    it: the Harbor folders and the image's working directory owned by the sandbox user. (tag, the
    working directory). ImageNotFound names a FROM image the engine lacks."""
    dockerfile = (context / "Dockerfile").read_text(encoding="utf-8", errors="replace")
    for image in asked_images(dockerfile, {}, "the task's Dockerfile"):
        if _image_id(client, image) is None:
            raise ImageNotFound(
                f"the task's Dockerfile needs {image}, which this engine does not have, and harness never "
                f"pulls: build it here or load it (`harness images import FILE.tar`)"
            )
        _onbuild_checked(client, image, "the task's Dockerfile builds over")
    stage = f"{tag}-task"
    owner = {labels.KIND: "task", **labels.owner(), **({labels.RUN: run_id} if run_id else {})}
    _build_one(client, "task", stage, "task", log, path=context, buildargs={}, extra_labels=owner)
    built = client.images.get(stage)
    workdir = (built.attrs.get("Config") or {}).get("WorkingDir") or "/workspace"
    folders = " ".join([*HARBOR_DIRS, workdir])
    layer = (
        f"FROM {stage}\nUSER root\n"
        f"RUN mkdir -p {folders} && chown {user}:{user} {folders} && chown -R {user}:{user} {workdir}\n"
        f"USER {user}:{user}\nWORKDIR {workdir}\n"
    )
    _build_one(client, "task", tag, "task", log, fileobj=layer.encode(), buildargs={}, extra_labels=owner)
    return tag, workdir


def copy_out(client: docker.DockerClient, image: str, path: str, target: Path, run_id: str) -> None:
    """What image holds at path (a folder), written into target (never a link out of it)."""
    import tarfile

    container = client.containers.create(image, command=["true"], labels=labels.of_process(run_id, "copy"))
    try:
        stream, _ = container.get_archive(path.rstrip("/") + "/.")
        data = b"".join(stream)
    except docker.errors.NotFound:
        data = b""
    finally:
        container.remove(force=True, v=True)  # v: the anonymous volume of each VOLUME the image declares
    target.mkdir(parents=True, exist_ok=True)
    if data:
        with tarfile.open(fileobj=io.BytesIO(data)) as archive:
            archive.extractall(target, filter="data")


def load_archive(client: docker.DockerClient, archive: Path) -> list[str]:
    """`docker load` of an image tar (made by `docker save`): the tags it brought."""
    from sandbox.named import check_named

    check_named(archive, what="harness images import", limit=1 << 50)  # a pipe or device never ends
    try:
        with open(archive, "rb") as handle:
            images = client.images.load(handle)
    except OSError as error:
        raise ImageNotFound(f"cannot read {archive}: {error.strerror}") from None
    except docker.errors.APIError as error:
        raise ImageBuildError(f"{archive} is not an image archive: {error.explanation or error}") from None
    except docker.errors.DockerException as error:  # ImageLoadError: what the engine said of the stream
        raise ImageBuildError(f"{archive} is not an image archive: {error}") from None
    return [tag for image in images for tag in image.tags] or [str(image.id) for image in images]


def remove_task(client: docker.DockerClient, tag: str) -> None:
    """Remove a task's image and its stage (what build_task made); absent ones are fine."""
    for ref in (tag, f"{tag}-task"):
        with contextlib.suppress(docker.errors.ImageNotFound, docker.errors.APIError):
            client.images.remove(ref, force=True)


DEVCONTAINER = "devcontainer"
"""The `harness.image` label of an image made from a repository's devcontainer.json."""
DEVCONTAINER_FROM = "harness.devcontainer.from"
"""The label that says what a devcontainer's image stands on (its `image`, or its Dockerfile's build)."""


def devcontainer_layer(root: Path = INPUTS_ROOT) -> bytes:
    """Dockerfile.sandbox without its PATH: a devcontainer's image keeps its own (a venv, a toolchain
    the image put first)."""
    text = (root / "Dockerfile.sandbox").read_text(encoding="utf-8")
    kept = re.sub(r"[ \t]*\\\n[ \t]*PATH=\S+", "", text)
    if "PATH=" in kept:
        raise ImageBuildError("Dockerfile.sandbox sets PATH where the devcontainer layer cannot leave it out")
    return kept.encode()


def build_devcontainer(
    client: docker.DockerClient,
    repo: Path,
    *,
    image: str | None = None,
    dockerfile: str | None = None,
    context: str = ".",
    build_args: dict[str, str] | None = None,
    target: str | None = None,
    environment: dict[str, str] | None = None,
    features: tuple[Path, dict[str, str]] | None = None,
    network: bool = False,
    pull_from: list[str] | None = None,
    log: Log = lambda _: None,
    root: Path = INPUTS_ROOT,
) -> tuple[str, str | None]:
    """The image a devcontainer describes, with harness's sandbox layer over it and `environment` as
    its variables: (its reference, the `devcontainer.metadata` label of what it stands on). Nothing
    is pulled but from a registry in pull_from (ImageNotFound names an image the engine lacks, and
    the registry to allow); the repository's Dockerfile builds
    from its context inside the repository, its RUN steps without network unless `network`; features:
    a build context (its Dockerfile over `BASE`) and its build args, built over the devcontainer's
    image the same way; the layer is current once built for the same inputs (the engine's build
    cache serves an unchanged Dockerfile)."""
    if dockerfile is not None:
        text = (repo / dockerfile).read_text(encoding="utf-8", errors="replace")
        for wanted in asked_images(text, build_args, f"the devcontainer's {dockerfile}"):
            _present(client, wanted, pull_from or [], log, f"the devcontainer's Dockerfile needs {wanted}")
            _onbuild_checked(client, wanted, "the devcontainer's Dockerfile builds over")
        digest = hashlib.sha256("\0".join([text, repr(sorted((build_args or {}).items())), target or ""]).encode())
        stage = f"harness/devcontainer-build:{digest.hexdigest()[:16]}"
        log(f"building {dockerfile} (context {context}, {'with' if network else 'no'} network)")
        with _build_errors(f"building the devcontainer's {dockerfile}"):
            client.images.build(
                path=str(repo / context),
                dockerfile=str((repo / dockerfile).resolve()),
                tag=stage,
                buildargs=dict(build_args or {}),
                target=target,
                labels={labels.IMAGE: DEVCONTAINER, labels.KIND: "devcontainer-build"},
                network_mode=None if network else "none",
                rm=True,
                forcerm=True,
                pull=False,
            )
        start = stage
    elif image is not None:
        start = image
        _present(client, image, pull_from or [], log, f"the devcontainer's image is {image}")
    else:
        raise ImageNotFound("the devcontainer names neither an image nor a Dockerfile")
    built = client.images.get(start)
    metadata = ((built.attrs.get("Config") or {}).get("Labels") or {}).get("devcontainer.metadata")
    origin = dockerfile or start
    if features is not None:
        built = _build_features(client, built, features, network, log)
        start, origin = built.id, f"{origin} + features"
    variables = sorted((environment or {}).items())  # each through a build arg: no value is Dockerfile text
    sandbox_file = (
        devcontainer_layer(root)
        + "".join(
            f"ARG HARNESS_ENV_{n}\nENV {name}=${{HARNESS_ENV_{n}}}\n" for n, (name, _) in enumerate(variables)
        ).encode()
    )
    args = {"BASE": start, **{f"HARNESS_ENV_{n}": value for n, (_, value) in enumerate(variables)}}
    inputs = sandbox_file + object_id(built).encode() + origin.encode() + repr(variables).encode()
    version = hashlib.sha256(inputs).hexdigest()[:16]
    ref = f"harness/{DEVCONTAINER}:{version}"
    _build_one(
        client, DEVCONTAINER, ref, version, log, fileobj=sandbox_file, buildargs=args,
        extra_labels={labels.KIND: DEVCONTAINER, DEVCONTAINER_FROM: origin},
    )  # fmt: skip
    return ref, metadata


def registry_of(reference: str) -> str:
    """The registry an image reference names (`docker.io` when its first part names no host)."""
    first, _, rest = reference.partition("/")
    return first if rest and ("." in first or ":" in first or first == "localhost") else "docker.io"


def _present(client: docker.DockerClient, reference: str, pull_from: list[str], log: Log, what: str) -> None:
    """reference on the engine: there already, or pulled when its registry is one the user allows;
    ImageNotFound naming the registry to allow (or the pull's failure) otherwise."""
    if _image_id(client, reference) is not None:
        return
    registry = registry_of(reference)
    if registry not in pull_from:
        raise ImageNotFound(
            f"{what}, which this engine does not have: harness pulls only from a registry you allow "
            f"(--pull-from {registry}), or load it yourself (`harness images import FILE.tar`)"
        )
    log(f"pulling {reference} from {registry}")
    try:
        if "@" in reference:  # by digest: the SDK takes it whole
            client.images.pull(reference)
        else:
            name, tag = _split_tag(reference)
            client.images.pull(name, tag=tag or "latest")
    except docker.errors.APIError as error:
        raise ImageNotFound(f"{what}: pulling it from {registry} failed: {error.explanation or error}") from None


def _split_tag(reference: str) -> tuple[str, str | None]:
    last = reference.rsplit("/", 1)[-1]
    return (reference.rsplit(":", 1)[0], last.rsplit(":", 1)[1]) if ":" in last else (reference, None)


def _build_features(
    client: docker.DockerClient, base: Any, features: tuple[Path, dict[str, str]], network: bool, log: Log
) -> Any:
    """The devcontainer's features installed over base (their context's Dockerfile), cached by the
    base and the context's content."""
    context, args = features
    digest = hashlib.sha256(object_id(base).encode() + repr(sorted(args.items())).encode())
    for path in sorted(p for p in context.rglob("*") if p.is_file()):
        digest.update(path.relative_to(context).as_posix().encode() + b"\0" + path.read_bytes())
    stage = f"harness/devcontainer-features:{digest.hexdigest()[:16]}"
    if _image_id(client, stage) is None:
        log(f"installing the devcontainer's features ({'with' if network else 'no'} network)")
        with _build_errors("installing the devcontainer's features"):
            client.images.build(
                path=str(context),
                tag=stage,
                buildargs={"BASE": object_id(base), **args},
                labels={labels.IMAGE: DEVCONTAINER, labels.KIND: "devcontainer-build"},
                network_mode=None if network else "none",
                rm=True,
                forcerm=True,
                pull=False,
            )
    return client.images.get(stage)


AGENT_KIND = "agent"
"""The `harness.kind` of a hosted agent's image (a cache: `harness images prune` may remove it)."""


def agent_image(
    client: docker.DockerClient,
    name: str,
    base: str,
    key: str,
    make_context: Callable[[Path], Path],
    log: Log = lambda _: None,
) -> str:
    """A hosted agent's image over base (a reference the engine holds): `harness/agent-NAME:VERSION`,
    VERSION from key (what goes into it) and the base's id; built only when the engine lacks it, from
    the folder make_context fills (its Dockerfile over `ARG BASE`), one build at a time per machine."""
    base_id = _image_id(client, base)
    if base_id is None:
        raise ImageNotFound(f"{base} is not present: build it (`harness images build`) before its agent's image")
    version = hashlib.sha256(f"{key}\0{base_id}".encode()).hexdigest()[:16]
    ref = f"harness/agent-{name}:{version}"
    if _image_id(client, ref) is not None:
        return ref
    with _build_lock(log, f"agent-{name}"), tempfile.TemporaryDirectory(prefix="harness-agent-image-") as scratch:
        if _image_id(client, ref) is None:  # another process may have built it while this one waited
            context = make_context(Path(scratch))
            _build_one(
                client, f"agent-{name}", ref, version, log, path=context, buildargs={"BASE": base_id},
                extra_labels={labels.KIND: AGENT_KIND},
            )  # fmt: skip
    return ref
