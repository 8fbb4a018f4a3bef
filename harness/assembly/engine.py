"""The composition root's one door to the container engine.

Every engine connection harness makes outside the sandbox package is made here: the sandboxes of
runs and of one-call commands, the images, the prunes, what `harness doctor` asks of the engine. The
CLI, the batch worker and the integrations call these functions and never import `sandbox.docker`
(an import contract keeps it so); the benches may, since they measure the parts on purpose.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

if TYPE_CHECKING:
    import docker

    from harness.config import Devcontainer
    from harness.tools.mcp import Launched
    from sandbox.docker.containers import DockerSandbox
    from sandbox.docker.images import ImageStatus as ImageStatus
    from sandbox.docker.prune import CachePrune, Swept
    from sandbox.docker.servers import ServicesNetwork
    from sandbox.envelope import Envelope
    from sandbox.session.records import StepImages
    from sandbox.spec import Sandbox, SandboxSpec

__all__ = [
    "EngineFacts",
    "build_env",
    "build_images",
    "connect",
    "devcontainer_image",
    "engine_facts",
    "env_images",
    "execute_once",
    "image_ref",
    "image_rows",
    "one_shot_sandbox",
    "prune_containers",
    "prune_crashed",
    "prune_image_cache",
    "prune_leftovers",
    "sandbox_for",
    "step_images",
    "toolchain_version",
]


def connect(docker_host: str | None, *, timeout: int = 120) -> docker.DockerClient:
    """A client of the engine at docker_host (None: the default socket); EngineUnavailable, saying
    how to start one, when none answers. The first connection of a process also sweeps the engine,
    in the background, of what controllers provably gone left behind (`sweep_leftovers`)."""
    from sandbox.docker.engine import connect as connect_engine

    client = connect_engine(docker_host, timeout=timeout)
    sweep_leftovers(docker_host)
    return client


_SWEPT: set[str | None] = set()
SWEEP_EXIT_S = 5.0
"""How long a process that ends waits for its start's sweep to finish."""
SWEEP_OFF = "HARNESS_NO_SWEEP"
"""Set to 1 in a process's environment, its start sweeps nothing (a bench measuring starts)."""


def sweep_leftovers(docker_host: str | None, *, wait: bool = False) -> Swept | None:
    """Once per process and engine: remove the containers, volumes and networks whose maker is provably
    gone (sandbox.docker.prune.sweep), in a thread of its own so no command waits on it (at exit the
    process gives it SWEEP_EXIT_S more; wait: in this thread, and say what went). Any failure is
    silent: the next start, or `harness sandbox prune`, tries again."""
    import atexit
    import os
    import threading

    from sandbox.docker.prune import sweep

    if docker_host in _SWEPT and not wait:
        return None
    _SWEPT.add(docker_host)
    if os.environ.get(SWEEP_OFF) == "1" and not wait:
        return None

    def run() -> Swept | None:
        from sandbox.docker.engine import connect as connect_engine

        try:
            client = connect_engine(docker_host, timeout=30)
        except Exception:  # noqa: BLE001 - a sweep never fails a command
            return None
        try:
            return sweep(client)
        except Exception:  # noqa: BLE001
            return None
        finally:
            client.close()

    if wait:
        return run()
    thread = threading.Thread(target=run, name="harness-sweep", daemon=True)
    thread.start()
    atexit.register(thread.join, SWEEP_EXIT_S)
    return None


@contextlib.contextmanager
def engine(docker_host: str | None, *, timeout: int = 120) -> Iterator[docker.DockerClient]:
    """A client for the duration of a block, closed after it."""
    client = connect(docker_host, timeout=timeout)
    try:
        yield client
    finally:
        client.close()


def sandbox_for(
    client: docker.DockerClient,
    run_id: str,
    session_id: str | None,
    *,
    pool_size: int,
    pool_initial: int | None = None,
    share_netns: bool = True,
    first_apart: bool = True,
    owns_client: bool = False,
    engine_removes: bool = False,
) -> DockerSandbox:
    """The one way a DockerSandbox is made: a run's (warm pool; on an engine elsewhere, a shared
    namespace holder), or a one-call command's (`pool_size=0, share_netns=False`: a holder or a warm
    container would double the cost of the only start)."""
    from sandbox.docker.containers import DockerSandbox

    return DockerSandbox(
        client,
        run_id=run_id,
        session_id=session_id,
        pool_size=pool_size,
        pool_initial=pool_size if pool_initial is None else pool_initial,
        share_netns=share_netns,
        first_apart=first_apart,
        owns_client=owns_client,
        engine_removes=engine_removes,
    )


