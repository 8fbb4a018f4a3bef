"""The host's end of a call's egress on an engine elsewhere (the container's end is
`sandbox.network.tunnel`): nothing of this machine's disk can be bound there, so the session's proxy
socket is reached through the engine's API instead.

Before the call's command runs, one exec in its container (`tunnel.py carry PORT`, as the call's user)
joins the session's CAs to the image's bundle and serves 127.0.0.1:PORT there, where the proxy
variables point; every connection it accepts is carried over that exec's stream (framed, with a
window per connection, see the container's end) and joined here to a new connection to the proxy's
Unix socket. Here each connection has two threads: the proxy's bytes out (sent as the window allows)
and the container's bytes in (queued, never more than a window, so the stream's reader never waits
for a slow connection). When the call is over the exec's stdin is closed; the container's removal
ends the rest.
"""

from __future__ import annotations

import collections
import contextlib
import socket
import struct
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import docker
import requests
from docker.utils.socket import STDERR, STDOUT, frames_iter

from sandbox.docker import hardening
from sandbox.docker.hardening import TUNNEL_TARGET
from sandbox.errors import SandboxError
from sandbox.network import egress

READY_S = 20.0
"""How long the carrying exec may take to listen."""
WINDOW = 256 * 1024
"""Bytes of a connection either side may have in flight (the container's end says the same)."""
MAX_CARRIED = 512
"""Connections carried at once for one container; one past it is reset (nothing in a container may
make the host start threads without bound)."""
HEAD = struct.Struct(">cII")
CHUNK = 65536


class EgressTunnel:
    """A call's egress through the engine, from `start` (it listens in the container) to `close`."""

    def __init__(self, api: Any, cid: str, user: str, proxy: Path, prelude: str = "") -> None:
        self._api, self._cid, self._user, self._proxy, self._prelude = api, cid, user, str(proxy), prelude
        self._sock: Any = None
        self._sending = threading.Lock()
        self._lock = threading.Lock()
        self._connections: dict[int, _Connection] = {}
        self._closed = False

    def start(self) -> None:
        """The container listens on the relay's port; SandboxError if it cannot (its words said)."""
        command = f"python3 {TUNNEL_TARGET} carry {egress.RELAY_PORT}"
        if self._prelude:
            command = f"{self._prelude} && exec {command}"
        sock = self._exec(["/bin/sh", "-c", command])
        watchdog = threading.Timer(READY_S, _close, args=(sock,))  # the engine's reads wait without a bound
        watchdog.start()
        frames, said, got = frames_iter(sock, tty=False), b"", bytearray()
        try:
            for stream, data in frames:
                if stream == STDERR:
                    said += data[:4096]
                    continue
                got += data
                if len(got) >= HEAD.size:
                    break
            if got[:1] != b"R":
                _close(sock)
                raise SandboxError(f"the egress tunnel did not start in the call's container: {_said(said)}")
        except (OSError, ValueError, AttributeError) as error:  # (a socket closed by the watchdog)
            _close(sock)
            raise SandboxError(
                f"the egress tunnel did not start in the call's container within {READY_S:g} s ({error})"
            ) from None
        finally:
            watchdog.cancel()
        self._sock = sock
        del got[: HEAD.size]
        threading.Thread(target=self._serve, args=(frames, got), daemon=True).start()

    def close(self) -> None:
        """The call is over: the exec's stdin closes (it ends; the container's removal ends the rest)."""
        with self._lock:
            self._closed = True
            connections = list(self._connections.values())
            self._connections.clear()
        for connection in connections:
            connection.end()
        if self._sock is not None:
            with contextlib.suppress(OSError):
                _raw(self._sock).shutdown(socket.SHUT_WR)
            _close(self._sock)

    def send(self, kind: bytes, number: int, payload: bytes = b"") -> None:
        """One frame down the exec's stdin; OSError once the tunnel is closed."""
        with self._sending:
            raw = _raw(self._sock) if self._sock is not None else None
            if raw is None:
                raise OSError("the egress tunnel is closed")
            raw.sendall(HEAD.pack(kind, number, len(payload)) + payload)

    def _serve(self, frames: Any, got: bytearray) -> None:
        try:
            self._take(got)
            for stream, data in frames:
                if stream == STDOUT:
                    got += data
                    self._take(got)
        except Exception:  # noqa: BLE001 - the exec ended (the call is over, or the container went away)
            pass
        with self._lock:
            connections = list(self._connections.values())
            self._connections.clear()
        for connection in connections:
            connection.end()

    def _take(self, got: bytearray) -> None:
        while len(got) >= HEAD.size:
            kind, number, size = HEAD.unpack_from(got)
            if size > WINDOW or len(got) < HEAD.size + size:
                if size > WINDOW:
                    raise ValueError("a frame larger than a window")
                return
            payload = bytes(got[HEAD.size : HEAD.size + size])
            del got[: HEAD.size + size]
            if kind == b"N":
                self._open(number)
                continue
            with self._lock:
                connection = self._connections.get(number)
            if connection is None:
                continue
            if kind == b"D":
                connection.inbound(payload)
            elif kind == b"E":
                connection.inbound(None)
            elif kind == b"W" and size == 4:
                connection.credit(struct.unpack(">I", payload)[0])
            elif kind == b"C":
                self.forget(number)
                connection.end()

    def _open(self, number: int) -> None:
        with self._lock:
            full = self._closed or len(self._connections) >= MAX_CARRIED or number in self._connections
        proxy = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            if full:
                raise OSError("no room")
            proxy.connect(self._proxy)
        except OSError:
            proxy.close()
            with contextlib.suppress(OSError):
                self.send(b"C", number)
            return
        connection = _Connection(self, number, proxy)
        with self._lock:
            self._connections[number] = connection
        connection.start()

    def forget(self, number: int) -> None:
        with self._lock:
            self._connections.pop(number, None)

    def _exec(self, argv: list[str]) -> Any:
        """An exec's stream, once the host has spoken first (see `sandbox.network.tunnel`)."""
        try:
            made = self._api.exec_create(self._cid, argv, stdin=True, stdout=True, stderr=True, user=self._user)
            sock = self._api.exec_start(made["Id"], socket=True)
        except (docker.errors.APIError, requests.exceptions.RequestException) as error:
            raise SandboxError(f"could not reach the call's container for its egress: {error}") from None
        try:
            _raw(sock).sendall(b"\n")
        except OSError as error:
            _close(sock)
            raise SandboxError(f"could not reach the call's container for its egress: {error}") from None
        return sock


