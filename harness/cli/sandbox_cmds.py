"""`harness exec`, `doctor`, `images build|list` and `sandbox prune`."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from harness.cli import environment
from harness.cli.app import (
    CA_BUNDLE,
    ExitCode,
    absolute,
    app,
    console,
    docker_host,
    err_console,
    fail,
    group,
    reported,
    state_dir,
)
from harness.visible import visible

if TYPE_CHECKING:
    from harness.assembly.engine import ImageStatus
    from sandbox.envelope import Envelope
    from sandbox.spec import SandboxSpec

images_app = group("Build and list the sandbox images.")
sandbox_app = group("Maintain sandbox containers.")
app.add_typer(images_app, name="images")
app.add_typer(sandbox_app, name="sandbox")

FLAGS = {
    "image": "--image",
    "timeout_s": "--timeout",
    "memory": "--memory",
    "cpus": "--cpus",
    "pids": "--pids",
    "runtime": "--runtime",
    "network": "--network",
    "read_only_root": "--writable-root",
}


def build_spec(**fields: Any) -> SandboxSpec:
    """A SandboxSpec from CLI flags (None = default); a bad limit is a one-line usage error."""
    from pydantic import ValidationError

    from sandbox.spec import SandboxSpec

    try:
        return SandboxSpec(**{k: v for k, v in fields.items() if v is not None})
    except ValidationError as error:
        first = error.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else "limits"
        message = str(first["msg"]).removeprefix("Value error, ")
        fail(f"invalid {FLAGS.get(field, field)} {first.get('input')!r}: {message}", ExitCode.USAGE)


def execute(path: Path, command: list[str], spec: SandboxSpec, keep: Path | None) -> Envelope:
    """Run command on a fresh copy of path in one disposable container; optionally keep the copy."""
    if keep is not None and keep.exists():
        fail(f"--keep target already exists: {keep}", ExitCode.USAGE)
    warm = warm_execute(path, command, spec, keep)
    if warm is not None:
        return warm
    from harness.assembly import engine
    from harness.cli.failure import sigterm_interrupts

    with sigterm_interrupts():
        return engine.execute_once(docker_host(), environment.run_id("cli"), path, command, spec, keep)


def execute_with_network(
    path: Path, command: list[str], spec: SandboxSpec, keep: Path | None, allow_net: list[str], trust: str | None
) -> Envelope:
    """A one-shot call that may reach the allowed hosts (never through the warm service: its containers
    have no relay); every request through the proxy is listed on stderr after it."""
    from harness.assembly import engine
    from harness.cli.failure import sigterm_interrupts
    from harness.errors import UsageError
    from sandbox.network.allow import AllowError, parse

    if keep is not None and keep.exists():
        fail(f"--keep target already exists: {keep}", ExitCode.USAGE)
    try:
        parse(allow_net)
    except AllowError as error:
        raise UsageError(str(error)) from None
    with sigterm_interrupts():
        envelope, requests = engine.execute_once(
            docker_host(),
            environment.run_id("cli"),
            path,
            command,
            spec,
            keep,
            allow_net=allow_net,
            trust=Path(trust) if trust else None,
        )
    for line in request_lines(requests):
        err_console.print(line, soft_wrap=True, markup=False)
    return envelope


def request_lines(requests: list[dict[str, Any]]) -> list[str]:
    """One line per request through an egress proxy: allowed or refused (and why), bytes each way."""
    lines = []
    for request in requests:
        target = f"{request.get('method', '?')} {request.get('host', '?')}:{request.get('port', '?')}"
        if request.get("allowed"):
            lines.append(f"net: allowed {target}  ↑{request.get('sent', 0)} B ↓{request.get('received', 0)} B")
        else:
            lines.append(f"net: REFUSED {target}: {request.get('reason', '')}")
    return lines


def warm_execute(path: Path, command: list[str], spec: SandboxSpec, keep: Path | None) -> Envelope | None:
    """The same call through the warm service (a container started before it was needed), or None
    when no warm service runs for this engine."""
    from sandbox.envelope import Envelope
    from sandbox.warm import protocol
    from sandbox.warm.messages import ErrorReply, ExecRequest

    request = ExecRequest(
        path=str(path.resolve()),
        argv=command,
        spec=spec.model_dump(mode="json", exclude={"labels"}),
        keep=None if keep is None else str(keep.resolve()),
    )
    malformed = "the warm service sent a malformed reply; restart it (harness warm stop)"
    try:
        reply = protocol.execute(environment.warm_dir(), request)
    except protocol.Unavailable:
        return None
    except ValueError:
        fail(malformed, ExitCode.INTERNAL)
    if isinstance(reply, ErrorReply):
        fail(reply.error, reply.exit_code)
    try:
        return Envelope.model_validate(reply.envelope)
    except ValueError:  # pydantic's ValidationError is a ValueError
        fail(malformed, ExitCode.INTERNAL)


def print_envelope(envelope: Envelope, as_json: bool) -> None:
    """One JSON object for machines, or the model-facing rendering for people."""
    if as_json:
        print(json.dumps(envelope.model_dump(mode="json")))
        return
    status_style = "green" if envelope.status == "ok" else "red"
    console.print(f"[bold {status_style}]{envelope.headline()}[/]", soft_wrap=True)
    if envelope.stdout:
        console.print("[dim]--- stdout ---[/]")
        console.out(envelope.stdout.rstrip("\n"), highlight=False)
    if envelope.stderr:
        console.print("[dim]--- stderr ---[/]")
        console.out(envelope.stderr.rstrip("\n"), highlight=False)


@app.command("exec")
def exec_command(
    path: Path = typer.Argument(..., help="Repository to copy into a fresh workspace (never modified)."),
    command: list[str] = typer.Argument(..., help="Command to run after `--`."),
    image: str = typer.Option("py311", help="Harness image name (py311) or a local image reference."),
    timeout: float | None = typer.Option(None, "--timeout", help="Wall-clock limit in seconds [default: 120]."),
    memory: str | None = typer.Option(None, help="Memory limit, e.g. 512m, 1g [default: 1g]."),
    cpus: float | None = typer.Option(None, help="CPU quota in cores [default: 1]."),
    pids: int | None = typer.Option(None, help="Process limit [default: 256]."),
    runtime: str | None = typer.Option(None, help="OCI runtime: runc (default) or runsc (gVisor)."),
    network: str | None = typer.Option(None, help="Docker network mode [default: none]."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
    keep: Path | None = typer.Option(None, "--keep", help="Copy the resulting workspace to this new directory."),
    session: str | None = typer.Option(None, "--session", help="Create or continue this session: each exec is a step."),
    setup: list[str] = typer.Option(
        [],
        "--setup",
        help="With --session, on create: command run once before step 0 (repeatable); `auto`: detected; "
        "`devcontainer`: its devcontainer.json (its image and lifecycle commands).",
    ),
    setup_network: bool = typer.Option(False, "--setup-network", help="Allow network during --setup only."),
    setup_ca: Path | None = typer.Option(
        None, "--setup-ca", help="PEM CA bundle the setup container trusts (HTTPS through a proxy); setup only."
    ),
    setup_proxy: str | None = typer.Option(
        None, "--setup-proxy", help="HTTP(S) proxy URL for the setup commands only."
    ),
    setup_mounts: list[str] = typer.Option(
        [], "--setup-mount", help="HOST_DIR:CONTAINER_DIR bound read-only into the setup container (repeatable)."
    ),
    setup_timeout: float = typer.Option(
        900.0, "--setup-timeout", min=1, max=24 * 3600, help="Seconds all the setup commands together may take."
    ),
    allow_net: list[str] = typer.Option(
        [],
        "--allow-net",
        help="HOST[:PORT|:*], *.SUFFIX, ADDRESS[/BITS] or a preset (pypi, npm, crates, go, github, debian) the "
        "command (and --setup) may reach through an egress proxy (repeatable); every request is listed.",
    ),
    secret: list[str] = typer.Option(
        [],
        "--secret",
        help="NAME=ENV_VAR@HOST: the container's NAME is a placeholder; only requests to HOST get $ENV_VAR's "
        "value in its place, at the egress proxy (repeatable; HOST is allowed by it).",
    ),
    allow_net_ca: Path | None = typer.Option(
        None, "--allow-net-ca", help="PEM bundle the egress proxy also trusts for a --secret's host."
    ),
    ca_bundle: Path | None = CA_BUNDLE,
    writable_root: bool = typer.Option(
        False, "--writable-root", help="With --session: writable root; changes become the next step's image."
    ),
    workspace_quota: str | None = typer.Option(
        None, "--workspace-quota", help="With --session: bytes the workspace may hold, e.g. 2g (root only)."
    ),
    state: Path | None = typer.Option(None, "--state-dir", help="Where sessions live."),
) -> None:
    """Run CMD in a disposable hardened container on a fresh copy of PATH; exit with its exit code."""
    spec = build_spec(
        image=image, timeout_s=timeout, memory=memory, cpus=cpus, pids=pids, runtime=runtime, network=network
    )
    if not path.exists():
        fail(f"repository path does not exist: {path}", ExitCode.NOT_FOUND)
    asked = setup or setup_network or setup_ca or setup_proxy or setup_mounts or writable_root or workspace_quota
    if asked and session is None:
        fail(
            "--setup, --setup-network, --setup-ca, --setup-proxy, --setup-mount, --writable-root and "
            "--workspace-quota need --session ID",
            ExitCode.USAGE,
        )
    with reported():
        if session is not None:
            from harness.cli.session_cmds import exec_in_session, session_config

            config, devcontainer = session_config(
                path,
                setup=setup,
                setup_network=setup_network,
                setup_ca=absolute(setup_ca),
                setup_proxy=setup_proxy,
                setup_mounts=setup_mounts,
                setup_timeout=setup_timeout,
                allow_net=allow_net,
                allow_net_tools=bool(allow_net or secret),
                secrets=secret,
                allow_net_ca=absolute(allow_net_ca),
                ca_bundle=absolute(ca_bundle),
                writable_root=writable_root,
                workspace_quota=workspace_quota,
            )
            envelope = exec_in_session(
                path,
                command,
                spec,
                session_id=session,
                state=state,
                config=config,
                run_id=environment.run_id("cli"),
                devcontainer=devcontainer,
            ).envelope
        elif allow_net or secret:
            if secret:
                fail("--secret needs --session ID (its values reach only that session's egress proxy)", ExitCode.USAGE)
            envelope = execute_with_network(path, command, spec, keep, allow_net, absolute(ca_bundle))
        else:
            if ca_bundle is not None:
                fail("--ca-bundle is for a command with network: add --allow-net HOST", ExitCode.USAGE)
            envelope = execute(path, command, spec, keep)
    print_envelope(envelope, as_json)
    raise typer.Exit(envelope.exit_code)


@app.command("doctor")
def doctor() -> None:
    """Check the engine, runtimes, images and free disk; one fix-it line per problem."""
    from rich.markup import escape

    from harness.assembly import engine
    from sandbox.errors import SandboxError

    problems: list[str] = []
    try:
        facts = engine.engine_facts(docker_host())
    except SandboxError as error:
        fail(str(error), ExitCode.SANDBOX)
    runtimes = sorted(facts.runtimes)
    mode = "rootless" if facts.rootless else "rootful"
    api = f"Docker-compatible API {facts.api_version}" if facts.product != "Docker" else f"API {facts.api_version}"
    console.print(f"engine: {facts.product} {facts.version} ({mode}, {api}) at {facts.address}", markup=False)
    if facts.remote:
        where = "another machine" if facts.another_machine else "this machine"
        console.print(f"engine location: {where} ({facts.remote}): {facts.remote_note}", soft_wrap=True, markup=False)
    else:
        console.print("engine location: this machine (workspaces are bind-mounted)", markup=False)
    console.print(f"cgroups: v{facts.cgroup_version}  storage: {facts.storage_driver}", markup=False)
    console.print(
        f"runtimes: {', '.join(runtimes)}"
        + ("" if "runsc" in runtimes else "  (runsc/gVisor not registered: optional)")
    )
    for name in runtimes:
        # A note, not a problem: the user chose this runtime and its registration.
        if unenforced := facts.unenforced[name]:
            console.print(
                f"note: under runtime {name} these are not enforced here: {', '.join(unenforced)} "
                "(the wall clock and output caps are; gVisor's own devices are hidden); envelopes record this"
                + ("; add --oci-seccomp to its runtimeArgs to refuse device nodes" if "mknod" in unenforced else "")
            )
    runsc_args = facts.runtimes.get("runsc")
    if facts.runsc_refused:
        console.print(
            f"note: runsc is found but not supported on {facts.product} yet ({facts.runsc_refused}): a call asking "
            "for it is refused; --runtime runc works",
            soft_wrap=True,
            markup=False,
        )
    elif runsc_args is not None and not any(arg in ("--host-uds=open", "--host-uds=all") for arg in runsc_args):
        console.print(
            "note: runsc is registered without --host-uds=open: under it, --allow-net cannot reach the session's "
            "egress proxy (add it to runsc's runtimeArgs in /etc/docker/daemon.json)",
            soft_wrap=True,
            markup=False,
        )
    if "runc" not in runtimes:
        problems.append("runtime runc is missing: reinstall the engine (apt-get install docker.io)")
    for row in facts.images:
        console.print(f"image {row.name}: {row.status}" + (f" ({row.ref})" if row.ref else ""), markup=False)
        if row.status != "current":
            problems.append(f"image {row.name} is {row.status}: run `harness images build`")
    root = facts.root_dir
    if facts.another_machine:  # its root directory is on its machine's disk, not this one's
        console.print(f"free disk at {root}: not checked (the engine's machine)", markup=False)
    else:
        free = shutil.disk_usage(root if Path(root).exists() else "/").free
        console.print(f"free disk at {root}: {free / 1024**3:.1f} GiB", markup=False)
        if free < 5 * 1024**3:
            problems.append(
                f"less than 5 GiB free at {root}: run `harness sandbox prune --all` and `docker image prune`"
            )
    console.print(f"warm service: {_warm_state()}", soft_wrap=True, markup=False)
    console.print(f"leftovers: {leftover_line(facts.leftovers, facts.unowned)}", soft_wrap=True, markup=False)
    for preset in ("pypi", "npm", "go"):
        console.print(registry_line(preset), soft_wrap=True, markup=False)
    for problem in problems:
        err_console.print(f"[bold red]problem:[/] {escape(problem)}", soft_wrap=True)
    if problems:
        raise typer.Exit(int(ExitCode.SANDBOX))
    console.print("[green]all good[/]")


def leftover_line(swept: Any, unowned: int) -> str:
    """What controllers that are gone had left on the engine, in one line (doctor's)."""
    parts = [
        f"{count} {name}" for name, count in (("container(s)", swept.containers), ("volume(s)", swept.volumes),
                                              ("network(s)", swept.networks)) if swept is not None and count
    ]  # fmt: skip
    said = (
        f"removed {', '.join(parts)} that controllers now gone had left" if parts else "none of a controller now gone"
    )
    if unowned:
        said += f"; {unowned} container(s) of an older harness's controller that is gone: `harness sandbox prune`"
    return said


def registry_line(preset: str, resolve: Any = None) -> str:
    """How a registry's name resolves here, and the flags a setup that needs it takes (the name looked
    up on this machine, with a short bound; nothing is connected to)."""
    import ipaddress

    from sandbox.network.allow import PRESETS, refused_kind

    host = PRESETS[preset][0]
    try:
        addresses = (resolve or _resolve)(host)
    except OSError as error:
        return (
            f"registry {host}: does not resolve here ({error.strerror or error}): setups that need `{preset}` "
            "cannot fetch from it on this machine"
        )
    kinds = {address: refused_kind(ipaddress.ip_address(address)) for address in addresses}
    inside = [address for address, kind in kinds.items() if kind is not None]
    if not inside:
        return f"registry {host}: public address(es) {', '.join(addresses)}: `--allow-net {preset}` is enough"
    listed = " ".join(f"--allow-net {address}" for address in inside)
    return (
        f"registry {host}: resolves to {inside[0]} ({kinds[inside[0]]}): split DNS or an intercepting proxy; "
        f"a setup that needs it takes --allow-net {preset} {listed} --ca-bundle /etc/ssl/certs/ca-certificates.crt "
        "(the host's bundle, which trusts that proxy)"
    )


def _resolve(host: str) -> list[str]:
    """The addresses of host, within 3 s (OSError when it does not resolve in time)."""
    import concurrent.futures
    import socket

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(socket.getaddrinfo, host, 443, proto=socket.IPPROTO_TCP)
        try:
            found = future.result(timeout=3)
        except concurrent.futures.TimeoutError:
            raise OSError(f"no answer within 3 s for {host}") from None
    return list(dict.fromkeys(str(info[4][0]) for info in found))


def _warm_state() -> str:
    """One line on the warm service for this engine (not a problem either way: it is optional)."""
    from sandbox.warm import protocol

    try:
        reply = protocol.status(environment.warm_dir())
    except protocol.Unavailable:
        return "not running (optional: `harness warm start` takes the container start off one-shot commands)"
    return f"running (pid {reply.pid}, images {', '.join(reply.images)})"


def _print_images(rows: list[ImageStatus]) -> None:
    """The images as a table on a terminal; piped, as aligned columns with nothing cut (a table drawn
    to the pipe's 80 columns would cut the references with an ellipsis)."""
    from rich.table import Table

    from harness.cli.terminal import print_columns

    header = ["name", "status", "reference", "image id"]
    cells = [[r.name, r.status, r.ref or "-", (r.image_id or "-").removeprefix("sha256:")[:12]] for r in rows]
    if not console.is_terminal:
        print_columns(console, header, cells)
        return
    table = Table(*header)
    for row in cells:
        table.add_row(*row)
    console.print(table)


@images_app.command("build")
def images_build(
    name: str | None = typer.Argument(
        None,
        help="Image to build (default: all, unless --env is given); agent-NAME: a hosted agent's (over --over); "
        "agents: every hosted agent's.",
    ),
    over: str = typer.Option("py311", "--over", help="agent-NAME, agents: the image each agent's is built over."),
    envs: list[str] = typer.Option(
        [],
        "--env",
        metavar="LANGUAGE:RELEASE",
        help="Also build the language's environment on that Debian release (python:bullseye), as `tasks check "
        "--build-envs` would when a task needs it: before a night's batch, not during it. Repeatable.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Build the base (offline if need be), the sandbox layer and the images; current ones are skipped."""
    from rich.markup import escape

    from harness.assembly import engine

    wanted = [_env_wanted(spelled) for spelled in envs]
    log = lambda line: err_console.print(f"[dim]{escape(line)}[/]")  # noqa: E731
    with reported():
        if name == "agents" or (name is not None and name.startswith("agent-")):
            from harness.environment.agents import AGENTS

            agents = sorted(AGENTS) if name == "agents" else [name.removeprefix("agent-")]
            rows = engine.agent_images(docker_host(), agents, over, log)
        else:
            rows = engine.build_images(docker_host(), name, log=log) if name is not None or not wanted else []
        for language, release in wanted:
            rows.append(engine.build_env_row(docker_host(), language, release, log))
    if as_json:
        print(json.dumps([row.model_dump() for row in rows]))
    else:
        _print_images(rows)


def _env_wanted(spelled: str) -> tuple[str, str]:
    """(language, release) of LANGUAGE:RELEASE; a usage error naming what is known otherwise."""
    from harness.assembly.engine import env_choices

    languages, releases = env_choices()
    language, _, release = spelled.strip().lower().partition(":")
    if language not in languages or release not in releases:
        fail(
            f"--env {spelled!r}: give LANGUAGE:RELEASE, a language of {', '.join(languages)} and a "
            f"Debian release of {', '.join(releases)} (python:bullseye)",
            ExitCode.USAGE,
        )
    return language, release


@images_app.command("import")
def images_import(
    archive: Path = typer.Argument(..., metavar="FILE.tar", help="An image archive (docker save)."),
) -> None:
    """Load an image from a tar archive into the engine (harness never pulls: a task's FROM image
    that is not here comes in this way)."""
    from harness.assembly import engine

    if not archive.is_file():
        fail(f"no image archive at {archive}", ExitCode.NOT_FOUND)
    with reported():
        tags = engine.import_images(docker_host(), archive)
    console.print(f"imported {', '.join(tags)}", soft_wrap=True, markup=False)


@images_app.command("list")
def images_list(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List harness images: current, stale (built from older inputs) or missing."""
    from harness.assembly import engine

    with reported():
        rows = engine.image_rows(docker_host())
    if as_json:
        print(json.dumps([row.model_dump() for row in rows]))
    else:
        _print_images(rows)


@images_app.command("prune")
def images_prune(
    states: list[Path] = typer.Option(
        [],
        "--state-dir",
        help="Sessions whose images stay (repeatable; default: $HARNESS_STATE_DIR or the per-user data dir). "
        "A batch's sessions are in OUT/sessions.",
    ),
    run: str | None = typer.Option(
        None,
        "--run",
        help="Only images this run made (label harness.run: a setup's result has it; a devcontainer's image, "
        "shared by content, has none).",
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Say what would go; remove nothing."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Remove cached images no session of the state directories names and no container uses: a
    devcontainer's image and its build stages, a setup's result (a new session makes them again; a
    session that names one needs it to resume). harness's own images (base, sandbox, py311, ...) and
    a session's step images are not caches: they stay."""
    from harness.assembly import engine

    dirs = [state_dir(path) for path in states] or [state_dir(None)]
    for given, folder in zip(states, dirs, strict=False):  # a mistyped one would keep no session's images
        if not folder.is_dir():
            fail(f"--state-dir {given}: no such folder (its sessions' images would not be kept)", ExitCode.NOT_FOUND)
    with reported():
        done = engine.prune_image_cache(docker_host(), dirs, run_id=run, dry_run=dry_run)
    if as_json:
        print(json.dumps({"dry_run": dry_run, **done.model_dump()}))
        return
    verb = "would remove" if dry_run else "removed"
    for ref in done.removed:
        console.print(f"{verb} {ref}", markup=False)
    freed = "" if dry_run else f", {done.freed_bytes / 1e6:,.0f} MB freed"
    console.print(
        f"{verb} {len(done.removed)} cached image(s){freed}; kept {len(done.named)} a session names, "
        f"{len(done.in_use)} in use",
        markup=False,
    )


@sandbox_app.command("prune")
def sandbox_prune(
    everything: bool = typer.Option(False, "--all", help="Remove every harness container, live runs too."),
    state: Path | None = typer.Option(None, "--state-dir", help="Sessions whose leftovers to remove."),
    run: str | None = typer.Option(None, "--run", help="Only containers of this run id (label harness.run)."),
) -> None:
    """Remove leftover containers of crashed runs (whose controller process is gone) and the volumes
    they left that no container uses, images of deleted sessions of the state directory and of
    temporary state directories deleted from this machine, and folders of session creates that never
    finished. Images of another state directory not there now are named, and stay."""
    from harness.assembly import engine
    from harness.assembly.sessions import collect_objects
    from harness.cli.session_cmds import say_collected

    with reported():
        removed = engine.prune_containers(docker_host(), everything=everything, run_id=run)
        gone, gone_states = engine.prune_leftovers(docker_host(), state_dir(state))
        proxies = engine.prune_proxies()
        collected = collect_objects(state_dir(state))
    console.print(f"removed {removed} container(s)")
    if proxies:
        console.print(f"ended {len(proxies)} leftover egress prox{'y' if len(proxies) == 1 else 'ies'}")
    for item in gone:
        console.print(f"removed session leftover {item}", markup=False, soft_wrap=True)
    console.print(f"removed {len(gone)} session leftover(s)")
    for folder, count in gone_states.items():
        console.print(
            f"kept {count} step image(s) of {visible(folder)}, a state directory not there now (deleted, or "
            f"on a drive not mounted): `harness sandbox prune --state-dir {shlex.quote(folder)}` removes them",
            markup=False,
            soft_wrap=True,
        )
    say_collected(collected)
