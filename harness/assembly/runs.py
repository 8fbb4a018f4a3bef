"""Runs: the composition root's functions that build sandboxes, sessions, providers, tool contexts and
agents from a `RunConfig` (start, resume, replay, fork, `harness tool`). `harness.assembly` names
them; see its docstring."""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from harness.agent.budget import Budget
from harness.agent.context import Context
from harness.agent.delegate import Branching, Child, Delegator, Tree, delegate
from harness.agent.external import ExternalTurns
from harness.agent.guard import ReadOnlyGuard
from harness.agent.hooks import Hooks, repository_hooks, stored_reader
from harness.agent.instructions import record_line, repository_block, repository_files, user_block
from harness.agent.loop import Agent
from harness.agent.outcome import RunResult, RunState
from harness.agent.prompt import system_prompt, task_message
from harness.agent.verify import VERIFY_START, Protection, Verifier, VerifyResult, detect_verify
from harness.assembly import engine
from harness.assembly.attempts import Machinery, check_attempts, run_attempts
from harness.assembly.engine import step_images
from harness.assembly.runtime import Runtime, _no_phase
from harness.config import Devcontainer, RunConfig, with_overrides
from harness.errors import (
    ConfigError,
    HarnessError,
    ModelAuthError,
    NotFoundError,
    SessionError,
    StateError,
    UsageError,
)
from harness.policy.gate import Gate
from harness.providers.config import ProviderConfig
from harness.providers.factory import make_provider
from harness.providers.protocol import Provider
from harness.providers.vendor import ModelSpec
from harness.readback import ATTEMPTS_FILE
from harness.tools.declared import FRONT, GROUP, build, group
from harness.tools.registry import Registry, ToolContext
from harness.trajectory import EventRecord, StartRecord, Trajectory, TrajectoryObserver, read_state, write_state
from sandbox.durable import write_text_atomic
from sandbox.layout import SessionFolder
from sandbox.spec import Mount, PooledSandbox, Sandbox, SandboxSpec

if TYPE_CHECKING:
    from harness.agent.reissue import ReplayReport
    from harness.policy.approve import Approver
    from sandbox.docker.containers import DockerSandbox
    from sandbox.network.secrets import Secret
    from sandbox.session.session import Session
    from sandbox.warm.loans import Loan

POOL_SIZE = 3
"""Warm containers of a run: a turn with two concurrent reads plus the next call still find one ready."""


def bound_secrets(bindings: Sequence[str], values: Mapping[str, str]) -> list[Secret]:
    """`--secret` bindings with their values (by NAME) and fresh placeholders; a binding whose value
    the caller did not read is a ConfigError naming its variable."""
    from sandbox.network.secrets import SecretError, bind
    from sandbox.settings import parse_secret, secret_path

    found = []
    for item in bindings:
        name, variable, host = parse_secret(item)
        value = values.get(name)
        if not value:
            raise ConfigError(f"--secret {name}: ${variable} is not set (its value is read from there)")
        try:
            found.append(bind(name, host, value, secret_path(item)))
        except SecretError as error:
            raise ConfigError(str(error)) from None
    return found


# --- providers ----------------------------------------------------------------------------------


def absolute_model(spec: str, sessions: Path) -> str:
    """Make file-based model specs independent of the working directory (so resume works anywhere)."""
    model = ModelSpec.of(spec)
    if model.vendor.file_target and model.target:
        return model.with_target(str(Path(model.target).expanduser().resolve()))
    if model.prefix == "replay":
        candidate = Path(model.target).expanduser()
        directory = candidate if candidate.is_dir() else sessions / model.target
        if not directory.is_dir():
            raise ConfigError(f"replay: no session {model.target!r} in {sessions}")
        return model.with_target(str(directory.resolve()))
    return spec


def provider_settings(
    config: RunConfig, base_url_fallback: str | None = None, cloud_fallback: dict[str, str] | None = None
) -> ProviderConfig:
    """The provider config with its endpoint resolved: --base-url > config file > the fallback the
    caller read from the environment > the SDK's vendor default (a cloud's region and project alike)."""
    settings = config.provider_config()
    if settings.base_url is None and base_url_fallback:
        settings = settings.model_copy(update={"base_url": base_url_fallback})
    unset = {key: value for key, value in (cloud_fallback or {}).items() if getattr(settings, key) is None}
    return settings.model_copy(update=unset) if unset else settings


def build_provider(config: RunConfig, runtime: Runtime) -> Provider | None:
    """The run's provider behind the retry policy (a scripted file is validated here, before any
    container starts); None for a hosted agent's run (the agent reaches its model through harness's
    gateway: harness.assembly.hosted). A vendor endpoint without a key is refused here, at once: no
    session is made and no request is sent (a local server named by base_url may need none)."""
    settings = provider_settings(config, runtime.base_url_fallback, runtime.cloud_fallback)
    if ModelSpec.of(config.model).vendor.key_required and not runtime.api_key and settings.base_url is None:
        where = f"set {runtime.key_variable}" if runtime.key_variable else "pass api_key"
        raise ModelAuthError(
            f"no API key for {config.model}: {where} (or point base_url at a local server that needs none)"
        )
    if config.agent:
        return None
    return make_provider(config.model or "", settings, api_key=runtime.api_key)


def own_provider(config: RunConfig, runtime: Runtime) -> Provider:
    """The provider of a run of harness's own loop (build_provider); UsageError for a hosted agent's."""
    provider = build_provider(config, runtime)
    if provider is None:
        raise UsageError(f"{config.agent} is a hosted agent: this needs harness's own loop (no --agent)")
    return provider


def endpoint_warnings(config: RunConfig, runtime: Runtime) -> list[str]:
    """What the run's model server will do to a long run that the user should hear before it starts:
    a local Ollama or llama.cpp server that keeps less context than harness budgets."""
    from harness.providers.local import detect_local_server, may_be_local

    settings = provider_settings(config, runtime.base_url_fallback)
    model = ModelSpec.of(config.model)
    if not model.vendor.openai_protocol or not settings.base_url or not may_be_local(settings.base_url):
        return []
    server = detect_local_server(settings.base_url, model.target, config.context.budget_tokens)
    return [server.warning] if server and server.warning else []


# --- sandbox and sessions -----------------------------------------------------------------------


