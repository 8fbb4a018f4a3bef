"""A project's own tools, declared by the user (the config file's `[tools.NAME]` tables, a tasks
file's `tools:`; never read from the repository): a four-part description, typed parameters with
their bounds, and a command as an argv template whose `{param}` placeholders become argument values,
each inside its own argv element, so nothing the model sends is ever spliced into a shell string.
Each call runs as run_command does: the gate first (the tool's name, tier and path arguments are
what rules match), a fresh container, the envelope back, a snapshot after a call that may write."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator

from harness.errors import ConfigError
from harness.policy.gate import GateRequest
from harness.tools.calls import check_envelope
from harness.tools.registry import ToolContext
from harness.tools.schema import Outcome, Tool

NAME = re.compile(r"^[a-z][a-z0-9_]{0,40}$")
PLACEHOLDER = re.compile(r"\{([a-z][a-z0-9_]*)\}")
FRONT = 10
"""At most this many declared tools stand in the menu on their own; the rest share one tool."""
GROUP = "project_tool"


class ParameterConfig(BaseModel):
    """One parameter of a declared tool, as its JSON schema says it."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["string", "integer", "number", "boolean"] = "string"
    description: str = Field(min_length=1)
    """What it is, with its units and bounds (the model reads it)."""
    required: bool = True
    enum: list[str | int | float] | None = None
    minimum: float | None = None
    maximum: float | None = None
    max_length: int | None = Field(None, ge=1, le=100_000)
    pattern: str | None = None
    path: bool = False
    """A workspace path: the gate checks it as it checks every tool's paths."""

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            re.compile(value)
        return value


class CommandToolConfig(BaseModel):
    """A project tool: what it does, its parameters, when to use it and when not, and its command."""

    model_config = ConfigDict(extra="forbid")

    description: str = Field(min_length=1)
    """What the tool does (one or two sentences)."""
    when: str = Field(min_length=1)
    """When the model should use it."""
    when_not: str = Field(min_length=1)
    """When it should not (and what to use instead)."""
    parameters: dict[str, ParameterConfig] = Field(default_factory=dict)
    command: list[str] = Field(min_length=1)
    """The argv, each `{param}` replaced by that argument's value inside its own element (an element
    that is only `{param}` is left out when an optional argument is not given); no shell runs it."""
    tier: Literal["read", "write", "exec"] = "exec"
    """read: changes nothing (may run beside other reads); write or exec: may change the workspace."""

    @model_validator(mode="after")
    def _placeholders(self) -> CommandToolConfig:
        for name in self.parameters:
            if not NAME.match(name):
                raise ValueError(f"parameter {name!r}: lower-case letters, digits and _ (a letter first)")
        used = {found for element in self.command for found in PLACEHOLDER.findall(element)}
        unknown = sorted(used - set(self.parameters))
        if unknown:
            raise ValueError(
                f"the command names {', '.join('{' + u + '}' for u in unknown)}, which no parameter declares"
            )
        return self


def build(name: str, config: CommandToolConfig) -> Tool:
    """The declared tool as the registry holds it."""
    if not NAME.match(name):
        raise ConfigError(f"tool {name!r}: a name is lower-case letters, digits and _ (a letter first)")
    fields: dict[str, Any] = {}
    for param, spec in config.parameters.items():
        kind: Any = {"string": str, "integer": int, "number": float, "boolean": bool}[spec.type]
        if spec.enum is not None:
            kind = Literal[tuple(spec.enum)]
        bounds = {
            key: value
            for key, value in (("ge", spec.minimum), ("le", spec.maximum), ("max_length", spec.max_length),
                               ("pattern", spec.pattern))
            if value is not None
        }  # fmt: skip
        annotated = Annotated[kind, Field(description=spec.description, **bounds)]
        fields[param] = (annotated, ...) if spec.required else (annotated | None, None)
    model = create_model(f"{name}_args", __config__=ConfigDict(extra="forbid", strict=True), **fields)
    path_params = [p for p, spec in config.parameters.items() if spec.path]

    def request(args: BaseModel) -> GateRequest:
        values = [getattr(args, p) for p in path_params]
        for param in config.parameters:
            value = getattr(args, param)
            if isinstance(value, str) and "\x00" in value:
                raise ValueError(f"{param} contains a NUL byte; send it without")
        return GateRequest(tool=name, tier=config.tier, paths=tuple(v for v in values if isinstance(v, str)))

    def run(ctx: ToolContext, **arguments: Any) -> Outcome:
        argv = expand(config.command, arguments)
        envelope = ctx.sandbox.run(
            argv, workspace=ctx.workspace, spec=ctx.call_spec(), mounts=ctx.mounts, commit_changes=ctx.commit_changes
        )
        check_envelope(envelope, f"the {name} tool")
        return Outcome(envelope.render(), envelope, wrote=config.tier != "read")

    run.__name__ = name
    return Tool(name, run, model, config.tier, describe(config), request)


