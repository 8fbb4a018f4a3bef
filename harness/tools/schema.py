"""Typed functions become tools: `@tool(tier, ...)` marks `fn(ctx, <typed params>) -> Outcome`; its
signature (with `Annotated[..., Field(...)]` bounds) and its docstring's `Args:` section become a
pydantic model with extra="forbid" (so the JSON schema has `additionalProperties: false`); the rest
of the docstring is the description the model reads."""

from __future__ import annotations

import inspect
import re
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from harness.policy.gate import GateRequest, Tier
from harness.types import ToolSchema
from sandbox.envelope import Envelope


@dataclass
class Outcome:
    """What a tool function returns on success (or on a non-zero exit, which is data)."""

    text: str
    envelope: Envelope | None = None
    wrote: bool = False


@dataclass(frozen=True)
class Tool:
    """A registered tool: its function, argument model, tier and description."""

    name: str
    fn: Callable[..., Outcome]
    args_model: type[BaseModel]
    tier: Tier
    description: str
    request: Callable[[BaseModel], GateRequest]
    together: bool = field(default=False, kw_only=True)
    """Calls of it side by side in one turn run at once (sub-agents, each on a branch of its own)."""

    def schema(self) -> ToolSchema:
        return ToolSchema(name=self.name, description=self.description, parameters=clean_schema(self.args_model))


@dataclass(frozen=True)
class ToolFunction:
    """A function marked with `@tool`: what the gate needs to know about its arguments. Calling it
    calls the function."""

    fn: Callable[..., Outcome]
    tier: Tier
    """read, write or exec: reads of one turn may run concurrently, the rest in order."""
    paths: tuple[str, ...] = ()
    """Parameters that name workspace paths (the gate checks each)."""
    command: str | None = None
    """The parameter that holds a command line (the gate parses it), if any."""
    targets: Callable[[Any], list[str]] | None = None
    """More paths the call touches, read from its parsed arguments (a diff's files)."""
    together: bool = False
    """Calls of it side by side in one turn run at once (see Tool.together)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Outcome:
        return self.fn(*args, **kwargs)

    @property
    def name(self) -> str:
        return self.fn.__name__


def tool(
    tier: Tier,
    paths: Sequence[str] = (),
    command: str | None = None,
    targets: Callable[[Any], list[str]] | None = None,
    together: bool = False,
) -> Callable[[Callable[..., Outcome]], ToolFunction]:
    """Mark a function as a tool: its tier, which parameters are paths, which is the command line."""

    def mark(fn: Callable[..., Outcome]) -> ToolFunction:
        return ToolFunction(fn, tier, tuple(paths), command, targets, together)

    return mark


def _split_doc(doc: str) -> tuple[str, dict[str, str]]:
    """(description, {param: text}) from a docstring with a Google-style `Args:` section."""
    doc = inspect.cleandoc(doc or "")
    head, _, args = doc.partition("\nArgs:\n")
    params: dict[str, str] = {}
    current = None
    for line in args.splitlines():
        match = re.match(r"^\s{2,4}(\w+):\s*(.*)$", line)
        if match:
            current = match.group(1)
            params[current] = match.group(2)
        elif current and line.strip():
            params[current] += " " + line.strip()
    if args:
        head += "\nParameters:\n" + "\n".join(f"- {k}: {v}" for k, v in params.items())
    return head.strip(), params


def build_tool(marked: ToolFunction) -> Tool:
    """Signature + docstring -> pydantic model (extra=forbid) -> Tool."""
    fn = marked.fn
    description, docs = _split_doc(fn.__doc__ or "")
    hints = typing.get_type_hints(fn, include_extras=True)
    fields: dict[str, Any] = {}
    for name, param in list(inspect.signature(fn).parameters.items())[1:]:
        default = ... if param.default is inspect.Parameter.empty else param.default
        fields[name] = (hints[name], Field(default, description=docs.get(name)))
    model = create_model(f"{fn.__name__}_args", __config__=ConfigDict(extra="forbid"), **fields)

    def request(args: BaseModel) -> GateRequest:
        for param in (*marked.paths, *([marked.command] if marked.command else [])):
            value = getattr(args, param)
            if isinstance(value, str) and "\x00" in value:  # ValueError: answered as invalid_arguments
                raise ValueError(
                    f"{param} contains a NUL byte, which no path or command line can hold; send it without"
                )
        values = [getattr(args, p) for p in marked.paths]
        paths = [v for v in values if isinstance(v, str)]
        if marked.targets is not None:
            paths += marked.targets(args)
        command = getattr(args, marked.command) if marked.command else None
        return GateRequest(tool=marked.name, tier=marked.tier, paths=tuple(paths), command=command)

    return Tool(marked.name, fn, model, marked.tier, description, request, together=marked.together)


def clean_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema without titles, with optional `X | None` shown as plain X."""
    schema = model.model_json_schema()
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
        variants = prop.pop("anyOf", None)
        if variants:
            prop.update(next(v for v in variants if v.get("type") != "null"))
        if prop.get("default", 0) is None:
            prop.pop("default")
    schema.pop("title", None)
    schema["additionalProperties"] = False
    return schema