def one_shot_sandbox(
    docker_host: str | None, run_id: str, session_id: str | None = None, *, engine_removes: bool = False
) -> DockerSandbox:
    """A sandbox for commands that make one call each (`harness exec`, `harness tool`, the warm
    service); engine_removes: its used containers are left to the engine to remove (a one-shot
    `harness exec` ends without waiting for the removal)."""
    return sandbox_for(
        connect(docker_host),
        run_id,
        session_id,
        pool_size=0,
        share_netns=False,
        owns_client=True,
        engine_removes=engine_removes,
    )


def step_images(sandbox: Sandbox) -> StepImages | None:
    """The session's step-image operations on the sandbox's engine (None for an engine-less sandbox)."""
    from sandbox.docker.containers import DockerSandbox
    from sandbox.docker.step_images import EngineStepImages

    return EngineStepImages(sandbox.client) if isinstance(sandbox, DockerSandbox) else None


def engine_step_images(docker_host: str | None) -> StepImages:
    """Step-image operations on the engine at docker_host (removing a session removes its images)."""
    from sandbox.docker.step_images import EngineStepImages

    return EngineStepImages(connect(docker_host))


def session_images() -> list[str]:
    """The images harness builds that a session may run in (`py311`, `node`, ...; not the bases)."""
    from sandbox.docker import images

    return [name for name in images.image_names() if name not in ("sandbox", "base")]


def image_ref(client_or_host: docker.DockerClient | str | None, image: str) -> str:
    """The local reference of a harness image name or image reference; ImageNotFound (how to build
    it) when the engine does not hold it."""
    from sandbox.docker.engine import resolve_image

    if client_or_host is None or isinstance(client_or_host, str):
        with engine(client_or_host) as client:
            return resolve_image(client, image)[0]
    return resolve_image(client_or_host, image)[0]


def agent_image(
    client_or_host: docker.DockerClient | str | None, agent: str, base: str, log: Callable[[str], None] = lambda _: None
) -> str:
    """The image of hosted agent `agent` over the harness image (or reference) base: built once per
    machine for what goes into it (harness.environment.agents), then reused."""
    from harness.environment.agents import agent_named, build_context, image_key
    from sandbox.docker import images
    from sandbox.docker.engine import translate

    hosted = agent_named(agent, "agent image")
    if client_or_host is None or isinstance(client_or_host, str):
        with engine(client_or_host, timeout=1800) as client:
            return agent_image(client, agent, base, log)
    client = client_or_host
    with translate(f"building {hosted.image_name}"):
        return images.agent_image(
            client,
            hosted.name,
            image_ref(client, base),
            image_key(hosted),
            lambda into: build_context(hosted, into),
            log,
        )


def agent_images(
    docker_host: str | None, agents: list[str], base: str, log: Callable[[str], None] = lambda _: None
) -> list[ImageStatus]:
    """The images of these hosted agents over base, built side by side (each agent's build is locked on
    its own, so another process building another agent's goes on too); a row of `images build` each."""
    import functools

    from sandbox.docker import images

    with engine(docker_host, timeout=1800) as client:
        refs = images.at_once([functools.partial(agent_image, client, agent, base, log) for agent in agents])
    return [image_status(docker_host, f"agent-{agent}", ref) for agent, ref in zip(agents, refs, strict=True)]


def image_status(docker_host: str | None, name: str, ref: str) -> ImageStatus:
    """The row `harness images build` shows for an image it just built (or found current)."""
    import docker.errors

    from sandbox.docker.images import ImageStatus

    with engine(docker_host) as client:
        try:
            found = str(client.images.get(ref).id)
        except docker.errors.DockerException:
            found = None
    return ImageStatus(name=name, ref=ref, status="current", image_id=found)


def check_images(docker_host: str | None, names: list[str]) -> None:
    """Every image exists (ImageNotFound says how to build it), before anything starts."""
    with engine(docker_host) as client:
        for name in names:
            image_ref(client, name)


def image_rows(docker_host: str | None) -> list[ImageStatus]:
    """Every harness image: current, stale (built from older inputs) or missing."""
    from sandbox.docker import images

    with engine(docker_host) as client:
        return images.list_images(client)


