"""The tasks file: YAML (a mapping with `defaults` and `tasks`) or JSONL (one task per line), validated
by pydantic. An error names the file, the line and the field; nothing starts until the whole file is
valid. Repository paths are relative to the tasks file."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from harness.config import DelegateConfig, FeatureAllow, HooksConfig, ServiceConfig, SpendConfig
from harness.errors import ConfigError
from harness.providers.config import ProviderConfig
from harness.tools.declared import CommandToolConfig
from harness.tools.mcp import MCPServerConfig
from sandbox.settings import SessionSettings, lift_flat

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


class TaskLimits(BaseModel):
    """Per-task limits (each overrides the batch default, which overrides the run default)."""

    model_config = ConfigDict(extra="forbid")

    max_steps: int | None = Field(None, ge=1, le=10_000)
    max_cost_usd: float | None = Field(None, ge=0)
    max_tokens: int | None = Field(None, ge=1)
    timeout_min: float | None = Field(None, gt=0)


class Tags(BaseModel):
    """What a report groups task-runs by."""

    model_config = ConfigDict(extra="allow")

    category: str = "uncategorised"
    long_context: bool = False


OWN_LOOP = "harness"
"""The agent name of harness's own model loop (`--agent harness`, `agent: harness`)."""


def known_agent(name: str | None) -> str | None:
    """name when it is harness's own loop or an agent harness hosts; ValueError naming them otherwise."""
    from harness.environment.agents import AGENTS

    if name is None or name == OWN_LOOP or name in AGENTS:
        return name
    raise ValueError(
        f"{name!r} is not an agent harness hosts (it hosts {', '.join(sorted(AGENTS))}; {OWN_LOOP}: its own loop)"
    )


def given_to(model: str, agent: str | None) -> str:
    """model as given to agent: `AGENT@MODEL`, unless the model names its own agent, agent is None or
    harness's own loop, or the model is an offline one (scripted, replay, reference) no agent can use."""
    from harness.providers.vendor import ModelSpec

    spec = ModelSpec.of(model)
    if agent in (None, OWN_LOOP) or spec.agent or not spec.vendor.networked:
        return model
    return f"{agent}@{model}"


