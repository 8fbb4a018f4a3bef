"""Run configuration: pydantic models, the per-user TOML file, and flag overrides.

The file comes from the per-user config directory (or `--config FILE`), never from the repository
under test: a hostile repository must not be able to choose its own verify command, loosen the gate
or point the harness at another model endpoint. API keys are never stored here, only the NAME of
the environment variable that holds each one (`api_key_env`); the CLI reads that variable.
"""

from __future__ import annotations

import copy
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harness.errors import ConfigError, FlagError
from harness.policy.gate import GateConfig
from harness.providers.config import ProviderConfig
from harness.providers.vendor import ModelSpec, prefix_of
from harness.tools.declared import CommandToolConfig
from harness.tools.mcp import MCPServerConfig
from sandbox.settings import FLAT_KEYS, SessionSettings, StartedFrom, lift_flat
from sandbox.spec import SandboxSpec

CONFIG_FILE_NAME = "config.toml"
SERVICE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}")
"""A service's name: what calls reach it by (an alias, or a line of their hosts file)."""


class LimitsConfig(BaseModel):
    """Budgets of one run; hitting any ends the run as `limit:<which>`."""

    model_config = ConfigDict(extra="forbid")

    max_steps: int = Field(40, ge=1, le=10_000)
    """Model turns allowed (the hard step limit of the loop)."""
    max_tokens: int | None = Field(None, ge=1)
    """Input + output tokens over the whole run; None = unlimited."""
    max_cost_usd: float | None = Field(None, ge=0)
    """Spend over the whole run in USD (failed and retried calls included); None = unlimited."""
    timeout_min: float | None = Field(None, gt=0)
    """Wall-clock minutes for the whole run (across resumes); None = unlimited. Tool calls and
    verification never get more than what is left of it."""
    min_call_s: float = Field(2.0, gt=0)
    """Seconds of wall clock a tool call or verification needs at least: with less left, the run stops
    as `limit:wall_clock` before starting it."""
    max_verify_rounds: int = Field(3, ge=1, le=100)
    """Verification failures sent back to the model before the run ends as failed_verification."""
    max_turn_tokens: int = Field(4096, ge=16)
    """max_tokens asked of the model for one turn."""


class SpendConfig(BaseModel):
    """Ceilings over all runs and batches of the user (harness.spend): each run reserves what it may
    spend before it starts, within what they leave, from a ledger of the user's own."""

    model_config = ConfigDict(extra="forbid")

    daily_usd: float | None = Field(None, gt=0, allow_inf_nan=False)
    """USD all runs may spend in one day (local time); None: no daily ceiling."""
    monthly_usd: float | None = Field(None, gt=0, allow_inf_nan=False)
    """USD all runs may spend in one calendar month; None: no monthly ceiling."""
    ledger: Path | None = None
    """The ledger file (default: `spend.jsonl` in the per-user data directory, or $HARNESS_SPEND_LEDGER):
    runs that should share a ceiling must share it (a cluster's workers: a shared path)."""


class ContextConfig(BaseModel):
    """Prompt budget and compaction."""

    model_config = ConfigDict(extra="forbid")

    budget_tokens: int = Field(100_000, ge=1_000)
    """Prompt tokens the context may use; folding starts above `fold_at` of this."""
    fold_at: float = Field(0.7, gt=0, lt=1)
    """Fraction of the budget above which older tool results are folded into one-line stubs."""
    keep_recent: int = Field(4, ge=0)
    """Most recent tool results never folded."""
    tool_result_chars: int = Field(24_000, ge=500)
    """Largest tool result kept in the conversation (head and tail beyond it)."""
    fold: bool = True
    """Fold old tool results (the second tier); off only to measure the naive loop."""
    summarize_at: float = Field(0.95, gt=0, le=1)
    """Fraction of the budget that, still passed after folding, has the older middle of the
    conversation replaced by a summary the model writes (the third tier)."""
    summaries: bool = True
    keep_recent_turns: int = Field(3, ge=1, le=50)
    """Most recent model turns (with their tool results) a summary never replaces."""
    summary_max_tokens: int = Field(1500, ge=200, le=16_000)