def build_images(docker_host: str | None, name: str | None, log: Callable[[str], None]) -> list[ImageStatus]:
    """Build the base (offline if need be), the sandbox layer and the images; current ones are skipped."""
    from sandbox.docker import images
    from sandbox.docker.engine import translate

    with translate("building images"), engine(docker_host, timeout=1800) as client:
        return images.build(client, name, log=log)


def prune_containers(
    docker_host: str | None,
    *,
    everything: bool = False,
    run_id: str | None = None,
    extra: Mapping[str, str] | None = None,
) -> int:
    """Remove leftover harness containers (orphaned ones, or all with everything), of one run or
    carrying extra labels when given; how many went."""
    from sandbox.docker.prune import prune

    with engine(docker_host) as client:
        return prune(client, everything=everything, run_id=run_id, extra=extra)


def left_by_run(docker_host: str | None, run_id: str, timeout: int = 5) -> Swept:
    """What the run (a batch's run id) left on the engine after it ended (an engine that does not
    answer within timeout seconds: SandboxError, and nothing is counted)."""
    from sandbox.docker.prune import left_by_run as count

    with engine(docker_host, timeout=timeout) as client:
        return count(client, run_id)


def prune_proxies() -> list[int]:
    """End the egress proxies whose controller is gone (each ends itself within a second of it; one
    that could not, or whose owner's pid was reused, goes here); their pids."""
    import os
    import signal

    from sandbox.network.egress import leftover_proxies

    ended = []
    for pid in leftover_proxies():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            ended.append(pid)
    return ended


def prune_crashed(docker_host: str | None, sessions: Path, session_id: str) -> int:
    """Remove the containers a crashed controller of this session left running (never a live one's)."""
    from sandbox.docker.prune import prune_session

    with engine(docker_host) as client:
        return prune_session(client, session_id, sessions)


def prune_leftovers(docker_host: str | None, sessions: Path) -> tuple[list[str], dict[str, int]]:
    """Remove images of deleted sessions of the state directory (and of temporary state directories
    gone from this machine) and folders of creates that never finished; what went, and the other
    state directories gone from this machine whose images stay (how many each holds)."""
    from sandbox.docker.prune import find_session_leftovers, remove_leftovers

    with engine(docker_host) as client:
        found = find_session_leftovers(client, sessions)
        return remove_leftovers(client, found), found.gone_states


def prune_image_cache(
    docker_host: str | None, state_dirs: list[Path], *, run_id: str | None = None, dry_run: bool = False
) -> CachePrune:
    """Remove the cached images (a devcontainer's, a setup's) that no session of these state
    directories names and no container uses; what went and what stayed. A session record that cannot
    be read stops it before anything is removed (DamagedError naming the file)."""
    from harness.errors import DamagedError
    from sandbox.docker.prune import UnreadableRecord, names_in_sessions, prune_cache

    try:
        named = names_in_sessions(state_dirs)
    except UnreadableRecord as error:
        raise DamagedError(
            f"cannot read {error.path} ({error.__cause__ or error}): which images that session needs is unknown, "
            "so nothing was removed (move the folder away or remove it with `harness session rm`)"
        ) from None
    with engine(docker_host) as client:
        return prune_cache(client, named, run_id=run_id, dry_run=dry_run)


@overload
def execute_once(
    docker_host: str | None, run_id: str, path: Path, command: list[str], spec: SandboxSpec, keep: Path | None
) -> Envelope: ...


@overload
def execute_once(
    docker_host: str | None,
    run_id: str,
    path: Path,
    command: list[str],
    spec: SandboxSpec,
    keep: Path | None,
    *,
    allow_net: list[str],
    trust: Path | None = None,
) -> tuple[Envelope, list[dict[str, Any]]]: ...