class TaskDefaults(BaseModel):
    """Batch-level defaults at the top of the file; every task may override each."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _flat_session_keys(cls, data: Any) -> Any:
        return lift_flat(data)

    @field_validator("agent")
    @classmethod
    def _known_agent(cls, value: str | None) -> str | None:
        return known_agent(value)

    verify: str | None = None
    checks: list[str] = Field(default_factory=list)
    tools: dict[str, CommandToolConfig] = Field(default_factory=dict)
    """The project's command tools every task gets (harness.tools.declared)."""
    mcp: dict[str, MCPServerConfig] = Field(default_factory=dict)
    """MCP servers every task's session starts (harness.tools.mcp)."""
    services: dict[str, ServiceConfig] = Field(default_factory=dict)
    """Services every task's run starts (harness.config.ServiceConfig)."""
    """Commands that must also exit 0 after verify passes (see RunConfig.checks)."""
    session: SessionSettings = Field(default_factory=SessionSettings)
    """How each session prepares its environment and how much its workspace may hold (see
    RunConfig.session); the file spells the keys flat (`setup`, `setup_network`, `setup_ca`,
    `setup_proxy`, `setup_mounts`, `workspace_quota`) or as a `session:` mapping."""
    image: str = "py311"
    runtime: str = "runc"
    read_only: list[str] = Field(default_factory=lambda: ["tests/"])
    """Gitignore-style paths no tool may write (the tests, by default)."""
    limits: TaskLimits = Field(default_factory=TaskLimits)
    runs: int = Field(1, ge=1, le=100)
    """k: how many times each task runs with each model (pass@k)."""
    attempts: int = Field(1, ge=1, le=16)
    """Attempts within each task-run, at once under its budget; the one verification chooses is the
    task-run's result (`harness run --attempts`, docs/attempts.md)."""
    select: Literal["first", "best"] = "first"
    """Which attempt a task-run keeps: the first verified, or the best by verification evidence."""
    model: list[str] = Field(default_factory=list)
    """Models to run every task with (flags `--model` override)."""
    agent: str | None = None
    """The hosted agent every task's models are given (`claude-code`; `harness`: harness's own loop;
    a model that names its agent, `codex@openai-responses:MODEL`, keeps it). docs/agents.md."""
    providers: dict[str, ProviderConfig] = Field(default_factory=dict)
    """Per-prefix provider settings of every task-run, as a run's config file has them
    (`providers: {openai: {base_url: http://127.0.0.1:8080/v1, force_tool: run_command}}`): a local
    server's endpoint and limits. Over the user's config file's entries."""
    delegate: DelegateConfig = Field(default_factory=DelegateConfig)
    """Sub-agents of every task-run (`delegate: {depth: 1}`; docs/subagents.md): their steps, tokens and
    cost count in the task-run's own limits."""
    devcontainer_pull: list[str] = Field(default_factory=list)
    """Registries a task's devcontainer image may be pulled from (over the user's config file's)."""
    devcontainer_features: dict[str, FeatureAllow] = Field(default_factory=dict)
    """The devcontainer features a task's devcontainer.json may install (docs/setup.md), each pinned and
    on the machine that builds it; over the user's config file's entries."""
    hooks: HooksConfig = Field(default_factory=HooksConfig)
    """Lifecycle hooks of every task-run (docs/hooks.md), the tasks file's author's own programs, run
    where the task-run runs (on a cluster: the worker's machine)."""
    spend: SpendConfig = Field(default_factory=SpendConfig)
    """The user's spend ceilings (`[spend]` of the user's config, set by `harness batch`): each task-run
    reserves its cost within them (harness.spend)."""
    grace_s: float = Field(60.0, ge=1, le=24 * 3600)
    """How long a session may run past its wall clock (`limits.timeout_min`) before its worker stops it."""


class ForkFrom(BaseModel):
    """A task-run that continues another session from one of its steps (`harness fork`)."""

    model_config = ConfigDict(extra="forbid")

    folder: Path
    """The parent session's folder (absolute)."""
    at: int = Field(ge=0)
    """The parent's run step to continue after (its workspace and conversation then)."""
    hint: str | None = None
    """A user message appended before the fork's first request."""


class Task(BaseModel):
    """One task of the file (fields left out take the batch defaults)."""

    model_config = ConfigDict(extra="forbid")

    id: str
    repo: Path
    task: str = Field(min_length=1)
    verify: str | None = None
    checks: list[str] | None = None
    tools: dict[str, CommandToolConfig] | None = None
    """This task's project tools (over the defaults' by name)."""
    mcp: dict[str, MCPServerConfig] | None = None
    """This task's MCP servers (over the defaults' by name)."""
    services: dict[str, ServiceConfig] | None = None
    """This task's services (over the defaults' by name)."""
    session: SessionSettings = Field(default_factory=SessionSettings)
    """The session settings this task runs with: the defaults', with the keys the task gives
    (flat or in `session:`) over them (merged by `load_tasks`)."""
    image: str | None = None
    runtime: str | None = None
    read_only: list[str] | None = None
    limits: TaskLimits = Field(default_factory=TaskLimits)
    tags: Tags = Field(default_factory=Tags)
    first_tools: list[str] = Field(default_factory=list)
    """The tools that count as a sensible first call (the report's first-tool accuracy)."""
    max_files: int | None = Field(None, ge=1)
    """The change may touch at most this many files to count as completed (the report)."""
    max_lines: int | None = Field(None, ge=1)
    """The change may add and remove at most this many lines to count as completed."""
    reference: Path | None = None
    """A mined task's reference (`reference.json`): for graders and the `reference:` model only, never
    shown to the model. Relative to the tasks file."""
    model: str | None = None
    """This task's own model (`scripted:FILE` for a hand-made or replayed task, a file relative to the
    tasks file); it runs with this one instead of the batch's models."""
    agent: str | None = None
    """The hosted agent this task's models are given (over the defaults' agent)."""
    runs: int | None = Field(None, ge=1, le=100)
    attempts: int | None = Field(None, ge=1, le=16)
    """Attempts within each of this task's task-runs (over the defaults')."""
    select: Literal["first", "best"] | None = None
    fork: ForkFrom | None = None
    """Set by `harness fork` (never in a tasks file): the session and step this task-run continues."""
    line: int = 0
    """Where the task starts in the file (for messages); set by the loader."""

    @model_validator(mode="before")
    @classmethod
    def _flat_session_keys(cls, data: Any) -> Any:
        return lift_flat(data)

    @field_validator("agent")
    @classmethod
    def _known_agent(cls, value: str | None) -> str | None:
        return known_agent(value)

    @field_validator("id")
    @classmethod
    def _safe_id(cls, value: str) -> str:
        if not _ID.match(value):
            raise ValueError("use letters, digits, '.', '-' and '_' (at most 100), starting with a letter or digit")
        return value


