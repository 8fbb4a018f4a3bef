"""`harness mcp serve`: one harness session served to an MCP client (Claude Code, Codex, Cursor, any
client of the official SDK) over stdio, or streamable HTTP on 127.0.0.1 behind a bearer token.

The client brings its own model; harness brings the rest. Each call of a tool on the menu is handed to
the session's loop (harness.agent.external.ExternalTurns) exactly as harness's own model's calls are:
gated, hooked, run in a fresh container under the user's limits, egress rules and secrets, recorded
and snapshotted as a step. The session tools (`diff`, `rollback`, `session_info`) run on the loop's
thread between two steps. When the client goes (stdin closed, the HTTP server stopped), the calls it
left are run, the session verifies with `harness run`'s verify and ends as any run does: `harness
show`, `view`, `export` and `apply` work on it afterwards.

Only harness's own tools are offered: never a host MCP server's, never one that reaches past the
session.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import json
import secrets
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.agent.external import ExternalTurns
from harness.agent.loop import Agent
from harness.agent.outcome import RunResult
from harness.assembly.runs import start_run
from harness.assembly.runtime import Runtime
from harness.config import RunConfig
from harness.errors import HarnessError, UsageError
from harness.tools import builtin
from harness.types import ToolSchema
from sandbox.errors import StepOutOfRange

MODEL = "mcp:client"
"""The model a served session's record names: its turns are a client's calls."""

TASK = "tool calls from an MCP client (harness mcp serve)"

MENU = ("run_command", "read_file", "write_file", "apply_patch", "search_code", "list_dir", "run_tests")
"""harness's built-in tools a served session offers (each a step in a fresh container)."""

SESSION_TOOLS = (
    ToolSchema(
        name="diff",
        description="The session's change so far against the repository it started from, as a unified "
        "patch (what `harness export` writes and `harness apply` lands).",
        parameters={"type": "object", "properties": {}, "additionalProperties": False},
    ),
    ToolSchema(
        name="rollback",
        description="Restore the workspace (and image) as they were after step `to` (0: as imported); the "
        "next call goes on from there. Steps are numbered as session_info and `harness show` number them.",
        parameters={
            "type": "object",
            "properties": {"to": {"type": "integer", "minimum": 0, "description": "the step to go back to"}},
            "required": ["to"],
            "additionalProperties": False,
        },
    ),
    ToolSchema(
        name="session_info",
        description="The session: its id, the step it is at, its image, limits, verify command and spend.",
        parameters={"type": "object", "properties": {}, "additionalProperties": False},
    ),
)

INSTRUCTIONS = (
    "Every tool here runs in a fresh, network-less container on harness's copy of the repository; the "
    "user's own tree is only written by `harness apply` after the session. Use run_command for every "
    "shell command and the file tools for reading and writing files."
)


@dataclass
class Said:
    """A session tool's answer, shaped as a call's record (text, is_error, envelope)."""

    text: str
    is_error: bool = False
    envelope: Any = None


class McpSession:
    """The session a server serves (see the module): the loop's turns, and the loop once built."""

    def __init__(self, config: RunConfig, model: str = MODEL) -> None:
        self.config = config
        self.turns = ExternalTurns(model=model)
        self.agent: Agent | None = None
        self.ready = threading.Event()

    def attach(self, agent: Agent) -> None:
        """Join the built loop: its trajectory hands each call's record back to its caller."""
        agent.trajectory.add_observer(self.turns)
        self.agent = agent
        self.ready.set()

    @property
    def schemas(self) -> list[ToolSchema]:
        menu = [s for s in builtin.default_registry().schemas() if s.name in MENU]
        return [*menu, *SESSION_TOOLS]

    def call(self, name: str, arguments: dict[str, Any], call_id: str | None = None) -> Any:
        """One call's record (None: the session ended before it ran); call_id: the id the caller may
        stop it by (sandbox.stopping)."""
        if name in {s.name for s in SESSION_TOOLS}:
            return self.turns.between(lambda: self._session_tool(name, arguments))
        return self.turns.call(name, arguments, call_id)

    def _session_tool(self, name: str, arguments: dict[str, Any]) -> Said:
        agent = self.agent
        assert agent is not None, "calls are served once the loop is built"
        if name == "diff":
            patch = agent.session.export_patch()
            return Said(patch or "no change: the workspace is as the repository was")
        if name == "rollback":
            to = arguments.get("to")
            if not isinstance(to, int) or isinstance(to, bool) or to < 0:
                return Said("ERROR[bad_arguments]: rollback needs `to`, a step number (0 or more)", True)
            try:
                return Said(agent.roll_back(to))
            except StepOutOfRange as error:
                return Said(f"ERROR[bad_arguments]: {error}", True)
        state, limits = agent.state, self.config.limits
        info = {
            "session": state.session_id,
            "folder": str(agent.session.dir),
            "step": state.step,
            "image": self.config.image,
            "verify": self.config.verify,
            "limits": {"max_steps": limits.max_steps, "timeout_min": limits.timeout_min},
            "spent": {"steps": agent.budget.spent().steps, "cost_usd": agent.budget.spent().cost_usd},
        }
        return Said(json.dumps(info, indent=1))