def open_sandbox(
    runtime: Runtime, session_id: str | None, *, pool_size: int = POOL_SIZE, share_netns: bool = True
) -> DockerSandbox:
    """A DockerSandbox on the runtime's engine. `share_netns=False` and `pool_size=0` suit one-call
    commands, where a holder or a warm container would double the cost of the only start."""
    return engine.sandbox_for(
        engine.connect(runtime.docker_host),
        runtime.run_id,
        session_id,
        pool_size=pool_size,
        pool_initial=pool_size if runtime.pace == "latency" else min(pool_size, 1),
        share_netns=share_netns,
        first_apart=runtime.pace == "latency",
        owns_client=True,
    )


def check_image(sandbox: DockerSandbox, image: str) -> None:
    """Fail before a session is made when the image is missing (ImageNotFound says how to build it)."""
    engine.image_ref(sandbox.client, image)


def call_spec(spec: SandboxSpec) -> SandboxSpec:
    """The spec tool calls actually run with (the session's current image, the runner's output cap)."""
    from harness.tools.builtin import RUNNER_STDOUT_CAP

    return spec if spec.stdout_cap >= RUNNER_STDOUT_CAP else spec.model_copy(update={"stdout_cap": RUNNER_STDOUT_CAP})


def tool_mounts(workspace: Path, config: RunConfig) -> list[Mount]:
    """The runner and the read-only paths, mounted into every tool and verify container."""
    from harness.tools import builtin

    return builtin.context_mounts(workspace, config.gate.read_only_paths)


def prewarm(config: RunConfig, sandbox: Sandbox, workspace: Path, spec: SandboxSpec) -> None:
    """Start the run's warm containers: tool calls and verification share one config, so one pool."""
    sandbox.prewarm(workspace=workspace, spec=call_spec(spec), mounts=tool_mounts(workspace, config))


def warm_run_request(config: RunConfig, workspace: Path) -> dict[str, Any]:
    """The run config a session of config on this workspace (or repository) asks the warm service for."""
    from sandbox.warm.loans import run_request

    return run_request(call_spec(config.spec()), tool_mounts(workspace, config), workspace)


def warm_for(runtime: Runtime) -> Path | None:
    """Where a new session of this runtime may borrow warm containers (a latency run only: a batch's
    sessions start their own, spread over its life)."""
    return runtime.warm_dir if runtime.pace == "latency" else None


def borrow(config: RunConfig, sandbox: Sandbox, repo: Path, sessions: Path, warm: Path | None) -> Loan | None:
    """A warm run slot for a new session of config, when it can use one: the warm service's
    containers are the session's first (no setup image, no quota filesystem, a read-only root), and
    the sandbox can take containers another process started."""
    if warm is None or not isinstance(sandbox, PooledSandbox):
        return None
    if config.session.setup or config.session.workspace_quota or not config.sandbox.read_only_root:
        return None
    if config.session.allow_net_tools:
        return None  # a slot's containers have no relay to this session's egress proxy
    from harness.tools.calls import literal_paths, plain_kind

    if any(plain_kind(repo, rel) == "file" for rel in literal_paths(config.gate.read_only_paths)):
        return None  # a slot's mount points are directories: a read-only file is mounted by the session itself
    from sandbox.warm.loans import borrow as borrow_slot

    return borrow_slot(warm, warm_run_request(config, repo), sessions)


def adopt(loan: Loan, config: RunConfig, sandbox: PooledSandbox, workspace: Path, spec: SandboxSpec) -> None:
    """The loan's containers as the session's ready ones, if the workspace has the shape the slot was
    made for and they are on the session's engine (else they are given back, and the session starts
    its own)."""
    from sandbox.warm.loans import run_request

    calls, mounts = call_spec(spec), tool_mounts(workspace, config)
    if run_request(calls, mounts, workspace) != loan.request:  # run_request leaves the labels out
        loan.give_back()
        return
    if sandbox.adopt(loan.containers, workspace=workspace, spec=calls, mounts=mounts, keep_open=loan.conn):
        loan.containers = []
    else:
        loan.give_back()


def create_session(
    repo: Path,
    sessions: Path,
    config: RunConfig,
    sandbox: Sandbox,
    session_id: str | None,
    warm: Path | None = None,
    secrets: Sequence[Secret] = (),
    on_phase: Callable[[str], None] = _no_phase,
) -> Session:
    """A new session from repo: the workspace copy (into a borrowed warm slot when one is ready), the
    setup step (cached), warm containers started as soon as the workspace exists, step 0. on_phase is
    told `session_ready` then, before the session's record exists (a crash test's point)."""
    from sandbox.session.session import SessionConfig
    from sandbox.session.setup import create_session as new_session

    session_config = SessionConfig.of(config.session, writable_root=not config.sandbox.read_only_root)
    sessions.mkdir(parents=True, exist_ok=True)
    loan = borrow(config, sandbox, Path(repo), sessions, warm)

    def ready(workspace: Path, spec: SandboxSpec) -> None:
        if loan is not None and isinstance(sandbox, PooledSandbox):  # borrow lends to no other
            adopt(loan, config, sandbox, workspace, spec)
        prewarm(config, sandbox, workspace, spec)
        on_phase("session_ready")

    try:
        return new_session(
            repo,
            sessions,
            spec=config.spec(),
            config=session_config,
            sandbox=sandbox,
            session_id=session_id,
            images=step_images(sandbox),
            ready=ready,
            workspace_from=loan.folder if loan is not None else None,
            secrets=secrets,
            started_from=config.started_from,
        )
    finally:
        if loan is not None and loan.containers:  # not adopted: the session failed before its calls
            loan.give_back()


def open_session(sessions: Path, session_id: str, sandbox: Sandbox | None = None) -> Session:
    """An existing session at its last complete step (with the sandbox's step-image operations)."""
    from sandbox.session.session import Session

    return Session.open(sessions, session_id, images=step_images(sandbox) if sandbox is not None else None)


# --- tools and the agent ------------------------------------------------------------------------


def registry(
    config: RunConfig | None = None, servers: Sequence[Any] = (), running: engine.RunningServices | None = None
) -> Registry:
    """The tool menu: the built-ins, the project's tools config declares, the tools of the session's
    MCP servers (running, from mcp_servers), and service_logs when the run has services."""
    from harness.tools import builtin
    from harness.tools.declared import menu
    from harness.tools.mcp import tools_of
    from harness.tools.services import service_logs_tool

    delegating = [delegate] if config is not None and config.delegate.depth > 0 else []
    if (config is None or not config.tools.declared) and not servers and running is None and not delegating:
        return builtin.default_registry()
    declared = config.tools.declared if config else {}
    if declared:
        menu(declared, [t.name for t in builtin.BUILTIN_TOOLS])  # a name clash is refused here
    project = [build(name, tool) for name, tool in declared.items()]
    project += [tool for server in servers for tool in tools_of(server)]
    if len(project) > FRONT:  # the menu the seed recommends: ten in front, the rest as one tool's sub-commands
        project = [*project[:FRONT], group(project[FRONT:])]
    logs = [service_logs_tool(list(running.containers), running.logs)] if running is not None else []
    return Registry((*builtin.BUILTIN_TOOLS, *delegating), extra=[*project, *logs])