def execute_once(
    docker_host: str | None,
    run_id: str,
    path: Path,
    command: list[str],
    spec: SandboxSpec,
    keep: Path | None,
    *,
    allow_net: list[str] | None = None,
    trust: Path | None = None,
) -> Envelope | tuple[Envelope, list[dict[str, Any]]]:
    """Run command on a fresh copy of path in one disposable container; optionally keep the copy.
    With allow_net, the call reaches those hosts through an egress proxy of its own (trusting the
    CA bundle trust, `--ca-bundle`), and the proxy's requests come back with the envelope."""
    from sandbox.network.egress import Egress
    from sandbox.network.netlog import read_log
    from sandbox.session.workspace import copy_repository
    from sandbox.tree import copy_tree, remove_tree

    scratch = Path(tempfile.mkdtemp(prefix="harness-exec-"))
    try:
        workspace = scratch / "workspace"
        copy_repository(path, workspace)
        with contextlib.ExitStack() as stack:
            box = stack.enter_context(one_shot_sandbox(docker_host, run_id, engine_removes=True))
            if allow_net:
                proxy = stack.enter_context(Egress(allow_net, scratch / "network.jsonl", trust=trust))
                spec = spec.model_copy(update={"egress": str(proxy.folder)})
            envelope = box.run(command, workspace=workspace, spec=spec)
        if keep is not None:
            copy_tree(workspace, keep)
        if allow_net is None:
            return envelope
        return envelope, read_log(scratch / "network.jsonl")
    finally:
        remove_tree(scratch, ignore_errors=True)


def build_env(docker_host: str | None, language: str, release: str, log: Callable[[str], None]) -> str:
    """The language's image on another Debian release (built once, then found by its tag)."""
    from sandbox.docker import images

    with engine(docker_host) as client:
        return images.build_env(client, language, release, log)


def env_choices() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The languages an environment is built for, and the Debian releases it is built from."""
    from sandbox.docker import images

    return tuple(images.LANGUAGE_IMAGES), images.RELEASES


def build_env_row(docker_host: str | None, language: str, release: str, log: Callable[[str], None]) -> ImageStatus:
    """build_env, said as a row of `harness images build`'s table."""
    from sandbox.docker import images

    ref = build_env(docker_host, language, release, log)
    return images.ImageStatus(name=f"env-{language}:{release}", ref=ref, status="current")


def env_images(docker_host: str | None) -> dict[str, str]:
    """The environments built on the engine: image tag -> language."""
    from sandbox.docker import images

    with engine(docker_host) as client:
        return images.env_images(client)


def devcontainer_image(
    client: docker.DockerClient,
    repo: Path,
    found: Devcontainer,
    *,
    network: bool,
    pull_from: list[str],
    log: Callable[[str], None],
) -> Devcontainer:
    """found with the image calls start from built (its Dockerfile or image, harness's sandbox layer
    over it) and what the base image's `devcontainer.metadata` label asked for listed as dropped. A
    build the repository broke is a setup that failed (SetupError); one its file asks for what no build
    may stays BuildRefused (the file must change)."""
    import tempfile

    from harness.environment.devcontainer import metadata_dropped
    from harness.environment.features import layout
    from sandbox.docker import images
    from sandbox.errors import BuildRefused, ImageBuildError, SetupError

    environment = {name: value for name, value in found.environment.items() if name != "PATH"}
    with tempfile.TemporaryDirectory(prefix="harness-features-") as context:
        features = None
        if found.features or "PATH" in found.environment:  # installed, then PATH extended, over the image
            features = (Path(context), layout(found.features, Path(context), found.environment.get("PATH"))[1])
        try:
            ref, metadata = images.build_devcontainer(
                client,
                Path(repo),
                image=found.image,
                dockerfile=found.dockerfile,
                context=found.context,
                build_args=found.build_args,
                target=found.target,
                environment=environment,
                features=features,
                network=network,
                pull_from=pull_from,
                log=log,
            )
        except BuildRefused:
            raise
        except ImageBuildError as error:  # the repository's build, not the engine
            raise SetupError(f"the devcontainer's image did not build: {error}") from None
    return found.model_copy(update={"built": ref, "dropped": [*found.dropped, *metadata_dropped(metadata)]})


def build_task_image(
    docker_host: str | None, context: Path, tag: str, log: Callable[[str], None] = lambda _: None, run_id: str = ""
) -> tuple[str, str]:
    """A task's environment built without pulls, with harness's layer over it: (tag, working dir).
    Labelled with this process (and run_id): `harness sandbox prune` removes it once the process is gone."""
    from sandbox.docker import images
    from sandbox.owner import SANDBOX_UID

    with engine(docker_host) as client:
        return images.build_task(client, context, tag, SANDBOX_UID, log, run_id)


def remove_task_image(docker_host: str | None, tag: str) -> None:
    from sandbox.docker import images

    with engine(docker_host) as client:
        images.remove_task(client, tag)


