"""Wire the components of one run together (the CLI layer's job): provider, sandbox, session, tools,
agent. Environment variables are read here and nowhere below: the API key (by the name the config
gives), the endpoint fallback `OPENAI_BASE_URL` / `ANTHROPIC_BASE_URL`, and the test-only crash point
`HARNESS_CRASH_AT`.
"""

from __future__ import annotations

import os
import signal
import uuid
from pathlib import Path
from typing import Any, Callable

from harness.budget import Budget
from harness.config import RunConfig
from harness.context import Context
from harness.errors import ConfigError
from harness.gate import Gate
from harness.loop import Agent
from harness.outcome import RunState
from harness.prompt import system_prompt, task_message
from harness.providers.base import ProviderConfig, make_provider
from harness.tools.registry import Registry, ToolContext
from harness.trajectory import Trajectory
from harness.verify import Verifier

DEFAULT_KEY_ENV = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
DEFAULT_BASE_URL_ENV = {"openai": "OPENAI_BASE_URL", "anthropic": "ANTHROPIC_BASE_URL"}
RUN_CONFIG_FILE = "run.json"
CRASH_PHASES = ("model_answered", "turn_recorded", "mid_tool", "mid_snapshot", "after_snapshot")


def api_key(config: RunConfig) -> str | None:
    """The key for the run's provider, from the environment variable the config names."""
    prefix = (config.model or "").split(":", 1)[0]
    variable = config.provider_config().api_key_env or DEFAULT_KEY_ENV.get(prefix)
    return os.environ.get(variable) if variable else None


def absolute_model(spec: str, sessions: Path) -> str:
    """Make file-based model specs independent of the working directory (so resume works anywhere)."""
    prefix, _, target = spec.partition(":")
    if prefix == "scripted":
        return f"scripted:{Path(target).expanduser().resolve()}"
    if prefix == "replay":
        candidate = Path(target).expanduser()
        directory = candidate if candidate.is_dir() else sessions / target
        if not directory.is_dir():
            raise ConfigError(f"replay: no session {target!r} in {sessions}")
        return f"replay:{directory.resolve()}"
    return spec


def provider_settings(config: RunConfig) -> ProviderConfig:
    """The provider config with its endpoint resolved: --base-url > config file > $OPENAI_BASE_URL /
    $ANTHROPIC_BASE_URL > the SDK's vendor default (the providers never read the environment)."""
    settings = config.provider_config()
    variable = DEFAULT_BASE_URL_ENV.get((config.model or "").split(":", 1)[0])
    if settings.base_url is None and variable and os.environ.get(variable):
        settings = settings.model_copy(update={"base_url": os.environ[variable]})
    return settings


def build_provider(config: RunConfig, key: str | None) -> Any:
    return make_provider(config.model or "", provider_settings(config), api_key=key)


def crash_hook(value: str | None) -> Callable[[str], None]:
    """`HARNESS_CRASH_AT=phase[:n]`: SIGKILL this process the n-th time the loop reaches phase (tests)."""
    if not value:
        return lambda phase: None
    phase, _, nth = value.partition(":")
    if phase not in CRASH_PHASES:
        raise ConfigError(f"HARNESS_CRASH_AT: unknown phase {phase!r} (one of {', '.join(CRASH_PHASES)})")
    target, seen = int(nth or 1), [0]

    def hook(reached: str) -> None:
        if reached == phase:
            seen[0] += 1
            if seen[0] >= target:
                os.kill(os.getpid(), signal.SIGKILL)

    return hook


def new_run_id() -> str:
    return uuid.uuid4().hex[:12]


def approver(config: RunConfig, session: Any, interactive: bool) -> Any:
    from harness.approve import InteractiveApprover, UnattendedApprover, UnattendedConfig

    if config.approval == "interactive" or (config.approval == "auto" and interactive):
        return InteractiveApprover()
    return UnattendedApprover(UnattendedConfig(approvals_dir=Path(session.dir) / "approvals",
                                               timeout_s=config.approval_timeout_s))