def menu_warning(registry: Registry) -> str | None:
    """What to say when the project's tools (declared and MCP) did not all fit in front."""
    names = [schema.name for schema in registry.schemas()]
    if GROUP not in names:
        return None
    return (
        f"more than {FRONT} project tools (declared and MCP): the first {FRONT} are in the menu, the rest behind "
        f"one tool ({GROUP}); every description counts against the context budget"
    )


@contextlib.contextmanager
def services(
    config: RunConfig, session: Session, runtime: Runtime, sandbox: Sandbox
) -> Iterator[engine.RunningServices | None]:
    """The session's services for the run: started before its first step on a network of their own
    (no route out) that every call joins; stopped and removed after (started again on resume). On an
    engine elsewhere each call first sends their copies of the workspace what changed."""
    if not config.services:
        yield None
        return
    running = engine.start_services(
        runtime.docker_host, runtime.run_id, session.id, call_spec(session.spec), session.workspace, config.services
    )
    session.service_network = running.network
    hooked = getattr(sandbox, "before_calls_on", None)  # the Docker sandbox's (a fake one runs no service)
    unhook = hooked(running.network, running.refresh) if hooked is not None and running.refresh else None
    settled = getattr(sandbox, "settings_on", None)
    unset = settled(running.network, running.joining) if settled is not None and running.joining else None
    try:
        yield running
    finally:
        for undo in (unhook, unset):
            if undo is not None:
                undo()
        session.service_network = None
        running.stop()


@contextlib.contextmanager
def mcp_servers(config: RunConfig, session: Session, runtime: Runtime) -> Iterator[list[Any]]:
    """The session's MCP servers, each started in its container for the run and removed after."""
    from harness.tools.mcp import MCPServer, check_name

    started: list[MCPServer] = []
    try:
        for name, declared in config.mcp.items():
            check_name(name)
            spec = call_spec(session.spec).model_copy(  # the session's image now: what setup installed is there
                update={"image": declared.image or session.image, "timeout_s": declared.timeout_s}
            )
            launch = engine.mcp_launcher(
                runtime.docker_host,
                runtime.run_id,
                spec,
                declared.command,
                session.workspace,
                writable=declared.writable,
                environment=declared.env,
                allow_net=declared.allow_net,
                network_log=session.dir / f"mcp-{name}-network.jsonl",
            )
            server = MCPServer(name, declared, launch)
            started.append(server)
            server.start()
        yield started
    finally:
        for server in started:
            server.shutdown()


def tool_warnings(config: RunConfig, repo: Path | None = None) -> list[str]:
    """What the person starting the run should hear about the project's tools (a long menu), and about
    a route out that nothing will use to install the repository's dependencies."""
    from harness.agent.verify import DEPENDENCY_FILES
    from harness.tools import builtin
    from harness.tools.declared import menu

    said = menu(config.tools.declared, [t.name for t in builtin.BUILTIN_TOOLS])[1] if config.tools.declared else []
    declared = [f for f in DEPENDENCY_FILES if repo is not None and (repo / f).is_file()]
    if config.session.allow_net and not config.session.setup and declared:
        hosts = ", ".join(config.session.allow_net)
        said.append(
            f"--allow-net {hosts} lets the calls reach it, but no setup installs the dependencies "
            f"{', '.join(declared[:3])} declares: add --setup auto (it goes "
            "through the same route), or the model has to install them call by call"
        )
    return said


def approver(config: RunConfig, session_dir: Path, interactive: bool) -> Approver:
    """At a terminal a person answers; otherwise requests wait in the session folder, then deny."""
    from harness.policy.approve import InteractiveApprover, UnattendedApprover, UnattendedConfig

    if config.approval == "interactive" or (config.approval == "auto" and interactive):
        return InteractiveApprover()
    return UnattendedApprover(
        UnattendedConfig(approvals_dir=SessionFolder(session_dir).approvals, timeout_s=config.approval_timeout_s)
    )


def tool_context(
    config: RunConfig,
    session: Session,
    sandbox: Sandbox,
    *,
    interactive: bool = False,
    gate: Gate | None = None,
    test_command: str | None = None,
) -> ToolContext:
    """What every tool call of the session runs with: sandbox, workspace, spec, gate, approver, mounts."""
    writable = session.config.writable_root
    gate = gate or Gate(config.gate)
    return ToolContext(
        sandbox=sandbox,
        workspace=session.workspace,
        spec=session.spec,
        gate=gate,
        approver=approver(config, session.dir, interactive),
        mounts=tool_mounts(session.workspace, config),
        test_command=test_command or config.test_cmd or config.verify,
        commit_changes=writable,
        follow=(lambda: session.spec) if writable else None,
        timeouts=dict(config.tools.timeouts),
    )


