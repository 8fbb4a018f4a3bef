"""The host's end of a call's egress on an engine elsewhere (the container's end is
`sandbox.network.tunnel`): nothing of this machine's disk can be bound there, so the session's proxy
socket is reached through the engine's API instead.

Before the call's command runs, an exec in its container (`tunnel.py accept PORT`, as the call's
user) serves 127.0.0.1:PORT there, where the proxy variables point, after joining the session's CAs
to the image's bundle (what the relay's start does on a local engine). For each connection it
accepts, one more exec (`tunnel.py join N`) carries that connection; here it is joined to a new
connection to the proxy's Unix socket: the exec's stdout to the proxy, the proxy to its stdin, a byte
on its stderr the end of the container side's sending (the proxy's end of sending closes the exec's
stdin). Each connection is its own stream through the engine, paced as a socket is. When the call is
over the accepting exec's stdin is closed; the container's removal ends the rest.
"""

from __future__ import annotations

import contextlib
import socket
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
"""How long the accepting exec may take to listen."""
MAX_CARRIED = 256
"""Connections carried at once for one container; one past it waits in the container (its command's
own connections: nothing in a container may make the host start threads and execs without bound)."""
MAX_LINE = 64
"""The longest line the accepting exec says (a number); a longer one is nobody's."""


class EgressTunnel:
    """A call's egress through the engine, from `start` (it listens in the container) to `close`."""

    def __init__(self, api: Any, cid: str, user: str, proxy: Path, prelude: str = "") -> None:
        self._api, self._cid, self._user, self._proxy, self._prelude = api, cid, user, str(proxy), prelude
        self._accepting: Any = None
        self._closed = threading.Event()
        self._room = threading.BoundedSemaphore(MAX_CARRIED)
        self._asking = threading.Lock()
        self._last = 0

    def start(self) -> None:
        """The container listens on the relay's port; SandboxError if it cannot (its words said)."""
        command = f"python3 {TUNNEL_TARGET} accept {egress.RELAY_PORT}"
        if self._prelude:
            command = f"{self._prelude} && exec {command}"
        sock = self._exec(["/bin/sh", "-c", command])
        watchdog = threading.Timer(READY_S, _close, args=(sock,))  # the engine's reads wait without a bound
        watchdog.start()
        lines = _Lines()
        said, numbers = b"", []
        try:
            frames = frames_iter(sock, tty=False)
            for stream, data in frames:
                if stream == STDERR:
                    said += data
                    continue
                found = lines.feed(data)
                if b"ready" in found:
                    numbers = found[found.index(b"ready") + 1 :]
                    break
            else:
                _close(sock)
                raise SandboxError(f"the egress tunnel did not start in the call's container: {_said(said)}")
        except (OSError, ValueError, AttributeError) as error:  # (a socket closed by the watchdog)
            _close(sock)
            raise SandboxError(
                f"the egress tunnel did not start in the call's container within {READY_S:g} s ({error})"
            ) from None
        finally:
            watchdog.cancel()
        self._accepting = sock
        threading.Thread(target=self._serve, args=(frames, lines, numbers), daemon=True).start()

    def close(self) -> None:
        """The call is over: the accepting exec's stdin closes (it ends; the container's removal ends the rest)."""
        self._closed.set()
        if self._accepting is not None:
            with contextlib.suppress(OSError):
                _raw(self._accepting).shutdown(socket.SHUT_WR)
            _close(self._accepting)

    def _serve(self, frames: Any, lines: _Lines, numbers: list[bytes]) -> None:
        try:
            for number in numbers:
                self._join(number)
            for stream, data in frames:
                if stream == STDOUT:
                    for number in lines.feed(data):
                        self._join(number)
        except Exception:  # noqa: BLE001 - the accepting exec ended (the call is over, or the container went away)
            pass

    def _join(self, number: bytes) -> None:
        """Carry connection number (each once, in the order accepted), while there is room."""
        if not number.isdigit() or len(number) > 9 or int(number) <= self._last or self._closed.is_set():
            return
        self._last = int(number)
        if not self._room.acquire(blocking=False):
            return
        threading.Thread(target=self._carry, args=(int(number),), daemon=True).start()

    def _carry(self, number: int) -> None:
        try:
            self._carried(number)
        except Exception:  # noqa: BLE001 - one connection's trouble ends that connection, never the call
            pass
        finally:
            self._room.release()

    def _carried(self, number: int) -> None:
        try:
            sock = self._exec(["python3", TUNNEL_TARGET, "join", str(number)])
        except SandboxError:
            return
        proxy = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            proxy.connect(self._proxy)
        except OSError:
            proxy.close()
            _close(sock)
            return
        back = threading.Thread(target=_to_container, args=(proxy, sock), daemon=True)
        back.start()
        try:
            for stream, data in frames_iter(sock, tty=False):
                if stream == STDOUT:
                    proxy.sendall(data)
                elif stream == STDERR:
                    break  # the container side sends no more
        except (OSError, ValueError):
            pass
        with contextlib.suppress(OSError):
            proxy.shutdown(socket.SHUT_WR)
        back.join()
        proxy.close()
        _close(sock)

    def _exec(self, argv: list[str]) -> Any:
        """An exec's stream, once the host has spoken first (see `sandbox.network.tunnel`)."""
        try:
            with self._asking:  # one at a time: asked from thirty threads at once, the client once never answered
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


def _to_container(proxy: socket.socket, sock: Any) -> None:
    """What the proxy sends, into the exec's stdin; the proxy's end of sending closes it."""
    raw = _raw(sock)
    try:
        while data := proxy.recv(65536):
            raw.sendall(data)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        raw.shutdown(socket.SHUT_WR)


class _Lines:
    """Lines out of a byte stream, as they complete."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, data: bytes) -> list[bytes]:
        self._buffer += data
        *complete, self._buffer = self._buffer.split(b"\n")
        if len(self._buffer) > MAX_LINE:
            self._buffer = b""
        return [line.strip() for line in complete if len(line) <= MAX_LINE]


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