class RepetitionConfig(BaseModel):
    """When repetition is pointed out, and when it ends the run."""

    model_config = ConfigDict(extra="forbid")

    note_after: int = Field(3, ge=2)
    """The same call with the same result this many times in a row: the result carries a note."""
    stuck_after: int = Field(6, ge=2)
    """...this many times: the run ends `stuck`."""
    cycle_note_after: int = Field(2, ge=2)
    """A cycle of 2-3 calls repeated this many times: noted."""
    cycle_stuck_after: int = Field(4, ge=2)
    """...this many times: stuck."""


DEFAULT_TOOL_TIMEOUTS = {"read": 30.0, "write": 60.0, "run_tests": 1800.0}
"""Reads get seconds, tests get minutes; other tools (run_command, git) the sandbox's timeout_s."""


class ToolsConfig(BaseModel):
    """How long each tool's calls may take, and the project's own tools (`[tools.NAME]` tables)."""

    model_config = ConfigDict(extra="forbid")

    timeouts: dict[str, Annotated[float, Field(gt=0, le=24 * 3600)]] = Field(
        default_factory=lambda: dict(DEFAULT_TOOL_TIMEOUTS)
    )
    """Seconds per call, by tool name (`run_tests`) or tier (`read`, `write`, `exec`); every call is
    still capped by the run's wall clock (`limits.timeout_min`)."""
    declared: dict[str, CommandToolConfig] = Field(default_factory=dict)
    """The project's command tools by name (harness.tools.declared); a file writes each as its own
    `[tools.NAME]` table beside `[tools.timeouts]`."""

    @model_validator(mode="before")
    @classmethod
    def _tables(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        named = {key: value for key, value in data.items() if key not in ("timeouts", "declared")}
        if not named:
            return data
        rest = {key: value for key, value in data.items() if key in ("timeouts", "declared")}
        return {**rest, "declared": {**rest.get("declared", {}), **named}}


class ServiceConfig(BaseModel):
    """A helper that outlives one call (`[services.NAME]`): a database, a dev server."""

    model_config = ConfigDict(extra="forbid")

    image: str
    """Its image (local: harness never pulls)."""
    command: list[str] | None = None
    """Its argv (default: the image's own)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Variables in its container, as written (never the host's)."""
    health: list[str] | None = None
    """An argv run inside it until it exits 0: the service is ready (default: it is running)."""
    ready_timeout_s: float = Field(60.0, gt=0, le=3600)
    ports: list[int] = Field(default_factory=list)
    """The ports it serves (for the task's words and the docs; the network lets calls reach any)."""
    user: str | None = None
    """Who it runs as inside its container (a name or uid[:gid] the image knows, such as a database
    image's own `postgres`); default the sandbox user. Never root: there are no capabilities to use."""
    tmpfs: list[str] = Field(default_factory=list, max_length=8)
    """Absolute paths given a fresh writable tmpfs (the root stays read-only), such as a database's
    data directory; bounded like /tmp, gone when the service stops."""

    @field_validator("user")
    @classmethod
    def _not_root(cls, value: str | None) -> str | None:
        if value is None:
            return value
        name = value.split(":")[0].strip()
        numeric = re.fullmatch(r"[+-]?\d+", name)
        if not name or name == "root" or (numeric and int(name) == 0):  # `00`, `+0`, `-0` are root too
            raise ValueError("a service never runs as root: give the image's own user (such as postgres) or a uid")
        return value

    @field_validator("tmpfs")
    @classmethod
    def _absolute(cls, paths: list[str]) -> list[str]:
        for path in paths:
            if not path.startswith("/") or path.rstrip("/") in ("", "/workspace", "/tmp") or ".." in path.split("/"):
                raise ValueError(f"tmpfs path {path!r}: give an absolute path other than /, /tmp and /workspace")
        return paths


class HookEntry(BaseModel):
    """One lifecycle hook: a program of the user's, run on this machine with the event's JSON on stdin
    (harness.agent.hooks; docs/hooks.md)."""

    model_config = ConfigDict(extra="forbid")

    command: str = Field(min_length=1)
    """A shell command line (`/bin/sh -c`), run in the session's workspace."""
    matcher: str = ""
    """Tool events only: the tool names it applies to, a regular expression matched whole
    (`run_command|apply_patch`); "" or `*` matches every tool."""
    timeout: float = Field(60.0, gt=0, le=3600)
    """Seconds it may take; past them it is stopped (a gating hook then blocks)."""

    @field_validator("matcher")
    @classmethod
    def _pattern(cls, value: str) -> str:
        if value in ("", "*"):
            return value
        import regex

        if len(value) > 1000:
            raise ValueError("a matcher is at most 1000 characters")
        try:
            regex.compile(value)
        except regex.error as error:
            raise ValueError(f"matcher {value[:100]!r} is no regular expression ({error})") from None
        return value


class Dropped(BaseModel):
    """One thing of a devcontainer.json that was not applied (harness.environment.devcontainer)."""

    model_config = ConfigDict(extra="forbid")

    key: str
    why: str

    def line(self) -> str:
        return f"{self.key}: {self.why}"


class FeatureAllow(BaseModel):
    """A devcontainer feature the user allows (`[devcontainer_features."ID"]`): where it is on this
    machine (it is never fetched) and what pins it. A repository's own feature (`./NAME`) needs no
    source: its folder in the repository is pinned by its digest."""

    model_config = ConfigDict(extra="forbid")

    source: Path | None = None
    """A folder or a `.tgz`/`.tar.gz`/`.tar` archive (as a registry serves a feature) on this machine;
    None: fetched from its OCI registry (its pins checked before it is used)."""
    version: str | None = None
    """The version its `devcontainer-feature.json` must say."""
    sha256: str | None = None
    """The archive's SHA-256 (`sha256sum`), or a folder's as harness reports it."""

    @model_validator(mode="after")
    def _pinned(self) -> FeatureAllow:
        if self.version is None and self.sha256 is None:
            raise ValueError("a feature is allowed only pinned: give its version, its sha256, or both")
        if self.sha256 is not None and not re.fullmatch(r"(sha256:)?[0-9a-f]{64}", self.sha256):
            raise ValueError(f"sha256 {self.sha256[:80]!r} is not 64 lowercase hex digits")
        return self

    @property
    def digest(self) -> str | None:
        return self.sha256.removeprefix("sha256:") if self.sha256 else None


class Feature(BaseModel):
    """An allowed devcontainer feature, resolved: what its install script is given and what it sets."""

    model_config = ConfigDict(extra="forbid")

    id: str
    """As the devcontainer.json names it (without its tag)."""
    source: str
    """The folder or archive on this machine (a repository's own: its folder, absolute; a fetched one:
    its archive in the cache)."""
    fetched: bool = False
    """Fetched from its registry (harness.environment.registry)."""
    version: str = ""
    sha256: str
    """What was read (the archive's digest, or the folder's)."""
    options: dict[str, str] = Field(default_factory=dict)
    """The install script's variables (its options, as the spec names them, with their values)."""
    environment: dict[str, str] = Field(default_factory=dict)
    """Its `containerEnv`."""


class Devcontainer(BaseModel):
    """What harness takes of a devcontainer.json, and what it drops."""

    model_config = ConfigDict(extra="forbid")

    path: str
    """The file, relative to the repository."""
    image: str | None = None
    """The image the environment starts from (never pulled: the engine must have it)."""
    dockerfile: str | None = None
    """The Dockerfile to build, relative to the repository (inside it)."""
    context: str = "."
    """The build context, relative to the repository (inside it)."""
    build_args: dict[str, str] = Field(default_factory=dict)
    target: str | None = None
    commands: list[str] = Field(default_factory=list)
    """The lifecycle commands, each one shell command line, in order."""
    environment: dict[str, str] = Field(default_factory=dict)
    """`containerEnv`: the image's environment, for the lifecycle commands and the calls (never with a
    value of this machine's, never a variable harness's calls depend on)."""
    features: list[Feature] = Field(default_factory=list)
    """The allowed features, in install order (each one's install script runs as root at build time,
    without network unless `--setup-network`)."""
    services: dict[str, ServiceConfig] = Field(default_factory=dict)
    """A compose-described devcontainer's other services, as harness's (the user's own of a name win)."""
    limits: dict[str, float] = Field(default_factory=dict)
    """`hostRequirements` as limits (cpus; memory in bytes), each capped by the user's."""
    applied: list[str] = Field(default_factory=list)
    """How each of `hostRequirements` was taken (asked, and the limit it became)."""
    dropped: list[Dropped] = Field(default_factory=list)
    built: str | None = None
    """The image calls start from, once built (harness's sandbox layer over the devcontainer's)."""

    @property
    def dropped_lines(self) -> list[str]:
        return [d.line() for d in self.dropped]


class DelegateConfig(BaseModel):
    """Sub-agents (`delegate`): how deep the tree may go, how many children run at once across it, and
    the share of what is left a child gets when the model names none."""

    model_config = ConfigDict(extra="forbid")

    depth: int = Field(0, ge=0, le=4)
    """Levels of sub-agents below the run's own agent; 0 leaves `delegate` out of the menu."""
    at_once: int = Field(2, ge=1, le=8)
    """Children running at the same time, counted on the run's whole tree."""
    share: float = Field(0.5, gt=0, le=1)
    """The fraction of what is left (steps, tokens, cost, wall clock) a child is reserved when the
    delegating model asks for no amount."""


class AttemptsConfig(BaseModel):
    """Attempts (`--attempts K`): K runs of the task from the same start, at once, within the run's
    one budget; the one verification chooses is the run's result (`harness.assembly.attempts`)."""

    model_config = ConfigDict(extra="forbid")

    count: int = Field(1, ge=1, le=16)
    """Attempts at the task; 1 is a plain run."""
    select: Literal["first", "best"] = "first"
    """first: the first attempt that verifies stops the others and is kept; best: all run to their
    end and are ranked by their evidence (verified, fewer failing tests, the smaller change)."""


class HooksConfig(BaseModel):
    """Hooks by event (`[[hooks.PreToolUse]]`...), each list run in its order, one at a time."""

    model_config = ConfigDict(extra="forbid")

    SessionStart: list[HookEntry] = Field(default_factory=list)
    PreToolUse: list[HookEntry] = Field(default_factory=list)
    PostToolUse: list[HookEntry] = Field(default_factory=list)
    Stop: list[HookEntry] = Field(default_factory=list)
    SessionEnd: list[HookEntry] = Field(default_factory=list)

    def then(self, other: HooksConfig) -> HooksConfig:
        """These hooks, then other's, each event's list in its order."""
        return HooksConfig(
            **{event: [*getattr(self, event), *getattr(other, event)] for event in type(self).model_fields}
        )


def _agent_of_model(data: Any) -> Any:
    """A model given as `AGENT@PREFIX:MODEL` (a batch's, a tasks file's) is that agent with that model;
    `harness@PREFIX:MODEL` is harness's own loop with it."""
    if not isinstance(data, dict) or not isinstance(data.get("model"), str):
        return data
    spec = ModelSpec.of(data["model"])
    if not spec.agent:
        return data
    if spec.agent == "harness":  # harness's own loop, named (a fork of a hosted run given back to it)
        return {**data, "model": spec.model, "agent": None}
    if data.get("agent") not in (None, spec.agent):
        raise ValueError(f"model {data['model']!r} names the agent {spec.agent!r}, and agent is {data['agent']!r}")
    return {**data, "model": spec.model, "agent": spec.agent}


class RunConfig(BaseModel):
    """Everything `harness run` needs, from the config file and flags."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    """PROVIDER:MODEL, e.g. `openai:gpt-4.1`, `anthropic:claude-sonnet-4-5`, `scripted:FILE`."""
    agent: str | None = None
    """A hosted agent (`--agent claude-code`): its own loop, in a container of its own, over ACP, instead
    of harness's model loop; each tool call it makes a step of this run (docs/agents.md). `model` is
    then the model it is given (its protocol's prefix: `anthropic:MODEL` for Claude Code)."""
    agent_shell: Literal["harness", "own"] = "harness"
    """A hosted agent's commands: harness's `run_command`, a fresh container each (its own shell off), or
    its own shell in its own container, each command asked of the gate and recorded as a step
    (`--agent-shell own`; docs/agents.md)."""
    base_url: str | None = None
    """Endpoint override for this run (beats the provider entry's base_url)."""
    region: str | None = None
    """`bedrock:`/`vertex:` models: the cloud region for this run (beats the provider entry's)."""
    project: str | None = None
    """`vertex:` models: the Google Cloud project for this run (beats the provider entry's)."""
    thinking: Literal["low", "medium", "high"] | None = None
    """Turn the model's reasoning on for this run (`--thinking`); beats the provider entry's
    reasoning_effort."""
    image: str = "py311"
    """Sandbox image for every tool call."""
    verify: str | None = None
    """Shell command that decides 'done' (exit 0 only); None = outcome `unverified`."""
    detect_verify: bool = True
    """With no verify command, use the one the repository's layout names (pytest, npm test, go test,
    cargo test, make test); `--no-verify` turns it off (the run then ends `unverified`)."""
    verify_source: str = ""
    """Where the verify command came from: empty (given), or `detected: <why>`."""
    verify_protect: list[str] = Field(default_factory=list)
    """gitignore-style patterns added to the protected set (the tests and the files that configure how
    they are found and run, see harness.agent.protect): verification runs them as they were at the start,
    and a change the agent made to any of them fails it."""
    checks: list[str] = Field(default_factory=list)
    """Commands run after verify passes (a linter, a type check, a security scan), in order; the
    outcome is `verified` only when every one exits 0, and a failing one goes back to the model."""
    test_cmd: str | None = None
    """Command the run_tests tool runs; defaults to the verify command."""
    session: SessionSettings = Field(default_factory=SessionSettings)
    """How each new session prepares its environment (`setup` commands, their network, CA, proxy and
    mounts) and how much its workspace may hold (`workspace_quota`, root only): the sandbox's one
    sub-model. The config file and flags spell its keys flat (`setup = [...]`) or as `[session]`."""
    setup_source: str = ""
    """Where the setup commands came from: empty (given), or `detected: <why>` (`--setup auto`)."""
    started_from: StartedFrom | None = None
    """The commit a start state that is no git repository came from (the batch worker sets it for a
    mined task from its tags): the session records it and `harness apply` lands on it."""
    limits: LimitsConfig = Field(default_factory=LimitsConfig)
    spend: SpendConfig = Field(default_factory=SpendConfig)
    """Ceilings over all the user's runs (`[spend]`): each run's cost limit is reserved within them."""

    @model_validator(mode="before")
    @classmethod
    def _flat_session_keys(cls, data: Any) -> Any:
        return _agent_of_model(lift_flat(data))

    @field_validator("services")
    @classmethod
    def _host_names(cls, services: dict[str, ServiceConfig]) -> dict[str, ServiceConfig]:
        for name in services:
            if not SERVICE_NAME.fullmatch(name):
                raise ValueError(
                    f"service name {name!r}: a call reaches a service by its name, so give a host name "
                    "(letters, digits, '.', '_' and '-', beginning with a letter or digit, 63 at most)"
                )
        return services

    repetition: RepetitionConfig = Field(default_factory=RepetitionConfig)
    """When repeated calls get a note, and when they end the run `stuck`."""
    """Run budgets."""
    gate: GateConfig = Field(default_factory=GateConfig)
    """Permission gate: read-only paths (default tests/), protected paths, allowed programs, rules."""
    approval: Literal["auto", "interactive", "unattended"] = "auto"
    """Who answers the gate's `ask` decisions: a person at the terminal, or nobody (deny after the
    timeout; answers may be dropped into the session's approvals/ folder). auto = interactive on a TTY."""
    approval_timeout_s: float = Field(30.0, ge=0)
    """Unattended approval: seconds to wait for an answer file before denying."""
    context: ContextConfig = Field(default_factory=ContextConfig)
    """Prompt budget and compaction."""
    tools: ToolsConfig = Field(default_factory=ToolsConfig)
    """Per-tool timeouts."""
    services: dict[str, ServiceConfig] = Field(default_factory=dict)
    """Services by name (`[services.NAME]`), started before the run's first step on a network of the
    session's with no route out, reachable from every call as NAME:PORT, stopped with the run."""
    mcp: dict[str, MCPServerConfig] = Field(default_factory=dict)
    """MCP servers (stdio) by name, each in a hardened container of its own for the session
    (`[mcp.NAME]` tables; harness.tools.mcp); their tools join the menu as NAME__TOOL."""
    sandbox: SandboxSpec = Field(default_factory=SandboxSpec)
    """Container posture and limits for tool calls (image is taken from `image`)."""
    providers: dict[str, ProviderConfig] = Field(default_factory=dict)
    """Per-prefix provider settings, e.g. [providers.openai] base_url / api_key_env / retry / prices."""
    instructions: str | None = None
    """A file of the user's own standing instructions (`--instructions FILE`, or `instructions = PATH` in
    the config file), given to the model in its system prompt; read when the run starts."""
    instructions_text: str = ""
    """The words of `instructions` as read when the run started (a resume gives the model the same)."""
    repo_instructions: bool = True
    """Give the model the repository's AGENTS.md and CLAUDE.md as its authors' untrusted words, beside the
    task (`--no-repo-instructions`: not); harness.agent.instructions."""
    repo_hooks: bool = False
    """`--repo-hooks`: also run the hooks the repository declares (`.harness/hooks.toml`), each in a
    sandbox container of the session (no network, the workspace read-only), after the user's own."""
    devcontainer: Devcontainer | None = None
    """`--setup devcontainer`: what the run takes of the repository's devcontainer.json (the image or
    Dockerfile calls start from, its lifecycle commands as setup) and what it never applies."""
    devcontainer_pull: list[str] = Field(default_factory=list)
    """Registries a devcontainer's image (or its Dockerfile's FROM) may be pulled from when the engine
    lacks it (`--pull-from HOST`, `docker.io` for a bare name); from any other, nothing is pulled."""
    devcontainer_features: dict[str, FeatureAllow] = Field(default_factory=dict)
    """The devcontainer features a repository may install (`[devcontainer_features."ID"]`), each pinned
    and on this machine; any other a devcontainer.json names is listed as not applied."""
    delegate: DelegateConfig = Field(default_factory=DelegateConfig)
    """Sub-agents: `[delegate] depth = 1` puts the `delegate` tool in the menu (see docs/subagents.md)."""
    attempts: AttemptsConfig = Field(default_factory=AttemptsConfig)
    rollout: bool = False
    """`--rollout`: keep each turn's sampled tokens and their log-probabilities (and ids where the
    server gives them) beside the turn, for `harness export --format rollout` (docs/rollouts.md)."""
    """`--attempts K --select first|best`, or `[attempts] count = K` (docs/attempts.md)."""
    hooks: HooksConfig = Field(default_factory=HooksConfig)
    """Lifecycle hooks of the user's own (never a repository's): `[[hooks.PreToolUse]]` with `command`,
    `matcher`, `timeout`. The gating events (PreToolUse, Stop) fail closed."""

    def spec(self, **labels: str) -> SandboxSpec:
        """The sandbox spec for this run's tool calls."""
        return self.sandbox.model_copy(update={"image": self.image, "labels": {**self.sandbox.labels, **labels}})

    def provider_config(self) -> ProviderConfig:
        """The provider settings for this run's model prefix, with the flag's base_url and turn size applied."""
        entry = self.providers.get(prefix_of(self.model), ProviderConfig())
        update: dict[str, Any] = {"max_tokens": self.limits.max_turn_tokens}
        if self.base_url:
            update["base_url"] = self.base_url
        if self.thinking:
            update["reasoning_effort"] = self.thinking
        if self.rollout:
            update["rollout"] = True
        update.update({key: getattr(self, key) for key in ("region", "project") if getattr(self, key)})
        return entry.model_copy(update=update)


def default_config_path() -> Path:
    """The per-user config file (it may not exist)."""
    return Path(platformdirs.user_config_dir("harness")) / CONFIG_FILE_NAME


CONFIG_LIMIT = 4 * 1024**2
"""A config file larger than this is refused before it is read."""


def load_config(
    path: Path | None, overrides: dict[str, Any] | None = None, *, repo: Path | None = None, flags: bool = True
) -> RunConfig:
    """Read the TOML file (explicit path, else the per-user one if present) and apply overrides.

    overrides maps dotted keys (`limits.max_steps`) to values; None values are ignored.
    """
    from sandbox.named import read_named

    data: dict[str, Any] = {}
    chosen = path if path is not None else default_config_path()
    if path is not None or chosen.is_file():
        _refuse_repository_file(chosen, repo)
        raw = read_named(chosen, what="--config" if path is not None else "the config file", limit=CONFIG_LIMIT)
        try:
            data = tomllib.loads(raw.decode("utf-8"))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
            raise ConfigError(f"{chosen}: not valid TOML: {error}") from None
    return with_overrides(data, overrides or {}, str(chosen) if data or path is not None else "flags", flags=flags)


def with_overrides(
    data: dict[str, Any], overrides: dict[str, Any], source: str = "flags", *, flags: bool = False
) -> RunConfig:
    """A RunConfig from data with dotted overrides applied (`limits.max_steps`; None = keep). The
    session settings' flat keys (`setup`, `workspace_quota`...) name their place in `session`. flags:
    the overrides are the command line's, so a bad one is a FlagError named as its flag."""
    try:
        data = lift_flat(copy.deepcopy(data))
    except ValueError as error:
        raise ConfigError(f"{source}: {error}") from None
    for key, value in overrides.items():
        if value is not None:
            _set_dotted(data, f"session.{key}" if key in FLAT_KEYS else key, value)
    try:
        return RunConfig.model_validate(data)
    except ValidationError as error:
        given = {f"session.{key}" if key in FLAT_KEYS else key for key, value in overrides.items() if value is not None}
        where = ".".join(str(part) for part in error.errors()[0]["loc"] if not isinstance(part, int))
        flagged = any(where == key or where.startswith(key + ".") or key.startswith(where + ".") for key in given)
        if flags and (flagged or (source == "flags" and not where)):
            raise FlagError(said(error, "flags")) from None  # a flag's value: exit 64, named as the flag
        raise ConfigError(said(error, source)) from None


FLAGS = {
    "session.allow_net": "--allow-net",
    "session.secrets": "--secret",
    "session.setup_mounts": "--setup-mount",
    "limits.max_cost_usd": "--max-cost",
    "sandbox.runtime": "--runtime",
}
"""Settings whose flag is not their last key with dashes."""


def said(error: ValidationError, source: str) -> str:
    """A validation error as one line in harness's words: what was given and what is wanted, named as
    the flag (`--thinking 'x': ...`) when it came from flags, else as the file's key; never the
    validation library's own prefixes."""
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"] if not isinstance(part, int))
    context = first.get("ctx") or {}
    text = str(context["error"]) if first["type"] == "value_error" and "error" in context else str(first["msg"])
    text = text[0].lower() + text[1:] if text[:1].isupper() and not text.startswith("--") else text
    if text.startswith("--"):  # the message names its flag and what was given already
        return text if source == "flags" else f"{source}: {where}: {text}"
    if source == "flags" and where:
        flag = FLAGS.get(where, "--" + where.rsplit(".", 1)[-1].replace("_", "-"))
        given = first.get("input")
        shown = f" {given!r}" if isinstance(given, str | int | float) and not isinstance(given, bool) else ""
        return f"{flag}{shown}: {text}"
    return f"{source}: {where}: {text}" if where else f"{source}: {text}"


def _refuse_repository_file(config_file: Path, repo: Path | None) -> None:
    if repo is None:
        return
    resolved, root = config_file.resolve(), repo.resolve()
    if resolved == root or root in resolved.parents:
        raise ConfigError(f"refusing a config file inside the repository under test: {config_file}")


def _set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    *parents, leaf = key.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
    node[leaf] = value