def build_agent(
    *,
    config: RunConfig,
    session: Session,
    sandbox: Sandbox,
    provider: Provider,
    state: RunState,
    runtime: Runtime,
    resumed: bool = False,
    servers: Sequence[Any] = (),
    running: engine.RunningServices | None = None,
    budget: Budget | None = None,
) -> Agent:
    """An Agent for a new or resumed run (state carries the context and spend of a resumed one);
    servers: the session's running MCP servers; budget: one held against an enclosing budget (an
    attempt's, `harness.assembly.attempts`) instead of the run's own."""
    context_tools = tool_context(config, session, sandbox, interactive=runtime.interactive)
    told = (
        repository_files(
            lambda path: session.kind_of(session.start_tree, path),
            lambda path: session.read_file(session.start_tree, path),
        )
        if config.repo_instructions and not config.agent
        else []
    )  # a hosted agent reads them itself, confined
    context = Context(
        config.context,
        system_prompt(config.verify) + user_block(config.instructions_text),
        task_message(
            state.task,
            session.info.left_out,
            session.info.config.network_hosts if session.info.config.allow_net_tools else (),
            repository_block(told),
        ),
        state.context if state.context.entries else None,
    )
    start_image = session.record(0).image
    protected = (config.gate.read_only_paths, config.verify_protect)
    protection = Protection(session, *protected, session.dir.parent / VERIFY_START, start_image)
    setup = config.session.setup
    verifier = Verifier(sandbox, config.verify, context_tools.mounts, protection, setup) if config.verify else None
    checks = [Verifier(sandbox, command, mounts=context_tools.mounts) for command in config.checks]
    prewarm(config, sandbox, session.workspace, session.spec)  # a no-op when create_session did it already
    tools = registry(config, servers, running)
    _write_menu(session.paths.menu, tools)
    trajectory = Trajectory(session.dir, runtime.secrets, observers(config, state, runtime, resumed))
    warning = menu_warning(tools) if servers else None  # a declared-only menu was warned of before the run
    if warning:
        trajectory.append(EventRecord(event="menu", detail=warning))
    given = record_line(told, config.instructions or "")
    if given and not resumed:
        trajectory.append(EventRecord(event="instructions", detail=given))
    budget = budget or Budget(config.limits, state.spent)
    hooks = Hooks(
        config.hooks,
        session_id=state.session_id,
        workspace=session.workspace,
        transcript=SessionFolder(session.dir).trajectory,
        repository=(
            repository_hooks(
                stored_reader(
                    lambda path: session.kind_of(session.start_tree, path),
                    lambda path: session.read_file(session.start_tree, path),
                )
            )
            if config.repo_hooks
            else None
        ),
        container=(sandbox, lambda: call_spec(session.spec)),
    )
    if config.delegate.depth > 0:
        below = registry(config, (), running) if servers else tools  # an MCP server sees its session's workspace only
        context_tools.delegator = _delegator(
            config, session, sandbox, provider, below, trajectory, budget, runtime, hooks
        )
    return Agent(
        provider=provider,
        registry=tools,
        tool_context=context_tools,
        session=session,
        sandbox=sandbox,
        verifier=verifier,
        verify_spec=lambda: call_spec(session.spec),
        checks=checks,
        budget=budget,
        context=context,
        trajectory=trajectory,
        state=state,
        max_turn_tokens=config.limits.max_turn_tokens,
        max_verify_rounds=config.limits.max_verify_rounds,
        repetition=config.repetition,
        on_phase=runtime.on_phase,
        secrets=runtime.secrets,
        guard=ReadOnlyGuard(session, config.gate.read_only_paths),
        hooks=hooks,
    )


SUBAGENT_PREFACE = (
    "You are a sub-agent: another agent working on this repository handed you the task below. Your "
    "workspace is a copy of its workspace as it was then; what you change is given back to it when you "
    "end. Do only this task. When you are done, reply WITHOUT any tool call: say what you changed (or "
    "found) and how you checked it; that message and your diff are all the other agent sees."
)


def _delegator(
    config: RunConfig,
    session: Session,
    sandbox: Sandbox,
    provider: Provider,
    tools: Registry,
    trajectory: Trajectory,
    budget: Budget,
    runtime: Runtime,
    hooks: Hooks,
) -> Delegator:
    """The run's agent's delegator: its children are sessions forked from the run's (in the same
    folder of sessions), agents with the same tools (an MCP server's left out: its container sees the
    run's workspace, not a child's branch), gate, approver and tool hooks, a fresh conversation,
    no verify command (the delegating agent judges the work), and the next level's delegator."""
    import shutil

    from sandbox.errors import SandboxError
    from sandbox.session.session import Session as Sessions

    images = step_images(sandbox)

    def fork(parent: Session, child_id: str, name: str, at: int) -> Session:
        orphan = parent.dir.parent / child_id
        if orphan.is_dir():  # a crash came between the fork and its start record: nothing refers to it
            try:
                Sessions.open(parent.dir.parent, child_id, images=images).delete()
            except SandboxError:  # cut short while it was made: no session to open, only its folder
                shutil.rmtree(orphan, ignore_errors=True)
        return Sessions.fork(parent, parent.step, parent.dir.parent, child_id, images=images, run_step=at, agent=name)

    branching = Branching(
        fork=fork,
        open=lambda child_id: Sessions.open(session.dir.parent, child_id, images=images),
    )
    parent_context = tool_context(config, session, sandbox, interactive=runtime.interactive)

    def build(child: Child) -> Agent:
        work = child.session
        work.service_network = session.service_network  # the run's services, reached by name as the parent does
        child.state.model = child.state.model or config.model or ""
        context_tools = dataclasses.replace(
            parent_context,
            workspace=work.workspace,
            spec=work.spec,
            mounts=tool_mounts(work.workspace, config),
            follow=(lambda: work.spec) if work.config.writable_root else None,
            delegator=child.delegator,
        )
        context = Context(
            config.context,
            system_prompt(None),
            SUBAGENT_PREFACE + "\n\n" + task_message(child.state.task, work.info.left_out),
            child.state.context if child.state.context.entries else None,
        )
        child_provider = provider.for_agent(child.name) if hasattr(provider, "for_agent") else provider
        halted = child.budget.halted

        def phase(name: str) -> None:
            runtime.on_phase(f"child_{name}")
            if halted is not None and halted():  # stopped while its calls ran: their (killed) results uncommitted
                raise KeyboardInterrupt

        return Agent(
            provider=child_provider,
            registry=tools,
            tool_context=context_tools,
            session=work,
            sandbox=sandbox,
            verifier=None,
            verify_spec=lambda: call_spec(work.spec),
            budget=child.budget,
            context=context,
            trajectory=child.trajectory,
            state=child.state,
            max_turn_tokens=config.limits.max_turn_tokens,
            max_verify_rounds=config.limits.max_verify_rounds,
            repetition=config.repetition,
            on_phase=phase,
            secrets=runtime.secrets,
            guard=ReadOnlyGuard(work, config.gate.read_only_paths),
            hooks=hooks.for_subagent(work.id, work.workspace, lambda: call_spec(work.spec)),
            unchecked="a sub-agent: the agent that delegated the task checks the work",
        )

    return Delegator(
        tree=Tree(config.delegate),
        depth=0,
        prefix="",
        session=session,
        trajectory=trajectory,
        budget=budget,
        branching=branching,
        build=build,
        limits=config.limits,
    )


