"""MCP servers a user declares (`[mcp.NAME]` in the config file), each run inside a hardened container
of its own for the session, with harness as the MCP client on the host side of its stdio (the
official SDK's client; a small bridge process joins the SDK's pipes to the container's). Their tools
join the menu as `NAME__TOOL` with the server's own descriptions and schemas; each call goes through
the gate and is recorded like any other; a server that dies is started again once, after that its
tools answer a classified error (`mcp_server_down`). The container has no network unless the
declaration lists hosts (the session's egress proxy), sees the workspace read-only unless
`writable = true`, and ends with the session."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from harness.errors import ConfigError
from harness.policy.gate import GateRequest
from harness.tools.calls import ToolError
from harness.tools.registry import ToolContext
from harness.tools.schema import Outcome, Tool
from harness.types import ToolSchema
from sandbox.errors import SandboxError

if TYPE_CHECKING:
    import asyncio

NAME = re.compile(r"^[a-z][a-z0-9_-]{0,30}$")
SEPARATOR = "__"
START_TIMEOUT_S = 60.0


class MCPServerConfig(BaseModel):
    """One MCP server (stdio) as a config file declares it."""

    model_config = ConfigDict(extra="forbid")

    command: list[str] = Field(min_length=1)
    """The server's argv inside its container (no shell)."""
    image: str | None = None
    """Its image (default: the session's image as it is when the server starts: the run's image after its setup)."""
    allow_net: list[str] = Field(default_factory=list)
    """Hosts it may reach through the session's egress proxy (default: none at all)."""
    writable: bool = False
    """It may write the workspace (default: it sees it read-only)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Variables set in its container (values as written here: never the host's environment)."""
    timeout_s: float = Field(120.0, gt=0, le=3600)
    """How long one of its tool calls may take."""


@dataclass(frozen=True)
class Launched:
    """A server's container as started: the bridge's argv (a process whose stdio is the server's), a
    stop that removes it, a reader of its stderr, whether it still runs, and what each of its calls
    runs inside (on an engine elsewhere: its copy of the workspace brought up to date before, and
    a writable server's changes brought back after)."""

    bridge: list[str]
    stop: Callable[[], None]
    stderr: Callable[[], str]
    running: Callable[[], bool]
    around: Callable[[], AbstractContextManager[None]] = nullcontext


Launch = Callable[[], Launched]