def copy_out_of_image(docker_host: str | None, image: str, path: str, target: Path, run_id: str) -> None:
    """What image holds at path, written into the host folder target."""
    from sandbox.docker import images

    with engine(docker_host) as client:
        images.copy_out(client, image, path, target, run_id)


def import_images(docker_host: str | None, archive: Path) -> list[str]:
    """Load an image archive (`docker save` output) into the engine; the tags it brought."""
    from sandbox.docker import images

    with engine(docker_host) as client:
        return images.load_archive(client, archive)


def mcp_launcher(
    docker_host: str | None,
    run_id: str,
    spec: SandboxSpec,
    argv: list[str],
    workspace: Path,
    *,
    writable: bool,
    environment: dict[str, str],
    allow_net: list[str],
    network_log: Path,
) -> Callable[[], Launched]:
    """What starts one MCP server's container (hardened, stdin open, the workspace read-only unless
    writable, network none or an egress proxy of its own for allow_net): the bridge argv that joins a
    process's stdio to it, a stop that removes it, and a reader of its stderr."""
    import sys

    from harness.tools.mcp import Launched
    from sandbox import labels
    from sandbox.docker import servers
    from sandbox.network.egress import Egress
    from sandbox.owner import container_user

    def launch() -> Launched:
        client = connect(docker_host)
        proxy = Egress(allow_net, network_log).start() if allow_net else None
        server_spec = spec.model_copy(update={"egress": str(proxy.folder)}) if proxy is not None else spec
        marks = {**spec.labels, **labels.of_run(run_id, "mcp"), **labels.owner()}
        try:
            started = servers.start_server(
                client, server_spec, argv, workspace, user=container_user(), labels=marks, writable=writable,
                environment=environment,
            )  # fmt: skip
        except BaseException:
            if proxy is not None:
                proxy.stop()
            client.close()
            raise

        def stop() -> None:
            servers.stop_server(client, started)
            if proxy is not None:
                proxy.stop()
            client.close()

        cid = started.cid
        bridge = [sys.executable, "-m", "sandbox.docker.attach", cid, docker_host or ""]
        return Launched(
            bridge, stop, lambda: servers.server_logs(client, cid), lambda: servers.running(client, cid), started.around
        )

    return launch


@dataclass
class AgentContainer:
    """A hosted agent's running container: the bridge argv that joins a process's stdio to its agent,
    its logs, and how to stop it."""

    bridge: list[str]
    stop: Callable[[], None]
    logs: Callable[[], str]


def start_agent(
    docker_host: str | None,
    run_id: str,
    spec: SandboxSpec,
    argv: list[str],
    workspace: Path,
    *,
    environment: dict[str, str],
    mounts: list[Any],
    relay: tuple[int, str],
) -> AgentContainer:
    """Start a hosted agent's container (sandbox.docker.servers.start_agent), labelled as the run's
    and this process's."""
    import sys

    from sandbox import labels
    from sandbox.docker import servers
    from sandbox.owner import container_user

    client = connect(docker_host)
    marks = {**spec.labels, **labels.of_run(run_id, "agent"), **labels.owner()}
    try:
        started = servers.start_agent(
            client, spec, argv, workspace, user=container_user(), labels=marks, environment=environment,
            mounts=mounts, relay=relay,
        )  # fmt: skip
    except BaseException:
        client.close()
        raise

    def stop() -> None:
        servers.stop_server(client, started)
        client.close()

    bridge = [sys.executable, "-m", "sandbox.docker.attach", started.cid, docker_host or ""]
    return AgentContainer(bridge, stop, lambda: servers.server_logs(client, started.cid))


@dataclass
class RunningServices:
    """A session's services while they run: their network, and how to read and stop them."""

    network: str
    containers: dict[str, str]
    logs: Callable[[str, int], str]
    stop: Callable[[], None]
    refresh: Callable[[], None] | None = None
    """On an engine elsewhere, where each service has a copy of the workspace: sends each copy what
    changed here (run before every call that joins the services' network); None where they see the
    workspace itself."""
    joining: dict[str, Any] = field(default_factory=dict)
    """The host settings of every call that joins the network (on Podman: no IPv6 on its interface;
    on rootful Podman, which answers no names there, the services' addresses: `ServicesNetwork.joining`);
    {} on Docker, which turns IPv6 off there itself and answers the names."""