def observers(config: RunConfig, state: RunState, runtime: Runtime, resumed: bool) -> list[TrajectoryObserver]:
    """What watches the run's trajectory besides its file: the OpenTelemetry spans, when asked for."""
    if not runtime.telemetry.enabled:
        return []
    from harness.telemetry.spans import RunSpans

    spans = RunSpans(
        runtime.telemetry,
        session_id=state.session_id,
        model=config.model or "",
        task=state.task,
        resumed=resumed,
        parent=runtime.trace_parent,
        secrets=runtime.secrets,
        agent=config.agent or "harness",
    )
    return [spans]


# --- whole runs ---------------------------------------------------------------------------------


class Served(Protocol):
    """A run whose calls come from a client outside harness (`harness mcp serve`): the turns it feeds
    the loop, and what it keeps of the loop once built (its session, its record)."""

    turns: ExternalTurns

    def attach(self, agent: Agent) -> None: ...


def start_run(
    repo: Path,
    task: str,
    config: RunConfig,
    sessions: Path,
    runtime: Runtime,
    session_id: str | None = None,
    served: Served | None = None,
) -> RunResult:
    """A new run: session from repo, the agent loop to its end, the sandbox closed on every path; its
    turns from harness's model, a hosted agent (`config.agent`) or a client's calls (served)."""
    if not config.model:
        raise UsageError("no model: pass --model PROVIDER:MODEL or set model in the config file")
    if not Path(repo).is_dir():
        raise NotFoundError(f"repository path does not exist: {repo}")
    config = with_verify(config.model_copy(update={"model": absolute_model(config.model, sessions)}), Path(repo))
    config = with_instructions(with_setup(config, Path(repo)))
    if config.agent:
        from harness.environment.agents import agent_for

        agent_for(config.agent, config.model)
    if config.attempts.count > 1:
        check_attempts(config, served=served is not None)
    provider = served.turns if served is not None else build_provider(config, runtime)
    can_start(config, runtime)
    if session_id is not None:  # a controller of this id that died (a batch worker killed mid-run) left these
        engine.prune_crashed(runtime.docker_host, sessions, session_id)
    with open_sandbox(runtime, session_id) as sandbox:
        config = devcontainer_built(config, sandbox, Path(repo))
        check_image(sandbox, config.image)
        secrets = bound_secrets(config.session.secrets, runtime.secret_values)
        session = create_session(
            Path(repo), sessions, config, sandbox, session_id, warm_for(runtime), secrets, runtime.on_phase
        )
        write_text_atomic(session.paths.run_config, config.model_dump_json(indent=1))
        state = RunState(session_id=session.id, task=task, model=config.model or "", snapshot_step=session.step)
        write_state(session.dir, state, runtime.secrets)
        _start_record(session, config, state, Path(repo), resumed=False, runtime=runtime)
        with session:
            if config.attempts.count > 1:
                sandbox.quiesce()  # the attempts run in sandboxes of their own
                assert provider is not None
                return run_attempts(machinery(), session, config, state, runtime, provider, resumed=False)
            return _run_agent(config, session, sandbox, provider, state, runtime, resumed=False, served=served)


def _run_agent(
    config: RunConfig,
    session: Session,
    sandbox: Sandbox,
    provider: Provider | None,
    state: RunState,
    runtime: Runtime,
    *,
    resumed: bool,
    served: Served | None = None,
    follow_up: str | None = None,
    budget: Budget | None = None,
) -> RunResult:
    """The agent loop with the session's services and MCP servers (started for this run, new or
    resumed, and ended with it); with a hosted agent (`config.agent`), its turns come from that agent
    (harness.assembly.hosted); served, from a client's calls (harness.assembly.served)."""
    from harness.assembly.hosted import hosted

    if config.agent:  # the agent keeps its own conversation: harness's record of it is never cut down
        unbounded = config.context.model_copy(update={"fold": False, "summaries": False, "budget_tokens": 10**9})
        config = config.model_copy(update={"context": unbounded})
    with (
        running_lock(session.paths.running),
        reserved(config, session, state, runtime) as config,
        services(config, session, runtime, sandbox) as running,
        mcp_servers(config, session, runtime) as servers,
        hosted(
            config, session, runtime, provider_settings(config, runtime.base_url_fallback), resumed=resumed
        ) as agent_run,
    ):
        turns = agent_run.turns if agent_run is not None else provider
        assert turns is not None, "a run of harness's own loop has its provider"
        agent = build_agent(
            config=config,
            session=session,
            sandbox=sandbox,
            provider=turns,
            state=state,
            runtime=runtime,
            resumed=resumed,
            servers=servers,
            running=running,
            budget=budget,
        )
        if agent_run is not None:
            agent_run.attach(agent)
        if served is not None:
            served.attach(agent)
        if follow_up is not None:
            agent.follow_up(follow_up)
        result = agent.run()
    if result.cause is None:  # ended: its snapshots stay, the workspace copy goes (made again when needed)
        from sandbox.errors import SandboxError

        sandbox.quiesce()  # no warm start after this may have the engine make the workspace's path again

        expected = session.shared is None or bool(session.config.workspace_quota)  # kept by design
        try:  # a workspace that cannot go now stays, whole; the trajectory says why
            kept = (
                None
                if session.retire() or expected
                else f"it holds what no step recorded: {', '.join(session.unrecorded[:5]) or 'nothing named'}"
            )
        except (OSError, SandboxError) as error:
            kept = f"{type(error).__name__}: {error}"
        if kept is not None:
            trajectory = Trajectory(session.dir, runtime.secrets)
            trajectory.append(EventRecord(event="workspace_kept", detail=kept[:500]))
            trajectory.close()
    return result


@contextlib.contextmanager
def reserved(config: RunConfig, session: Session, state: RunState, runtime: Runtime) -> Iterator[RunConfig]:
    """The run's spend reserved in the user's ledger before it starts (harness.spend): the config with
    its cost limit within what the ceilings leave; what it spent said when it ends, however it ends
    (a kill -9 leaves the session's record to say it)."""
    from harness import spend

    ledger = config.spend.ledger or runtime.spend_ledger or spend.default_ledger()
    base, base_steps = state.spent.cost_usd, state.spent.steps
    wanted = None if config.limits.max_cost_usd is None else max(config.limits.max_cost_usd - base, 0.0)
    ident, limit = spend.reserve(
        config.spend, ledger, wanted_usd=wanted, model=config.model or "", session=session.dir,
        price_known=price_known(config, runtime), base_usd=base,
    )  # fmt: skip
    if limit is not None and limit != wanted:
        config = config.model_copy(
            update={"limits": config.limits.model_copy(update={"max_cost_usd": base + limit})}, deep=True
        )
    outcome = "ended"
    try:
        yield config
    except BaseException as error:
        outcome = type(error).__name__
        raise
    finally:
        try:
            recorded = read_state(session.dir, RunState)
        except HarnessError:
            recorded = None
        spent = recorded.spent if recorded is not None else state.spent
        spend.settle(ledger, ident, spent_usd=spent.cost_usd - base, steps=spent.steps - base_steps, outcome=outcome)