def server_of(served: McpSession) -> Any:
    """The MCP server (the official SDK's) of a served session."""
    from harness.tools.mcp_serve import tools_server

    return tools_server(
        served.schemas, served.call, why_not=lambda: "the session ended", instructions=INSTRUCTIONS, structured=True
    )


class Started:
    """The session's run, in a thread of its own while the transport serves calls."""

    def __init__(self, start: Callable[[McpSession], RunResult], served: McpSession) -> None:
        self.served = served
        self.result: RunResult | None = None
        self.error: BaseException | None = None

        def run() -> None:
            try:
                self.result = start(served)
            except BaseException as error:  # noqa: BLE001 - raised again on the serving thread
                self.error = error
            finally:
                served.turns.close("the session ended")
                served.ready.set()

        self.thread = threading.Thread(target=run, name="harness-served-run", daemon=True)
        self.thread.start()

    def wait_ready(self) -> None:
        """Until the loop takes calls; the run's error (a missing image, a failed setup) raised here."""
        self.served.ready.wait()
        if self.error is not None:
            raise self.error
        if self.served.agent is None:
            raise HarnessError("the session ended before it took a call")

    def end(self, why: str) -> RunResult:
        """The client is gone: the session runs what it left, verifies and ends; its result."""
        self.served.turns.finish(why)
        self.thread.join()
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


def start(
    repo: Path,
    config: RunConfig,
    sessions: Path,
    runtime: Runtime,
    session_id: str | None,
    task: str,
    model: str = MODEL,
) -> Started:
    """The served session's run, started (each call a step; verify when the client goes); model: what
    its record names as the source of its turns (an MCP client's, an environment client's)."""
    served = McpSession(config, model)
    return Started(lambda s: start_run(repo, task, config, sessions, runtime, session_id, served=s), served)


def serve_stdio(server: Any) -> None:
    """Serve on this process's stdin and stdout until the client closes them."""
    import anyio
    from mcp.server.stdio import stdio_server

    async def main() -> None:
        async with stdio_server() as (read, write):
            await server.run(read, write, server.create_initialization_options())

    anyio.run(main)


def loopback(address: str) -> tuple[str, int]:
    """HOST:PORT of `--http`, refused unless HOST is a loopback address (the server is for this machine)."""
    host, sep, port = address.rpartition(":")
    host = host.strip("[]")
    try:
        number = int(port)
        loop = ipaddress.ip_address(host).is_loopback if host != "localhost" else True
    except ValueError:
        raise UsageError(f"--http takes 127.0.0.1:PORT, not {address!r}") from None
    if not sep or not 0 <= number <= 65535:
        raise UsageError(f"--http takes 127.0.0.1:PORT, not {address!r}")
    if not loop:
        raise UsageError(f"--http serves on a loopback address only (127.0.0.1:PORT), not {host!r}")
    return ("127.0.0.1" if host == "localhost" else host), number


def listening_socket(address: tuple[str, int]) -> tuple[socket.socket, str, int]:
    """A socket bound to address (`--http`), the host as a URL names it and the port it got;
    UsageError when nothing can listen there."""
    family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(address)
    except OSError as error:
        listener.close()
        raise UsageError(f"--http {address[0]}:{address[1]}: cannot listen there ({error.strerror})") from None
    host = f"[{address[0]}]" if family == socket.AF_INET6 else address[0]
    return listener, host, listener.getsockname()[1]


class Bearer:
    """An ASGI app answering 401 to any HTTP request without `Authorization: Bearer TOKEN`."""

    def __init__(self, app: Any, token: str) -> None:
        self.app, self.token = app, token.encode()

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            given = dict(scope.get("headers") or []).get(b"authorization", b"")
            scheme, _, value = given.partition(b" ")
            if scheme.lower() != b"bearer" or not hmac.compare_digest(value.strip(), self.token):
                body = b'{"error": "harness mcp serve: a bearer token is needed (the one it printed)"}'
                await send({"type": "http.response.start", "status": 401, "headers": [
                    (b"content-type", b"application/json"), (b"www-authenticate", b"Bearer"),
                    (b"content-length", str(len(body)).encode())]})  # fmt: skip
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def serve_http(server: Any, address: tuple[str, int], on_listening: Callable[[str, str], None]) -> None:
    """Serve streamable HTTP on address until stopped (Ctrl-C, SIGTERM); on_listening(url, token) once
    it listens (the token is made here, new for each server)."""
    import uvicorn
    from mcp.server.transport_security import TransportSecuritySettings

    token = secrets.token_urlsafe(32)
    app = server.streamable_http_app(
        streamable_http_path="/mcp",
        transport_security=TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
            allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
        ),
    )
    listener, host, port = listening_socket(address)
    config = uvicorn.Config(Bearer(app, token), log_level="error", lifespan="on", access_log=False)

    class Told(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets)
            on_listening(f"http://{host}:{port}/mcp", token)

    told = Told(config)
    with contextlib.closing(listener):
        told.run(sockets=[listener])