class TasksFile(BaseModel):
    """The whole file, defaults applied by `resolved()`."""

    model_config = ConfigDict(extra="forbid")

    source: Path
    defaults: TaskDefaults = Field(default_factory=TaskDefaults)
    tasks: list[Task]


TASKS_LIMIT = 64 * 1024**2
"""A tasks file larger than this is refused before it is read."""


def read_tasks_text(path: Path) -> str:
    """A tasks file's text (sandbox.named: a regular file of at most TASKS_LIMIT); ConfigError otherwise."""
    from sandbox.named import NamedFileError, read_named

    try:
        return read_named(path, what="the tasks file", limit=TASKS_LIMIT).decode("utf-8")
    except NamedFileError as error:
        raise ConfigError(str(error)) from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"cannot read the tasks file {path}: {error}") from None


def load_tasks(path: Path) -> TasksFile:
    """Read and validate a tasks file; ConfigError `FILE:LINE: field: problem` on the first error."""
    path = Path(path)
    text = read_tasks_text(path)
    if path.suffix.lower() == ".jsonl":
        defaults, entries = TaskDefaults(), _jsonl(path, text)
    else:
        defaults, entries = _yaml(path, text)
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    defaults = defaults.model_copy(update={"session": _anchored(defaults.session, path)})
    for line, raw in entries:
        task = _validated(Task, {**_with_defaults(raw, defaults, path, line), "line": line}, path, line)
        if task.id in seen:
            raise ConfigError(f"{path}:{line}: id: {task.id!r} is already the id of the task on line {seen[task.id]}")
        seen[task.id] = line
        repo = task.repo if task.repo.is_absolute() else (path.parent / task.repo)
        if not repo.is_dir():
            raise ConfigError(f"{path}:{line}: repo: {task.repo} is not a directory (paths are relative to the file)")
        update: dict[str, Any] = {"repo": repo.resolve(), "session": _anchored(task.session, path)}
        _bundles_checked(update["session"], path, line)
        if task.reference is not None:
            reference = task.reference if task.reference.is_absolute() else (path.parent / task.reference)
            if not reference.is_file():
                raise ConfigError(
                    f"{path}:{line}: reference: {task.reference} is not a file (paths are relative to the file)"
                )
            update["reference"] = reference.resolve()
        if task.model:
            update["model"] = _anchored_model(task.model, path, line)
        tasks.append(task.model_copy(update=update))
    if not tasks:
        raise ConfigError(f"{path}:1: tasks: the file holds no task")
    return TasksFile(source=path.resolve(), defaults=defaults, tasks=tasks)