def can_start(config: RunConfig, runtime: Runtime) -> None:
    """Refuse a run the spend ceilings would not let start, before anything of it is made."""
    from harness import spend

    ledger = config.spend.ledger or runtime.spend_ledger or spend.default_ledger()
    spend.check_can_start(config.spend, ledger, model=config.model or "", price_known=price_known(config, runtime))


def price_known(config: RunConfig, runtime: Runtime) -> bool:
    """Whether the run's model has a price (an offline model's costs are its script's: known)."""
    from harness.providers.pricing import model_price_known

    settings = provider_settings(config, runtime.base_url_fallback, runtime.cloud_fallback)
    return model_price_known(config.model or "", settings.prices)


@contextlib.contextmanager
def running_lock(path: Path) -> Iterator[None]:
    """Held for a run of the session (see SessionFolder.running)."""
    import fcntl
    import os

    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StateError(f"session {path.parent.name} is being run by another process") from None
    try:
        yield
    finally:
        os.close(fd)


def is_running(session_dir: Path) -> bool:
    """A controller is running the session now."""
    import fcntl
    import os

    try:
        fd = os.open(SessionFolder(session_dir).running, os.O_RDWR)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def fork_session(
    parent_dir: Path,
    at: int,
    sessions: Path,
    runtime: Runtime,
    session_id: str,
    overrides: dict[str, Any] | None = None,
    hint: str | None = None,
) -> Session:
    """A new session that continues the run of parent_dir after its step `at`, ready for `resume_run`
    (which runs it to its end): the parent's steps through `at` (shared, nothing copied), its
    trajectory through that step, the run's state then (the conversation as the parent would have
    sent it next, then the hint as one more user message), and its config with the overrides (the
    model, limits)."""
    from harness.agent.fork import fork_start
    from harness.trajectory import EVERY_AGENT, DelegateRecord, read_records
    from sandbox.session.session import Session

    parent_dir = Path(parent_dir)
    check_forkable(parent_dir)
    parent = open_session(parent_dir.parent, parent_dir.name)
    config = saved_config(parent_dir, {"approval": "unattended", **(overrides or {})})
    if config.model != saved_config(parent_dir, {}).model:  # another model's script starts at its first turn
        config = took_over(config, at)
    every = read_records(parent_dir, EVERY_AGENT)
    start = fork_start(
        [r for r in every if r.agent is None],
        at,
        session_id=session_id,
        model=config.model or "",
        config=config.context,
        hint=hint,
    )
    kept = {id(record) for record in start.records}
    children = {r.child for r in start.records if isinstance(r, DelegateRecord)}  # their records come along
    records = [r for r in every if id(r) in kept or (r.agent is not None and r.agent.split(".")[0] in children)]
    images = engine.engine_step_images(runtime.docker_host)
    fork = Session.fork(parent, start.snapshot_step, sessions, session_id, images=images, run_step=at)
    try:
        write_text_atomic(fork.paths.run_config, config.model_dump_json(indent=1))
        trajectory = Trajectory(fork.dir, runtime.secrets)
        for record in records:
            trajectory.append(record)
        told = f"forked from session {parent.id} at step {at}" + (f" with a hint: {hint}" if hint else "")
        trajectory.append(EventRecord(event="fork", detail=told), durable=True)
        trajectory.close()
        write_state(fork.dir, start.state, runtime.secrets)
    except BaseException:
        fork.delete()
        raise
    fork.close()
    return fork


def check_forkable(parent_dir: Path) -> None:
    """UsageError unless parent_dir is a session with a run that no controller is running now."""
    if not SessionFolder(parent_dir).run_config.is_file():
        raise UsageError(f"session {parent_dir.name} recorded no run: there is no conversation to fork")
    if is_running(parent_dir):
        raise UsageError(f"session {parent_dir.name} is still running: fork it once it has ended or stopped")
    if (parent_dir / ATTEMPTS_FILE).is_file():
        raise UsageError(
            f"session {parent_dir.name} ran as attempts and holds no conversation of its own: fork one of its "
            f"attempts ({parent_dir.name}-a1 ..., `harness show {parent_dir.name}` lists them)"
        )


def _write_menu(path: Path, tools: Registry) -> None:
    """menu.json for `harness tools list --session` (a view, not state: never fsynced, and a failed
    write costs only that view)."""
    import os

    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    with contextlib.suppress(OSError):
        tmp.write_text(json.dumps([schema.model_dump() for schema in tools.schemas()], indent=1), encoding="utf-8")
        os.replace(tmp, path)


def with_verify(config: RunConfig, repo: Path) -> RunConfig:
    """config with the repository's own test command as verify when none was given (and detection
    is on); where it came from is kept in `verify_source`."""
    if config.verify or not config.detect_verify:
        return config
    found = detect_verify(repo)
    if found is None:
        return config
    command, why = found
    return config.model_copy(update={"verify": command, "verify_source": f"detected: {why}"})


def with_setup(config: RunConfig, repo: Path) -> RunConfig:
    """config with `--setup auto` replaced by the install commands the repository's layout names
    (where they came from kept in `setup_source`); UsageError when it names none."""
    from harness.environment.detect import expand_setup

    if DEVCONTAINER in config.session.setup:
        return _with_devcontainer(config, repo)
    if "auto" in config.session.setup and declares_devcontainer(repo):  # the repository says its environment
        setup = [DEVCONTAINER if command == "auto" else command for command in config.session.setup]
        chosen = _with_devcontainer(
            config.model_copy(update={"session": config.session.model_copy(update={"setup": setup})}), repo
        )
        return chosen.model_copy(
            update={"setup_source": f"{chosen.setup_source} (--setup auto: the repository declares its environment)"}
        )
    commands, why = expand_setup(list(config.session.setup), repo)
    if not why:
        return config
    session = config.session.model_copy(update={"setup": commands})
    return config.model_copy(update={"session": session, "setup_source": f"detected: {why}"})