def start_services(
    docker_host: str | None,
    run_id: str,
    session_id: str,
    spec: SandboxSpec,
    workspace: Path,
    services: Mapping[str, Any],
) -> RunningServices:
    """The services (harness.config.ServiceConfig by name) on a new internal network of the session,
    each ready (its health argv exits 0, or it runs) before this returns; SetupError otherwise."""
    import threading
    import time
    import uuid

    from sandbox import labels
    from sandbox.docker import servers
    from sandbox.errors import SetupError
    from sandbox.owner import container_user

    client = connect(docker_host)
    name = f"harness-svc-{session_id}-{uuid.uuid4().hex[:6]}"
    marks = {**spec.labels, **labels.of_run(run_id, "service"), **labels.owner()}
    containers: dict[str, str] = {}
    started: list[servers.Started] = []

    def stop() -> None:
        for each in started:
            servers.stop_server(client, each)
        servers.remove_network(client, name)
        client.close()

    try:
        network = servers.create_network(client, name, marks, list(services))
        for service, declared in services.items():
            service_spec = spec.model_copy(update={"image": declared.image, "network": name, "egress": None})
            started.append(servers.start_service(
                client, service_spec, declared.command, workspace, name=service, network=network,
                user=declared.user or container_user(), labels={**marks, labels.KIND: "service"},
                environment=declared.env, tmpfs=declared.tmpfs,
            ))  # fmt: skip
            containers[service] = started[-1].cid
        for service, declared in services.items():
            deadline = time.monotonic() + declared.ready_timeout_s
            while True:
                if not servers.running(client, containers[service]):
                    log = servers.server_logs(client, containers[service], 20, stdout=True).strip().splitlines()
                    code = servers.exit_status(client, containers[service])
                    said = f": {log[-1][:300]}" if log else ""
                    if not log and code is not None:
                        said = f" (it exited with {code} and wrote nothing)"
                    raise SetupError(f"service {service} stopped before it was ready{said}")
                if declared.health is None or servers.exec_in(client, containers[service], declared.health) == 0:
                    break
                if time.monotonic() > deadline:
                    raise SetupError(
                        f"service {service} was not ready within {declared.ready_timeout_s:g}s "
                        f"(its health check {' '.join(declared.health)} never exited 0)"
                    )
                time.sleep(0.5)
        if network.addresses:  # named in hosts files, on a bridge this machine's firewall sees
            _services_reached(docker_host, run_id, spec, network)
    except BaseException:
        stop()
        raise

    def logs(service: str, lines: int) -> str:
        return servers.server_logs(client, containers[service], lines, stdout=True)

    copied = [each for each in started if each.around is not contextlib.nullcontext]
    sending = threading.Lock()  # a turn's calls start at once: one of them sends, the others find it sent

    def refresh() -> None:
        with sending:
            for each in copied:
                with each.around():  # a service's copy is read-only: sent to, never brought back
                    pass

    return RunningServices(name, containers, logs, stop, refresh if copied else None, network.joining())


REACH = """import socket, sys
silent = []
for name in sys.argv[1:]:
    probe = socket.socket()
    probe.settimeout(3)
    try:
        probe.connect((name, 9))
    except ConnectionRefusedError:
        pass
    except OSError:
        silent.append(name)
    finally:
        probe.close()
print(" ".join(silent))
sys.exit(3 if silent else 0)
"""
"""A call's check that each service answers at its name (on a port nothing serves: a refusal is an answer)."""


def _services_reached(docker_host: str | None, run_id: str, spec: SandboxSpec, network: ServicesNetwork) -> None:
    """A call on the network reaches each service by name, or SetupError. Where the engine answers no
    names (rootful Podman) the bridge carries the network's traffic through this machine's firewall,
    and one that drops what it forwards (Docker sets the FORWARD policy to DROP) would leave every
    call's connection to a service silent until its timeout."""
    from sandbox.errors import SetupError
    from sandbox.tree import remove_tree

    scratch = Path(tempfile.mkdtemp(prefix="harness-reach-"))
    try:
        with one_shot_sandbox(docker_host, run_id) as box:
            unset = box.settings_on(network.name, network.joining())
            try:
                envelope = box.run(
                    ["python3", "-c", REACH, *network.addresses],
                    workspace=scratch,
                    spec=spec.model_copy(update={"network": network.name, "egress": None, "timeout_s": 60}),
                )
            finally:
                unset()
    finally:
        remove_tree(scratch)
    if envelope.exit_code == 3:
        silent = envelope.stdout.strip() or "?"
        raise SetupError(
            f"a call on the services network reached no answer from {silent}: this machine's firewall drops what "
            "the network's bridge carries (Docker sets the FORWARD policy to DROP, and Podman adds no rule for an "
            "internal network); `make podman` (scripts/ensure-podman.sh) lets each Podman bridge carry its own "
            "containers' traffic"
        )
    if envelope.exit_code not in (0, 126, 127):  # (an image without python3 is not checked)
        raise SetupError(f"checking that calls reach the services failed: {envelope.stderr.strip()[-300:]}")


