"""The warm service's process: one per user and engine, held by a lock in its folder.

`serve` runs in the foreground until `idle_s` pass without a request, a `stop` request, or SIGTERM
/ SIGINT; whichever way it ends, it removes every container it started and its socket. `spawn`
starts it detached (its own session, output to `warm.log` in the folder) and returns once it
answers; `stop` asks it to end and waits until its lock is free. `Server` and `Handler` are its
socket: a thread per connection, one request and one reply (a loan keeps its connection open).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import socketserver
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING

from sandbox.tree import remove_tree
from sandbox.warm import protocol
from sandbox.warm.loans import KIND
from sandbox.warm.messages import LendRequest, Refused, Reply, StatusReply, StopReply, request_of
from sandbox.warm.service import WarmConfig, WarmService

if TYPE_CHECKING:
    from sandbox.docker.containers import DockerSandbox

START_TIMEOUT_S = 60.0
"""How long `spawn` waits for a new service to answer (it may build nothing, but the engine may be slow)."""


class AlreadyRunning(Exception):
    """A service already holds this folder's lock."""


def _lock(folder: Path) -> IO[str]:
    handle = open(folder / protocol.LOCK, "a+")  # noqa: SIM115 - held for the service's whole life
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        pid = handle.read().strip()
        handle.close()
        raise AlreadyRunning(f"a warm service already runs for this engine (pid {pid or '?'})") from None
    handle.seek(0)
    handle.truncate()
    handle.write(str(os.getpid()))
    handle.flush()
    return handle


def serve(folder: Path, config: WarmConfig, box: DockerSandbox, ready: Callable[[], None] | None = None) -> None:
    """Serve requests on folder's socket until idle, stopped or signalled; clean up whatever ends it."""
    from sandbox import labels
    from sandbox.docker.prune import prune

    protocol.private_folder(folder, create=True)
    lock = _lock(folder)
    service = None
    server = None
    socket_path = folder / protocol.SOCKET
    try:
        socket_path.unlink(missing_ok=True)
        remove_tree(folder / protocol.SLOTS, ignore_errors=True)  # a killed service's directories
        (folder / protocol.SLOTS).mkdir(mode=0o700)
        prune(box.client, extra={labels.KIND: KIND})  # a killed service's containers (their pid is gone)
        service = WarmService(box, folder, config)
        umask = os.umask(0o177)
        try:
            server = Server(str(socket_path), Handler)
        finally:
            os.umask(umask)
        server.service = service
        stopper = _stopper(server)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stopper())
        threading.Thread(target=_idle_watch, args=(service, config.idle_s, stopper), daemon=True).start()
        if ready is not None:
            ready()
        server.serve_forever(poll_interval=0.5)
    finally:
        if server is not None:
            server.server_close()
        if service is not None:
            service.close()
        box.close()
        remove_tree(folder / protocol.SLOTS, ignore_errors=True)
        socket_path.unlink(missing_ok=True)  # last: a socket gone means everything else is too
        lock.close()


def _stopper(server: Server) -> Callable[[], None]:
    """Shut the server down from any thread (serve_forever's own must not wait for itself)."""
    once = threading.Lock()

    def stop() -> None:
        if once.acquire(blocking=False):
            threading.Thread(target=server.shutdown, daemon=True).start()

    server.stop = stop
    return stop


def _idle_watch(service: WarmService, idle_s: float, stop: Callable[[], None]) -> None:
    while True:
        time.sleep(min(1.0, idle_s / 4))
        if service.idle_for(idle_s):
            stop()
            return


def spawn(folder: Path, argv: Sequence[str], env: dict[str, str] | None = None) -> StatusReply:
    """Start `argv` (a `harness warm serve` command) detached and return its first status reply.
    RuntimeError with the end of its log if it exits or does not answer in time."""
    protocol.private_folder(folder, create=True)
    log = folder / protocol.LOG
    with open(log, "ab") as out:
        process = subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True, env=env
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(_tail(log) or f"the warm service exited with code {process.returncode}")
        with contextlib.suppress(protocol.Unavailable):
            return protocol.status(folder)
        time.sleep(0.1)
    process.terminate()
    raise RuntimeError(f"the warm service did not answer within {START_TIMEOUT_S:g} s; see {log}")


def stop(folder: Path, timeout_s: float = 60.0) -> bool:
    """Ask the service in folder to end and wait until it has cleaned up; False if none ran."""
    try:
        protocol.stop(folder)
    except protocol.Unavailable:
        return False
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with open(folder / protocol.LOCK, "a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                pass
        time.sleep(0.1)
    return True


def _tail(log: Path, lines: int = 5) -> str:
    with contextlib.suppress(OSError):
        return "\n".join(log.read_text(errors="replace").strip().splitlines()[-lines:])
    return ""


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


class Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    service: WarmService
    stop: Callable[[], None]
    """Shut the server down from any thread (set by the daemon)."""


class Handler(socketserver.BaseRequestHandler):
    """One connection: one request, one reply. A peer of another user (but root) is refused."""

    server: Server

    def handle(self) -> None:
        sock: socket.socket = self.request
        service = self.server.service
        if peer_uid(sock) not in (os.getuid(), 0):
            return
        try:
            with service.serving() as after:
                self._answer(sock, service, after)
        except (OSError, EOFError, ValueError):
            pass  # a client that broke off gets nothing; its call was killed by the hang-up watch

    def _answer(self, sock: socket.socket, service: WarmService, after: list[Callable[[], None]]) -> None:
        raw = protocol.receive(sock)
        reply: Reply
        if raw.get("protocol") != protocol.PROTOCOL:
            reply = Refused("another protocol")
        else:
            try:
                request = request_of(raw)
            except ValueError as error:
                reply = Refused(f"invalid request: {error}")
            else:
                if isinstance(request, LendRequest):
                    service.serve_loan(sock, request)
                    return
                gone = threading.Event()
                threading.Thread(target=_watch_hangup, args=(sock, gone), daemon=True).start()
                reply = service.handle(request, gone, after)
        with contextlib.suppress(OSError):
            protocol.reply(sock, reply)
        if isinstance(reply, StopReply):
            self.server.stop()


def _watch_hangup(sock: socket.socket, gone: threading.Event) -> None:
    """Set gone when the client closes its end before the reply (a client sends nothing more)."""
    with contextlib.suppress(OSError):
        sock.recv(1, socket.MSG_PEEK)
    gone.set()
