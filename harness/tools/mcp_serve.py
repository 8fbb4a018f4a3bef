"""harness's own tools served over MCP (the official SDK's server): each call handed to the run's loop,
which gates, hooks, runs it in a fresh container, records and snapshots it as it does its own
model's calls; the loop's record comes back as the call's result: the text the model would read,
and the envelope (exit code first) as structured content, or, for an agent that would show its model
the structured content instead of the text (Codex does), in the result's `_meta` as `harness/envelope`.
A call the client cancels (`notifications/cancelled`) is stopped: its container is killed and its
record says so (sandbox.stopping).

Only the tools given are served (harness's built-in tools of the run's menu): never a host MCP
server's, never a tool that reaches past the session.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from harness.types import ToolSchema
from sandbox import stopping


class Recorded(Protocol):
    """What a call's record gives back (`harness.trajectory.ToolRecord`)."""

    text: str
    is_error: bool
    envelope: Any


Caller = Callable[[str, dict[str, Any], str], "Recorded | None"]
"""Runs one call (name, arguments, a call id unique in the process) through the loop and returns its
record (None: the run ended before it ran)."""


def tools_server(
    schemas: Sequence[ToolSchema],
    call: Caller,
    *,
    why_not: Callable[[], str] = lambda: "the run ended",
    name: str = "harness",
    instructions: str | None = None,
    structured: bool = True,
) -> Any:
    """An MCP server (`mcp.server.lowlevel.Server`) offering schemas, each call run by `call` in a
    worker thread (a call waits for the loop; the server's other calls and streams go on)."""
    import anyio
    from mcp import types
    from mcp.server.lowlevel import Server

    offered = {schema.name: schema for schema in schemas}

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(name=s.name, description=s.description, input_schema=dict(s.parameters))
                for s in offered.values()
            ]
        )

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        if params.name not in offered:
            return _result(f"ERROR[unknown_tool]: there is no tool named {params.name!r}", True)
        arguments = dict(params.arguments or {})
        ident = f"mcp_{uuid.uuid4().hex[:16]}"
        try:
            record = await anyio.to_thread.run_sync(call, params.name, arguments, ident, abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():  # the client cancelled its request: the call stops too
            stopping.stop(ident, "the MCP client cancelled the call")
            raise
        if record is None:
            return _result(f"harness did not run this call: {why_not()}", True)
        envelope = record.envelope.model_dump(mode="json") if record.envelope is not None else None
        if structured:
            return _result(record.text, record.is_error, envelope)
        return _result(record.text, record.is_error, meta={"harness/envelope": envelope} if envelope else None)

    return Server(name, instructions=instructions, on_list_tools=list_tools, on_call_tool=call_tool)


def _result(
    text: str, is_error: bool, structured: dict[str, Any] | None = None, meta: dict[str, Any] | None = None
) -> Any:
    from mcp import types

    return types.CallToolResult(
        content=[types.TextContent(type="text", text=text)],
        structured_content=structured,
        is_error=is_error,
        meta=meta,
    )