def with_instructions(config: RunConfig) -> RunConfig:
    """config with the words of the user's instructions file, read now (a resume gives the same)."""
    if not config.instructions or config.instructions_text:
        return config
    from harness.agent.instructions import USER_CAP
    from sandbox.named import read_named

    data = read_named(config.instructions, what="--instructions", limit=USER_CAP)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"--instructions {config.instructions}: not UTF-8 text") from None
    return config.model_copy(update={"instructions_text": text})


DEVCONTAINER = "devcontainer"
"""`--setup devcontainer`: the repository's devcontainer.json (harness.environment.devcontainer)."""


def _with_devcontainer(config: RunConfig, repo: Path) -> RunConfig:
    """config with the repository's devcontainer: its lifecycle commands in place of the word, the
    file as read (the image is built when the engine is at hand: `devcontainer_built`)."""
    from harness.environment.devcontainer import read

    found = read(repo, config.devcontainer_features)
    setup = [
        part for command in config.session.setup for part in (found.commands if command == DEVCONTAINER else [command])
    ]
    session = config.session.model_copy(update={"setup": setup})
    limits, applied = _host_requirements(found.limits, config)
    source = f"devcontainer: {found.path}"
    return config.model_copy(
        update={
            "session": session,
            "devcontainer": found.model_copy(update={"applied": applied}),
            "setup_source": source,
            "sandbox": config.sandbox.model_copy(update=limits),
            "services": {**found.services, **config.services},
        }
    )


def devcontainer_lines(found: Devcontainer | None) -> list[str]:
    """What a run takes of a devcontainer besides its image and commands, and what it never applies:
    the lines a run prints on stderr before it starts."""
    from harness.environment.features import summary

    if found is None:
        return []
    taken = [*(f"feature {line}" for line in summary(found.features)), *found.applied]
    taken += [f"service {name} ({service.image})" for name, service in found.services.items()]
    lines = [f"devcontainer {found.path}: {'; '.join(taken)}"] if taken else []
    for item in found.dropped:  # said here: the session that would record them may never be made
        lines.append(f"devcontainer {found.path}: not applied: {item.key}: {item.why}")
    return lines


def _host_requirements(asked: dict[str, float], config: RunConfig) -> tuple[dict[str, Any], list[str]]:
    """A devcontainer's `hostRequirements` as the calls' limits, each capped by the user's: (the
    limits, how each was taken)."""
    limits: dict[str, Any] = {}
    applied = []
    for key, wanted in sorted(asked.items()):
        mine = float(getattr(config.sandbox, key))
        chosen = min(wanted, mine)
        limits[key] = int(chosen) if key == "memory" else chosen
        applied.append(
            f"hostRequirements.{key} {_amount(key, wanted)}: "
            + (
                "the calls' limit"
                if wanted <= mine
                else f"capped at your limit, {_amount(key, mine)} ([sandbox] {key})"
            )
        )
    return limits, applied


def _amount(key: str, value: float) -> str:
    if key != "memory":
        return f"{value:g}"
    return f"{value / 1024**3:g} GiB" if value >= 1024**3 else f"{value / 1024**2:g} MiB"


def declares_devcontainer(repo: Path) -> bool:
    """The repository has a devcontainer.json (`--setup auto` then takes it, for run and exec alike)."""
    from harness.environment.devcontainer import find

    return find(Path(repo)) is not None


def devcontainer_built(
    config: RunConfig, sandbox: Sandbox, repo: Path, log: Callable[[str], None] = _no_phase
) -> RunConfig:
    """config whose calls start from its devcontainer's image, built now (unchanged without one)."""
    found = config.devcontainer
    if found is None or found.built is not None:
        return config
    client = getattr(sandbox, "client", None)
    if client is None:
        raise UsageError("a devcontainer's image is built by a Docker engine: this sandbox has none")
    built = engine.devcontainer_image(
        client, repo, found, network=config.session.setup_network, pull_from=config.devcontainer_pull, log=log
    )
    return config.model_copy(update={"devcontainer": built, "image": built.built or config.image})


def verify_once(
    repo: Path, config: RunConfig, sessions: Path, runtime: Runtime, session_id: str | None = None
) -> VerifyResult:
    """The verify command run once on a new session of repo (setup done), no model involved: what
    `harness tasks check` asks of a task's start state."""
    verify = config.verify
    if not verify:
        raise UsageError("no verify command to run")
    config = with_setup(config, Path(repo))
    # One call (no network, no service): one warm container, started beside the session's set-up and
    # taken by the verify; a run's pool would start POOL_SIZE (and a holder on an engine elsewhere),
    # and all but one would be removed unused.
    with open_sandbox(runtime, session_id, pool_size=1, share_netns=False) as sandbox:
        config = devcontainer_built(config, sandbox, Path(repo))
        check_image(sandbox, config.image)
        session = create_session(Path(repo), sessions, config, sandbox, session_id)
        mounts = tool_mounts(session.workspace, config)
        return Verifier(sandbox, verify, mounts=mounts).run(session.workspace, call_spec(session.spec))