def _with_defaults(raw: Any, defaults: TaskDefaults, path: Path, line: int) -> Any:
    """The raw task with its session settings complete: the defaults' under the keys it gives."""
    try:
        lifted = lift_flat(raw)
    except ValueError as error:
        raise ConfigError(f"{path}:{line}: {error}") from None
    if not isinstance(lifted, dict) or not isinstance(lifted.get("session", {}), dict):
        return lifted  # the model's validation names what is wrong
    return {**lifted, "session": {**dict(defaults.session), **lifted.get("session", {})}}


def _bundles_checked(settings: SessionSettings, path: Path, line: int) -> None:
    """ConfigError FILE:LINE when a CA bundle the task names is no regular file of a bundle's size."""
    from sandbox.named import NamedFileError, check_named

    for bundle, flag in settings.named_bundles():
        try:
            check_named(bundle, what=flag.removeprefix("--").replace("-", "_"), limit=16 * 1024**2)
        except NamedFileError as error:
            raise ConfigError(f"{path}:{line}: {error}") from None


def _anchored(settings: SessionSettings, path: Path) -> SessionSettings:
    """settings with relative CA bundles resolved against the tasks file's folder."""
    update = {
        key: (path.parent / value).resolve()
        for key in ("setup_ca", "allow_net_ca", "ca_bundle")
        if (value := getattr(settings, key)) is not None and not value.is_absolute()
    }
    return settings.model_copy(update=update) if update else settings


def _anchored_model(spec: str, path: Path, line: int) -> str:
    """A task's model with a file-based target made absolute (relative to the tasks file)."""
    from harness.providers.vendor import ModelSpec

    try:
        model = ModelSpec.parse(spec)
    except ConfigError as error:
        raise ConfigError(f"{path}:{line}: model: {error}") from None
    if model.vendor.file_target and model.target and not Path(model.target).is_absolute():
        target = (path.parent / model.target).resolve()
        if not target.is_file():
            raise ConfigError(f"{path}:{line}: model: {model.target} is not a file (paths are relative to the file)")
        return model.with_target(str(target))
    return spec


def _validated(model: type[Any], data: Any, path: Path, line: int) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "task"
        message = str(first["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"{path}:{line}: {where}: {message}") from None


def _jsonl(path: Path, text: str) -> list[tuple[int, Any]]:
    entries = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            value = json.loads(line)
        except ValueError as error:
            raise ConfigError(f"{path}:{number}: not a JSON object ({error})") from None
        if not isinstance(value, dict):
            raise ConfigError(f"{path}:{number}: each line must be one JSON object (a task)")
        entries.append((number, value))
    return entries


def _yaml(path: Path, text: str) -> tuple[TaskDefaults, list[tuple[int, Any]]]:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        raise ConfigError(f"{path}:{line}: invalid YAML: {getattr(error, 'problem', None) or error}") from None
    if not isinstance(root, MappingNode):
        raise ConfigError(f"{path}:1: expected a mapping with `tasks:` (and optionally `defaults:`)")
    fields = {key.value: value for key, value in root.value if isinstance(key, ScalarNode)}
    unknown = set(fields) - {"defaults", "tasks"}
    if unknown:
        node = next(value for key, value in root.value if key.value in unknown)
        raise ConfigError(f"{path}:{node.start_mark.line}: unknown key {sorted(unknown)[0]!r} (defaults, tasks)")
    defaults = TaskDefaults()
    if "defaults" in fields:
        defaults = _validated(
            TaskDefaults, _construct(fields["defaults"]), path, fields["defaults"].start_mark.line + 1
        )
    tasks = fields.get("tasks")
    if not isinstance(tasks, SequenceNode):
        line = tasks.start_mark.line + 1 if tasks is not None else 1
        raise ConfigError(f"{path}:{line}: tasks: must be a list of tasks")
    return defaults, [(node.start_mark.line + 1, _construct(node)) for node in tasks.value]


def _construct(node: Node) -> Any:
    return yaml.SafeLoader("").construct_document(node)
