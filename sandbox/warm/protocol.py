"""How a client talks to the warm service, typed: the messages of `messages` over the wire of `wire`
(one request and one reply per connection, each a JSON object behind a 4-byte big-endian length,
over a Unix socket in a folder only its user can enter), and the service's side of it.

Standard library only. A client that cannot use the service (no socket, a service of another
protocol, a refused request) gets `Unavailable` and takes the cold path; nothing it asked for was
started. The quick path of `harness exec` uses `wire` alone.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

from sandbox.warm import messages, wire
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
from sandbox.warm.wire import (  # the wire's names, as the service and its clients know them
    MAX_MESSAGE,
    PROTOCOL,
    SOCKET,
    Unavailable,
    checked,
    connect,
    private_folder,
    receive,
    send,
)

__all__ = [
    "MAX_MESSAGE",
    "PROTOCOL",
    "SOCKET",
    "Unavailable",
    "checked",
    "connect",
    "private_folder",
    "receive",
    "send",
]

LOCK = "warm.lock"
LOG = "warm.log"
SLOTS = "slots"


def engine_folder(base: Path, docker_host: str | None) -> Path:
    """The service folder under base for one engine (see `wire.engine_subfolder`)."""
    return base / wire.engine_subfolder(docker_host)


def reply(sock: socket.socket, message: Reply, fds: list[int] | None = None) -> None:
    """The service's reply to a request, stamped with the protocol it speaks (and fds passed along)."""
    stamped = {**messages.wire(message), "protocol": PROTOCOL}
    if fds:
        send_fds(sock, stamped, fds)
    else:
        send(sock, stamped)


def send_fds(sock: socket.socket, message: dict[str, Any], fds: list[int]) -> None:
    """send, with open file descriptors passed along (SCM_RIGHTS) on its first bytes."""
    data = wire.framed(message)
    sent = socket.send_fds(sock, [data], fds)
    sock.sendall(data[sent:])


def receive_fds(sock: socket.socket, max_fds: int = 64) -> tuple[dict[str, Any], list[int]]:
    """receive, with the descriptors the peer passed (the caller owns and closes them)."""
    head, fds, _, _ = socket.recv_fds(sock, 4, max_fds)
    if not head:
        raise EOFError("the peer closed the connection")
    return wire.body(sock, head + wire.exactly(sock, 4 - len(head))), fds


def ask(folder: Path, message: Request, *, connect_timeout: float = 2.0) -> dict[str, Any]:
    """Send one request to the service in folder and wait for its reply, as the wire object (see
    `wire.ask`)."""
    return wire.ask(folder, messages.wire(message), connect_timeout=connect_timeout)


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