def tool_context(config: RunConfig, session: Any, sandbox: Any, interactive: bool = False) -> ToolContext:
    from harness.tools import builtin

    spec = session.spec
    gate = Gate(config.gate)
    # With the engine attached, images committed by writable-root calls are tagged and rollback checks them.
    session.attach_engine(getattr(sandbox, "client", None))
    writable = session.config.writable_root
    return ToolContext(sandbox=sandbox, workspace=session.workspace, spec=spec, gate=gate,
                       approver=approver(config, session, interactive),
                       mounts=builtin.context_mounts(session.workspace, gate.config.read_only_paths), test_command=config.test_cmd or config.verify,
                       commit_changes=writable, follow=(lambda: session.spec) if writable else None)


def registry() -> Registry:
    from harness.tools import builtin

    return Registry(builtin.BUILTIN_TOOLS)


def call_spec(spec: Any) -> Any:
    """The spec tool calls actually run with (the session's current image, the runner's output cap)."""
    from harness.tools.builtin import RUNNER_STDOUT_CAP

    return spec if spec.stdout_cap >= RUNNER_STDOUT_CAP else spec.model_copy(update={"stdout_cap": RUNNER_STDOUT_CAP})


def build_agent(*, config: RunConfig, session: Any, sandbox: Any, provider: Any, state: RunState,
                secrets: list[str], on_phase: Callable[[str], None], interactive: bool = False) -> Agent:
    """An Agent for a new or resumed run (state carries the context and spend of a resumed one)."""
    tools = registry()
    context_tools = tool_context(config, session, sandbox, interactive)
    context = Context(config.context, system_prompt(config.verify), task_message(state.task),
                      state.context if state.context.entries else None)
    verifier = Verifier(sandbox, config.verify, mounts=context_tools.mounts) if config.verify else None
    prewarm(config, sandbox, session.workspace, session.spec)  # a no-op when create_session did it already
    return Agent(provider=provider, registry=tools, tool_context=context_tools, session=session, sandbox=sandbox,
                 verifier=verifier, verify_spec=lambda: call_spec(session.spec),
                 budget=Budget(config.limits, state.spent), context=context,
                 trajectory=Trajectory(session.dir, secrets), state=state,
                 max_turn_tokens=config.limits.max_turn_tokens, max_verify_rounds=config.limits.max_verify_rounds,
                 on_phase=on_phase, secrets=secrets)


def crash_env() -> str | None:
    return os.environ.get("HARNESS_CRASH_AT") or None


def run_id() -> str:
    """$HARNESS_RUN_ID (tests use it to find and clean what they made) or a fresh id."""
    return os.environ.get("HARNESS_RUN_ID") or f"run-{new_run_id()}"


def open_sandbox(base_url: str | None, session_id: str | None) -> Any:
    from sandbox.docker import DockerSandbox, connect

    # Three warm containers: a turn with two concurrent reads plus the next call still find one ready.
    return DockerSandbox(connect(base_url), run_id=run_id(), session_id=session_id, pool_size=3)


def check_image(sandbox: Any, image: str) -> None:
    """Fail before a session is made when the image is missing (ImageNotFound says how to build it)."""
    from sandbox.docker import resolve_image

    resolve_image(sandbox.client, image)


def create_session(repo: Path, sessions: Path, config: RunConfig, sandbox: Any, session_id: str | None) -> Any:
    from sandbox.session import SessionConfig
    from sandbox.setup import create_session as new_session

    session_config = SessionConfig(setup=list(config.setup), setup_network=config.setup_network,
                                   writable_root=not config.sandbox.read_only_root)
    return new_session(repo, sessions, spec=config.spec(), config=session_config, sandbox=sandbox,
                       session_id=session_id, ready=lambda workspace, spec: prewarm(config, sandbox, workspace, spec))


def prewarm(config: RunConfig, sandbox: Any, workspace: Path, spec: Any) -> None:
    """Start the run's warm containers: tool calls and verification share one config, so one pool."""
    from harness.tools import builtin

    mounts = builtin.context_mounts(workspace, config.gate.read_only_paths)
    sandbox.prewarm(workspace=workspace, spec=call_spec(spec), mounts=mounts)


def prune_crashed(sandbox: Any, sessions: Path, session_id: str) -> None:
    """Remove the containers a crashed run of this session left running (before resuming it)."""
    from sandbox.cleanup import prune_session

    prune_session(sandbox.client, session_id, sessions)


def open_session(sessions: Path, session_id: str) -> Any:
    from sandbox.session import Session

    return Session.open(sessions, session_id)