def toolchain_version(docker_host: str | None, run_id: str, image: str, argv: list[str]) -> str | None:
    """What argv (a `--version` command) prints in a fresh container of image, over an empty
    workspace, with the call posture (no network, the limits); "" when the image has no such program
    (exit 126 or 127), None when the probe itself failed (another exit, a timeout)."""
    from sandbox.spec import SandboxSpec
    from sandbox.tree import remove_tree

    scratch = Path(tempfile.mkdtemp(prefix="harness-probe-"))
    try:
        with one_shot_sandbox(docker_host, run_id) as box:
            envelope = box.run(argv, workspace=scratch, spec=SandboxSpec(image=image, timeout_s=60))
        if envelope.exit_code == 0 and envelope.stdout.strip():
            return envelope.stdout.strip()
        return "" if envelope.exit_code in (126, 127) else None
    finally:
        remove_tree(scratch, ignore_errors=True)


@dataclass(frozen=True)
class EngineFacts:
    """What `harness doctor` reports of the engine."""

    version: str
    api_version: str
    address: str
    product: str
    """Docker or Podman (through its Docker-compatible API)."""
    rootless: bool
    cgroup_version: str
    storage_driver: str
    root_dir: str
    runtimes: dict[str, list[str]] = field(default_factory=dict)
    """Registered runtimes and their arguments."""
    unenforced: dict[str, list[str]] = field(default_factory=dict)
    """Per runtime, the limits it does not enforce on this engine."""
    images: list[ImageStatus] = field(default_factory=list)
    remote: str = ""
    """Why calls' workspaces travel as archives (empty: they are bind-mounted)."""
    another_machine: bool = False
    """Whether that is because the engine runs on another machine."""
    remote_note: str = ""
    """What travels as archives to such an engine, and what needs one on this machine."""
    leftovers: Swept | None = None
    """What controllers provably gone had left, removed now (every start of harness sweeps them)."""
    unowned: int = 0
    """Containers of a controller that is gone that name no identity (`harness sandbox prune` removes them)."""
    runsc_refused: str = ""
    """Why a call under runsc is refused on this engine though it lists runsc (empty: it is not)."""


def engine_facts(docker_host: str | None) -> EngineFacts:
    """The engine's version, runtimes (and what each leaves unenforced), storage and images."""
    from sandbox.docker import images
    from sandbox.docker.engine import (
        PODMAN_NO_GVISOR,
        REMOTE_SERVED,
        another_machine,
        elsewhere,
        engine_kind,
        runtimes_of,
        translate,
        unenforced_limits,
    )
    from sandbox.docker.prune import left_unowned, sweep

    with engine(docker_host) as client, translate("asking the engine"):
        version, info = client.version(), client.info()
        options = runtimes_of(info)
        product, rootless = engine_kind(version, info)
        remote = elsewhere(client, info)
        return EngineFacts(
            version=str(version.get("Version")),
            api_version=str(version.get("ApiVersion")),
            address=str(client.api.base_url),
            product=product,
            rootless=rootless,
            cgroup_version=str(info.get("CgroupVersion", "?")),
            storage_driver=str(info.get("Driver")),
            root_dir=str(info.get("DockerRootDir") or "/"),
            runtimes=options,
            unenforced={name: unenforced_limits(args, name, info) for name, args in options.items()},
            images=images.list_images(client),
            remote=remote or "",
            another_machine=another_machine(client, info) is not None,
            remote_note=REMOTE_SERVED if remote else "",
            runsc_refused=PODMAN_NO_GVISOR if product == "Podman" and "runsc" in options else "",
            leftovers=sweep(client),
            unowned=left_unowned(client),
        )