class MCPServer:
    """One running server: its container, the SDK client session in a loop thread of its own."""

    def __init__(self, name: str, config: MCPServerConfig, launch: Launch) -> None:
        import asyncio  # here, not at the top: a run without MCP servers never loads asyncio

        self.name, self.config, self._launch = name, config, launch
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"mcp-{name}", daemon=True)
        self._thread.start()
        self._session: Any = None
        self._closer: asyncio.Event | None = None
        self._done: asyncio.Future[None] | None = None
        self._stop: Callable[[], None] = lambda: None
        self._stderr: Callable[[], str] = lambda: ""
        self._running: Callable[[], bool] = lambda: False
        self._around: Callable[[], AbstractContextManager[None]] = nullcontext
        self.restarts = 0
        self.tools: list[Any] = []
        self._lock = threading.Lock()

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        import asyncio

        launched = self._launch()
        self._stop, self._stderr, self._running = launched.stop, launched.stderr, launched.running
        self._around = launched.around
        ready = asyncio.run_coroutine_threadsafe(self._open(launched.bridge), self._loop)
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            while True:  # a server that exits is said at once, not after the whole wait
                try:
                    self.tools = ready.result(0.25)
                    break
                except FutureTimeout:
                    if not launched.running():
                        said = self._last_words() or " (it wrote nothing on stderr)"
                        self._abandon(ready)
                        self.close()
                        raise ConfigError(f"MCP server {self.name} exited as it started{said}") from None
                    if time.monotonic() > deadline:
                        said = self._last_words()
                        self._abandon(ready)
                        self.close()
                        raise ConfigError(
                            f"MCP server {self.name} did not answer within {START_TIMEOUT_S:g}s{said}"
                        ) from None
        except ConfigError:
            raise
        except Exception as error:  # noqa: BLE001 - the SDK's and the server's failures, said in one line
            said = self._last_words()
            self.close()
            raise ConfigError(f"MCP server {self.name} failed to start: {_first(error)}{said}") from None

    def _abandon(self, ready: Any) -> None:
        """Give up a start that is still waiting for the server (its tasks cancelled, not left pending)."""
        ready.cancel()
        if self._done is not None:
            self._loop.call_soon_threadsafe(self._done.cancel)

    async def _open(self, bridge: list[str]) -> list[Any]:
        import asyncio

        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client

        opened: asyncio.Future[list[Any]] = self._loop.create_future()
        self._closer = asyncio.Event()

        async def hold() -> None:
            params = StdioServerParameters(command=bridge[0], args=bridge[1:])
            try:
                async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
                    await session.initialize()
                    listed = await session.list_tools()
                    self._session = session
                    opened.set_result(list(listed.tools))
                    assert self._closer is not None
                    await self._closer.wait()
            except Exception as error:  # noqa: BLE001 - whatever ends the transport, told to start() once
                if not opened.done():
                    opened.set_exception(error)
            finally:
                self._session = None

        self._done = asyncio.ensure_future(hold())
        return await opened

    def close(self) -> None:
        """End the client session and remove the container (idempotent)."""
        import asyncio

        if self._closer is not None:
            self._loop.call_soon_threadsafe(self._closer.set)
            if self._done is not None:
                done = self._done
                try:
                    asyncio.run_coroutine_threadsafe(asyncio.wait_for(asyncio.shield(done), 10), self._loop).result(15)
                except Exception:  # noqa: BLE001 - ending: whatever state the transport is in
                    pass
            self._closer = None
        self._stop()
        self._stop, self._running = (lambda: None), (lambda: False)

    def shutdown(self) -> None:
        import asyncio

        self.close()

        async def drain() -> None:  # a start given up leaves its tasks: they end here, not pending
            tasks = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(drain(), self._loop).result(10)
        except Exception:  # noqa: BLE001 - ending: whatever the transport does when cancelled
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)

    # --- calls ----------------------------------------------------------------------------------

    def call(self, tool: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        """(text, is_error) of one tool call. A server found dead is started again once; one that dies
        under a call is started again (once) for the next, and this call says so."""
        if not self._alive() and not self._restart():
            raise ToolError(
                "mcp_server_down", f"the MCP server {self.name} stopped and cannot be started again{self._last_words()}"
            )
        try:
            with self._around():
                return self._call(tool, arguments)
        except SandboxError as error:  # the workspace's copy could not be brought up to date (an engine elsewhere)
            raise ToolError("mcp_server_down", f"the MCP server {self.name}'s workspace: {error}") from None

    def _call(self, tool: str, arguments: dict[str, Any]) -> tuple[str, bool]:
        import asyncio

        future = asyncio.run_coroutine_threadsafe(self._session.call_tool(tool, arguments), self._loop)
        try:
            result = future.result(self.config.timeout_s)
        except FutureTimeout:
            future.cancel()
            raise ToolError("timeout", f"{self.name}__{tool} took longer than {self.config.timeout_s:g}s") from None
        except Exception as error:  # noqa: BLE001 - the server's error, or a transport that broke under the call
            if self._alive():
                return f"the MCP server answered with an error: {_first(error)}", True
            words = self._last_words()
            again = " It was started again for the next call." if self._restart() else ""
            raise ToolError(
                "mcp_server_down", f"the MCP server {self.name} stopped during this call{words}.{again}"
            ) from None
        return _text(result), bool(getattr(result, "is_error", getattr(result, "isError", False)))

    def _last_words(self) -> str:
        log = self._stderr().strip().splitlines()
        return f" (its last words: {log[-1][:300]})" if log else ""

    def _alive(self) -> bool:
        return self._done is not None and not self._done.done() and self._running()

    def _restart(self) -> bool:
        """Start a dead server again, once per run; whether it runs now."""
        with self._lock:
            if self._session is not None and self._alive():
                return True
            if self.restarts >= 1:
                return False
            self.restarts += 1
            self.close()
            try:
                self.start()
            except ConfigError:
                return False
            return True


def _text(result: Any) -> str:
    """The call's content as text (text parts; other parts named; structured content as JSON)."""
    parts = []
    for block in getattr(result, "content", None) or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(str(getattr(block, "text", "")))
        else:
            parts.append(f"[{kind} content]")
    structured = getattr(result, "structured_content", getattr(result, "structuredContent", None))
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False))
    return "\n".join(parts) or "(no content)"


def _first(error: BaseException) -> str:
    group = getattr(error, "exceptions", None)
    if group:
        return _first(group[0])
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".strip()


@dataclass(frozen=True)
class MCPTool(Tool):
    """A server's tool in the menu: its schema as the server gives it."""

    input_schema: dict[str, Any] | None = None

    def schema(self) -> ToolSchema:
        return ToolSchema(name=self.name, description=self.description, parameters=self.input_schema or {})


def tools_of(server: MCPServer) -> list[Tool]:
    """The server's tools as menu entries (`server__tool`)."""
    out: list[Tool] = []
    tier = "write" if server.config.writable else "read"
    for listed in server.tools:
        remote = str(listed.name)
        name = f"{server.name}{SEPARATOR}{re.sub(r'[^A-Za-z0-9_-]', '_', remote)}"[:64]
        schema = dict(
            getattr(listed, "input_schema", None) or getattr(listed, "inputSchema", None) or {"type": "object"}
        )
        properties = schema.get("properties") or {}
        required = set(schema.get("required") or [])
        fields: dict[str, Any] = {
            key: (Any, ... if key in required else None) for key in properties if isinstance(key, str)
        }
        model = create_model(f"{name}_args", __config__=ConfigDict(extra="forbid"), **fields)

        def run(ctx: ToolContext, _remote: str = remote, **arguments: Any) -> Outcome:
            sent = {key: value for key, value in arguments.items() if value is not None}
            text, failed = server.call(_remote, sent)
            if failed:
                raise ToolError("tool_error", text)
            return Outcome(text, None, wrote=server.config.writable)

        def request(args: BaseModel, _name: str = name) -> GateRequest:
            return GateRequest(tool=_name, tier=tier, paths=())

        description = str(getattr(listed, "description", "") or f"The {remote} tool of the {server.name} MCP server.")
        out.append(MCPTool(name, run, model, tier, description.strip(), request, schema))  # type: ignore[arg-type]
    return out


def check_name(name: str) -> None:
    if not NAME.match(name) or SEPARATOR in name:
        raise ConfigError(f"MCP server {name!r}: a name is lower-case letters, digits, - and _ (no __)")