def resume_run(
    session_id: str,
    sessions: Path,
    runtime: Runtime,
    overrides: dict[str, Any] | None = None,
    follow_up: str | None = None,
    *,
    provider: Provider | None = None,
    budget: Budget | None = None,
    fresh: bool = False,
) -> RunResult:
    """Continue a crashed, interrupted or failed run from its last complete step (limits may be raised
    through overrides such as `{"limits.max_steps": 60}`); with follow_up, any run, an ended one too:
    the conversation goes on from its last step with that user message (its verification anew). A run
    of attempts continues its attempts not ended (harness.assembly.attempts). An attempt's thread
    gives its provider and its budget held against the run's; fresh: its first start (its start
    record written already)."""
    folder = SessionFolder(sessions / session_id)
    if folder.root.is_dir():  # first: a crashed controller's containers go even if its files are damaged
        engine.prune_crashed(runtime.docker_host, sessions, session_id)
    before = saved_config(folder.root, {})
    config = saved_config(folder.root, overrides or {})
    state = read_state(folder.root, RunState)
    if state is None:
        raise SessionError(f"session {session_id} has no run to resume")
    if config.model != before.model and config.model:
        config = took_over(config.model_copy(update={"model": absolute_model(config.model, sessions)}), state.step)
    if config.attempts.count > 1 and state.finished and state.result is not None:
        from harness import readback

        chosen = readback.string((readback.attempts(folder.root) or {}).get("chosen")) or "a1"
        raise StateError(
            f"session {session_id} ran as attempts and ended as {state.result.outcome} with {chosen} chosen; nothing "
            f"to resume (to go on from the chosen change: `harness resume {session_id}-{chosen} --follow-up TEXT`)"
        )
    if state.finished and state.result is not None and follow_up is None:
        raise StateError(
            f"session {session_id} already ended as {state.result.outcome}; nothing to resume "
            "(`--follow-up TEXT` goes on with a new request, from its last step or a rollback's)"
        )
    if config.agent:
        from harness.environment.agents import agent_for

        agent_for(config.agent, config.model)
    if config.attempts.count > 1 and follow_up is not None:
        raise UsageError(
            f"session {session_id} runs as attempts: a follow-up goes to one of them once they ended "
            f"(`harness resume {session_id}-aN --follow-up TEXT`)"
        )
    provider = provider or build_provider(config, runtime)
    can_start(config, runtime)
    changed = changed_settings(before, config)
    with open_sandbox(runtime, session_id) as sandbox:
        session = open_session(sessions, session_id, sandbox)
        state = state.model_copy(update={"finished": False, "result": None, "model": config.model or state.model})
        if follow_up is not None:  # a new request: verification starts over, the budget goes on
            state = state.model_copy(
                update={"awaiting_verify": False, "verify_rounds": 0, "last_failing": None, "stop_refused": False}
            )
        if changed:  # what a later resume (and replay) continues with; the trajectory says what changed
            write_text_atomic(folder.run_config, config.model_dump_json(indent=1))
        if not fresh:
            _start_record(session, config, state, session.repo, resumed=True, runtime=runtime)
        if changed:
            trajectory = Trajectory(session.dir, runtime.secrets)
            trajectory.append(EventRecord(event="resume_changed", detail="; ".join(changed)), durable=True)
            trajectory.close()
        with session:
            session.connect_network(
                config.session.allow_net,
                config.session.allow_net_tools,
                bound_secrets(config.session.secrets, runtime.secret_values),
            )
            if config.attempts.count > 1:
                sandbox.quiesce()  # the attempts run in sandboxes of their own
                assert provider is not None
                return run_attempts(machinery(), session, config, state, runtime, provider, resumed=True)
            return _run_agent(
                config,
                session,
                sandbox,
                provider,
                state,
                runtime,
                resumed=not fresh,
                follow_up=follow_up,
                budget=budget,
            )


def machinery() -> Machinery:
    """What a run of attempts takes of this module (harness.assembly.attempts imports none of it)."""
    return Machinery(
        resume=resume_run,
        start_record=_start_record,
        saved_config=lambda folder: saved_config(folder, {}),
        lock=running_lock,
    )


def took_over(config: RunConfig, turns: int) -> RunConfig:
    """config whose model takes over a conversation that had `turns` model turns (a scripted model
    then serves its own first turn next)."""
    from harness.providers.vendor import prefix_of

    prefix = prefix_of(config.model)
    entry = config.providers.get(prefix, ProviderConfig()).model_copy(update={"first_turn": turns})
    return config.model_copy(update={"providers": {**config.providers, prefix: entry}})


RESUME_SETTINGS = (
    "model",
    "base_url",
    "region",
    "project",
    "thinking",
    "limits.max_steps",
    "limits.max_cost_usd",
    "limits.max_tokens",
    "limits.timeout_min",
    "session.allow_net",
    "session.allow_net_tools",
    "session.secrets",
)
"""What a resume may change (the endpoint, the key's variable, model options, limits, network), by
dotted key; `providers.PREFIX.api_key_env` too. The task, tools, verify and sandbox stay the run's."""


def changed_settings(before: RunConfig, after: RunConfig) -> list[str]:
    """`key: old -> new` for every resumable setting that differs (keys' variables by name only)."""
    changed = []
    for key in RESUME_SETTINGS:
        old, new = _dotted(before, key), _dotted(after, key)
        if old != new:
            changed.append(f"{key}: {old!r} -> {new!r}")
    prefixes = sorted(set(before.providers) | set(after.providers))
    for prefix in prefixes:
        old_env = before.providers[prefix].api_key_env if prefix in before.providers else None
        new_env = after.providers[prefix].api_key_env if prefix in after.providers else None
        if old_env != new_env:
            changed.append(f"providers.{prefix}.api_key_env: {old_env!r} -> {new_env!r}")
    return changed


def _dotted(config: RunConfig, key: str) -> Any:
    value: Any = config
    for part in key.split("."):
        value = getattr(value, part)
    return value


def replay_run(session_id: str, sessions: Path, runtime: Runtime) -> ReplayReport:
    """Re-issue a recorded session's tool calls on a fresh copy of its repository (a new session
    `<id>-replay-<n>` beside the original, kept for inspection)."""
    from harness.agent.reissue import free_id, recorded_calls, reissue

    config = saved_config(sessions / session_id, {})
    original = open_session(sessions, session_id)
    calls = recorded_calls(original.dir)
    if not calls:
        raise SessionError(f"session {original.id} recorded no tool calls to replay")
    with open_sandbox(runtime, None) as sandbox:
        session = create_session(original.repo, sessions, config, sandbox, free_id(sessions, f"{original.id}-replay"))
        with (
            session,
            services(config, session, runtime, sandbox) as running,
            mcp_servers(config, session, runtime) as servers,
        ):
            return reissue(  # an MCP call is re-issued like any, beside the same services
                calls, original.id, session, registry(config, servers, running), tool_context(config, session, sandbox)
            )


def saved_config(session_dir: Path, overrides: dict[str, Any], *, flags: bool = False) -> RunConfig:
    """The config a run recorded in its session folder, with dotted overrides (None = keep; flags:
    they are the command line's, see `with_overrides`)."""
    saved = SessionFolder(session_dir).run_config
    if not saved.is_file():
        raise SessionError(f"no run recorded in {session_dir}")
    try:
        data = json.loads(saved.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise SessionError(f"{saved} is unreadable ({error}); the session cannot be continued") from None
    return with_overrides(data, overrides, str(saved), flags=flags)


def _start_record(
    session: Session, config: RunConfig, state: RunState, repo: Path, *, resumed: bool, runtime: Runtime
) -> None:
    trajectory = Trajectory(session.dir, runtime.secrets)
    trajectory.append(
        StartRecord(
            session_id=state.session_id,
            task=state.task,
            model=config.model or "",
            repo=str(repo),
            resumed=resumed,
            config=config.model_dump(mode="json"),
        ),
        durable=True,
    )
    trajectory.close()
