"""The one socket a hosted agent's container reaches: the model gateway at `/model` and harness's tools
as MCP at `/mcp`, served by uvicorn on a Unix socket in a folder of its own, in a thread of the
controller.

The folder is mounted read-only into the agent's container, where a relay serves 127.0.0.1:PORT onto
the socket (sandbox/network/relay.py): that port is the container's only way out. The socket is the
controller's; what reaches it is the agent's, read as hostile (the gateway forwards nothing but model
requests, with the key it holds; the tools go through the loop's gate).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

SOCKET = "endpoint.sock"
START_TIMEOUT_S = 20.0


class AgentEndpoint:
    """The endpoint (see the module): start() serves, close() stops and removes its folder."""

    def __init__(self, gateway: Any, tools: Any) -> None:
        self.gateway, self.tools = gateway, tools
        self.folder = Path(tempfile.mkdtemp(prefix="harness-agent-"))
        os.chmod(self.folder, 0o755)  # the container's user reaches the socket through it
        self._server: Any = None
        self._thread: threading.Thread | None = None

    @property
    def socket(self) -> Path:
        return self.folder / SOCKET

    def start(self) -> AgentEndpoint:
        import uvicorn
        from mcp.server.transport_security import TransportSecuritySettings
        from starlette.routing import Mount

        from harness.providers.gateway import MOUNT

        app = self.tools.streamable_http_app(
            streamable_http_path="/mcp",
            json_response=True,
            transport_security=TransportSecuritySettings(
                enable_dns_rebinding_protection=True,
                allowed_hosts=["127.0.0.1:*", "localhost:*"],
                allowed_origins=["http://127.0.0.1:*", "http://localhost:*"],
            ),
            custom_starlette_routes=[Mount(MOUNT, app=self.gateway)],
        )
        config = uvicorn.Config(app, uds=str(self.socket), log_level="error", lifespan="on", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="harness-agent-endpoint", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (self._server.started and self.socket.exists()):
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.close()
                raise RuntimeError("the hosted agent's endpoint did not start")
            time.sleep(0.02)
        os.chmod(self.socket, 0o666)  # in a folder of ours: only what is given the folder reaches it
        return self

    def close(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(5)
        with contextlib.suppress(OSError):
            shutil.rmtree(self.folder)