class _Connection:
    """One carried connection here: the proxy's socket, what the container sent for it (at most a
    window), and the window the container gave for what the proxy sends."""

    def __init__(self, tunnel: EgressTunnel, number: int, proxy: socket.socket) -> None:
        self.tunnel, self.number, self.proxy = tunnel, number, proxy
        self._state = threading.Condition()
        self._queue: collections.deque[bytes | None] = collections.deque()
        self._queued = 0
        self._credit = WINDOW
        self._over = False
        self._finished = 0

    def start(self) -> None:
        threading.Thread(target=self._outward, daemon=True).start()
        threading.Thread(target=self._inward, daemon=True).start()

    def inbound(self, data: bytes | None) -> None:
        """Bytes the container's side sent (None: it sends no more). More than its window is a
        container that does not keep to the protocol: the connection is reset."""
        with self._state:
            self._queued += len(data or b"")
            flooded = self._queued > WINDOW
            if not flooded:
                self._queue.append(data)
                self._state.notify_all()
        if flooded:
            self._reset()

    def credit(self, size: int) -> None:
        with self._state:
            self._credit = min(WINDOW, self._credit + size)
            self._state.notify_all()

    def end(self) -> None:
        with self._state:
            self._over = True
            self._state.notify_all()
        with contextlib.suppress(OSError):
            self.proxy.shutdown(socket.SHUT_RDWR)

    def _inward(self) -> None:
        """The container's bytes into the proxy, then its end of sending; a window back for each."""
        try:
            while True:
                with self._state:
                    while not self._queue and not self._over:
                        self._state.wait()
                    if self._over:
                        return
                    data = self._queue.popleft()
                    self._queued -= len(data or b"")
                if data is None:
                    self.proxy.shutdown(socket.SHUT_WR)
                    self._finish()
                    return
                self.proxy.sendall(data)
                self.tunnel.send(b"W", self.number, struct.pack(">I", len(data)))
        except Exception:  # noqa: BLE001 - one connection's trouble ends that connection, never the call
            self._reset()

    def _outward(self) -> None:
        """The proxy's bytes to the container as its window allows, then the end of sending."""
        try:
            while True:
                with self._state:
                    while self._credit <= 0 and not self._over:
                        self._state.wait()
                    if self._over:
                        return
                    room = min(CHUNK, self._credit)
                data = self.proxy.recv(room)
                if not data:
                    self.tunnel.send(b"E", self.number)
                    self._finish()
                    return
                with self._state:
                    self._credit -= len(data)
                self.tunnel.send(b"D", self.number, data)
        except Exception:  # noqa: BLE001 - one connection's trouble ends that connection, never the call
            self._reset()

    def _finish(self) -> None:
        """One direction is over; with both, the connection is (the container's side closes its own)."""
        with self._state:
            self._finished += 1
            both = self._finished == 2
        if both:
            self.tunnel.forget(self.number)
            with contextlib.suppress(OSError):
                self.proxy.close()

    def _reset(self) -> None:
        with self._state:
            if self._over:
                return
        self.tunnel.forget(self.number)
        with contextlib.suppress(OSError):
            self.tunnel.send(b"C", self.number)
        self.end()


@contextlib.contextmanager
def carried(api: Any, cid: str, user: str, folder: Path) -> Iterator[None]:
    """Around the commands of a container whose egress goes through the engine: listening in it before
    they start (the session's CAs joined to the image's bundle first), closed after. folder: the
    session's egress folder here (its proxy's socket, its CAs)."""
    prelude = hardening.trust_prelude(hardening.TUNNEL_CA_DIR) if hardening.has_ca(folder) else ""
    tunnel = EgressTunnel(api, cid, user, folder / egress.SOCKET_NAME, prelude)
    tunnel.start()
    try:
        yield
    finally:
        tunnel.close()


def _raw(sock: Any) -> socket.socket:
    return getattr(sock, "_sock", sock)


def _close(sock: Any) -> None:
    raw = _raw(sock)  # (a closed SocketIO forgets its socket)
    with contextlib.suppress(OSError):
        sock.close()
    if raw is not None:
        with contextlib.suppress(OSError):
            raw.close()


def _said(data: bytes) -> str:
    text = data.decode(errors="replace").strip()
    return text[-300:] if text else "it ended without a word"