def describe(config: CommandToolConfig) -> str:
    """The four parts, as the model reads them."""
    lines = [config.description.strip()]
    if config.parameters:
        lines.append("Parameters:")
        lines += [
            f"- {param}: {spec.description.strip()}" + ("" if spec.required else " (optional)")
            for param, spec in config.parameters.items()
        ]
    lines.append(f"Use it when: {config.when.strip()}")
    lines.append(f"Do NOT use it when: {config.when_not.strip()}")
    return "\n".join(lines)


def expand(command: Sequence[str], arguments: dict[str, Any]) -> list[str]:
    """The argv of one call: each placeholder replaced by its value as text, inside its element."""
    argv = []
    for element in command:
        whole = PLACEHOLDER.fullmatch(element)
        if whole is not None:
            value = arguments.get(whole[1])
            if value is not None:
                argv.append(_text(value))
            continue
        argv.append(PLACEHOLDER.sub(lambda m: _text(arguments.get(m[1])), element))
    return argv


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class GroupArgs(BaseModel):
    """The arguments of the shared tool: which project tool, and its arguments."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="The project tool to run (one of those listed above).")
    arguments: dict[str, Any] = Field(default_factory=dict, description="Its arguments, as its parameters say.")


def group(tools: Sequence[Tool]) -> Tool:
    """One tool standing for several: its description lists each with its own; a call is checked
    against the named tool's parameters and gated under that tool's name."""
    by_name = {t.name: t for t in tools}
    text = ["Run one of the project's further tools by name, with its arguments:"]
    for item in tools:
        text.append(f"\n## {item.name}\n{item.description}")

    def request(args: BaseModel) -> GateRequest:
        chosen = by_name.get(args.name)  # type: ignore[attr-defined]
        if chosen is None:
            raise ValueError(f"no project tool {args.name!r}; the tools are {', '.join(by_name)}")  # type: ignore[attr-defined]
        return chosen.request(chosen.args_model.model_validate(args.arguments))  # type: ignore[attr-defined]

    def run(ctx: ToolContext, name: str, arguments: dict[str, Any]) -> Outcome:
        chosen = by_name[name]
        parsed = chosen.args_model.model_validate(arguments)
        return chosen.fn(ctx, **{k: getattr(parsed, k) for k in type(parsed).model_fields})

    tiers = {t.tier for t in tools}
    tier = "read" if tiers == {"read"} else "write" if "exec" not in tiers else "exec"
    return Tool(GROUP, run, GroupArgs, tier, "\n".join(text), request)  # type: ignore[arg-type]


def menu(declared: dict[str, CommandToolConfig], taken: Sequence[str]) -> tuple[list[Tool], list[str]]:
    """The declared tools as the menu shows them (the first FRONT on their own, the rest behind one
    shared tool), and warnings for the person starting the run."""
    clash = sorted(set(declared) & set(taken))
    if clash:
        raise ConfigError(f"tool {clash[0]!r}: a built-in tool has that name; choose another")
    tools = [build(name, config) for name, config in declared.items()]
    warnings = []
    if len(tools) > FRONT:
        warnings.append(
            f"{len(tools)} project tools: the first {FRONT} are in the menu, the other {len(tools) - FRONT} "
            f"behind one tool ({GROUP}); every description counts against the context budget"
        )
        tools = [*tools[:FRONT], group(tools[FRONT:])]
    return tools, warnings
