"""How a client talks to the warm service: one request and one reply per connection, each a JSON
object behind a 4-byte big-endian length, over a Unix socket in a folder only its user can enter.

Standard library only: the thin client of `harness exec` imports this and nothing heavy, so a warm
call costs an interpreter start and one round trip. A client that cannot use the service (no
socket, a service of another protocol, a refused request) gets `Unavailable` and takes the cold
path; nothing it asked for was started.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import struct
from pathlib import Path
from typing import Any

from sandbox.warm import messages
from sandbox.warm.messages import (
    ErrorReply,
    ExecReply,
    ExecRequest,
    LendRequest,
    LoanReply,
    Reply,
    Request,
    StatusReply,
)

PROTOCOL = 1
"""Bumped whenever a request or reply changes shape: a client never talks to another version."""
SOCKET = "warm.sock"
LOCK = "warm.lock"
LOG = "warm.log"
SLOTS = "slots"
MAX_MESSAGE = 256 * 1024 * 1024
"""A reply carries a call's capped output (a few MiB at most); anything larger is a broken peer."""


class Unavailable(Exception):
    """No usable warm service here (the caller runs the command the cold way)."""


def engine_folder(base: Path, docker_host: str | None) -> Path:
    """The service folder under base for one engine: `default` for the engine's usual socket, else
    one named by a digest of the `DOCKER_HOST` address (a service serves one engine)."""
    if docker_host is None:
        return base / "default"
    import hashlib

    return base / ("engine-" + hashlib.sha256(docker_host.encode()).hexdigest()[:12])


def private_folder(folder: Path, *, create: bool) -> Path:
    """folder, checked to belong to this user and to be closed to everybody else (created 0700)."""
    if create:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        st = folder.lstat()
    except OSError:
        raise Unavailable(f"no warm service folder at {folder}") from None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise Unavailable(
            f"the warm service folder {folder} must be a directory of this user that nobody else can enter (chmod 700)"
        )
    return folder


def _framed(message: dict[str, Any]) -> bytes:
    body = json.dumps(message).encode()
    return struct.pack(">I", len(body)) + body


def _body(sock: socket.socket, head: bytes) -> dict[str, Any]:
    """The message whose 4-byte length head was read: its body, bounded and checked to be an object."""
    size = struct.unpack(">I", head)[0]
    if size > MAX_MESSAGE:
        raise ValueError(f"message of {size} bytes")
    message = json.loads(_exactly(sock, size))
    if not isinstance(message, dict):
        raise ValueError("a message must be a JSON object")
    return message


def send(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.sendall(_framed(message))


def receive(sock: socket.socket) -> dict[str, Any]:
    """One message; EOFError if the peer closed before a whole one arrived."""
    return _body(sock, _exactly(sock, 4))


def _exactly(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise EOFError("the peer closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def reply(sock: socket.socket, message: Reply, fds: list[int] | None = None) -> None:
    """The service's reply to a request, stamped with the protocol it speaks (and fds passed along)."""
    stamped = {**messages.wire(message), "protocol": PROTOCOL}
    if fds:
        send_fds(sock, stamped, fds)
    else:
        send(sock, stamped)


def send_fds(sock: socket.socket, message: dict[str, Any], fds: list[int]) -> None:
    """send, with open file descriptors passed along (SCM_RIGHTS) on its first bytes."""
    data = _framed(message)
    sent = socket.send_fds(sock, [data], fds)
    sock.sendall(data[sent:])


def receive_fds(sock: socket.socket, max_fds: int = 64) -> tuple[dict[str, Any], list[int]]:
    """receive, with the descriptors the peer passed (the caller owns and closes them)."""
    head, fds, _, _ = socket.recv_fds(sock, 4, max_fds)
    if not head:
        raise EOFError("the peer closed the connection")
    return _body(sock, head + _exactly(sock, 4 - len(head))), fds


def ask(folder: Path, message: Request, *, connect_timeout: float = 2.0) -> dict[str, Any]:
    """Send one request to the service in folder and wait for its reply (as long as it takes: the
    service bounds every call by its own deadline), as the wire object. Unavailable if there is no
    service to ask, or it answers another protocol or refuses the request."""
    sock = connect(folder, connect_timeout)
    try:
        try:
            send(sock, {**messages.wire(message), "protocol": PROTOCOL})
            reply = receive(sock)
        except (OSError, EOFError, ValueError) as error:
            raise Unavailable(f"the warm service in {folder} broke off ({error})") from None
    finally:
        sock.close()
    return checked(reply, folder)


def status(folder: Path) -> StatusReply:
    """What the service in folder has ready; Unavailable without one (or with a malformed answer)."""
    try:
        return messages.status_reply_of(ask(folder, messages.StatusRequest()))
    except ValueError as error:
        raise Unavailable(f"the warm service in {folder} answered a malformed status ({error})") from None


def stop(folder: Path) -> None:
    """Ask the service in folder to stop; Unavailable without one."""
    ask(folder, messages.StopRequest())


def execute(folder: Path, request: ExecRequest) -> ExecReply | ErrorReply:
    """A one-shot call answered by the service. Unavailable when none can take it (nothing ran:
    the caller runs it the cold way); ValueError when the reply is malformed (the command may have
    run: the caller must not run it again)."""
    return messages.exec_reply_of(ask(folder, request))


def borrow(
    folder: Path, request: LendRequest, *, connect_timeout: float = 2.0
) -> tuple[LoanReply, list[int], socket.socket]:
    """Like ask, for a request answered with descriptors; the connection stays open and is returned:
    the service takes back what it lent when it closes."""
    sock = connect(folder, connect_timeout)
    try:
        send(sock, {**messages.wire(request), "protocol": PROTOCOL})
        reply, fds = receive_fds(sock)
    except (OSError, EOFError, ValueError) as error:
        sock.close()
        raise Unavailable(f"the warm service in {folder} broke off ({error})") from None
    try:
        try:
            return messages.loan_reply_of(checked(reply, folder)), fds, sock
        except ValueError as error:
            raise Unavailable(f"the warm service in {folder} answered a malformed loan ({error})") from None
    except Unavailable:
        for fd in fds:
            os.close(fd)
        sock.close()
        raise


def connect(folder: Path, timeout: float) -> socket.socket:
    path = private_folder(folder, create=False) / SOCKET
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(str(path))
    except OSError as error:
        sock.close()
        raise Unavailable(f"no warm service answers at {path} ({error.strerror or error})") from None
    sock.settimeout(None)
    return sock


def checked(reply: dict[str, Any], folder: Path) -> dict[str, Any]:
    if reply.get("protocol") != PROTOCOL:
        raise Unavailable(f"the warm service in {folder} speaks another protocol: restart it (harness warm stop)")
    if reply.get("refused"):
        raise Unavailable(str(reply["refused"]))
    return reply
