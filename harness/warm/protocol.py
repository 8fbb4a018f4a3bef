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


def send(sock: socket.socket, message: dict[str, Any]) -> None:
    body = json.dumps(message).encode()
    sock.sendall(struct.pack(">I", len(body)) + body)


def receive(sock: socket.socket) -> dict[str, Any]:
    """One message; EOFError if the peer closed before a whole one arrived."""
    size = struct.unpack(">I", _exactly(sock, 4))[0]
    if size > MAX_MESSAGE:
        raise ValueError(f"message of {size} bytes")
    message = json.loads(_exactly(sock, size))
    if not isinstance(message, dict):
        raise ValueError("a message must be a JSON object")
    return message


def _exactly(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise EOFError("the peer closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def ask(folder: Path, message: dict[str, Any], *, connect_timeout: float = 2.0) -> dict[str, Any]:
    """Send one request to the service in folder and wait for its reply (as long as it takes: the
    service bounds every call by its own deadline). Unavailable if there is no service to ask, or
    it answers another protocol or refuses the request."""
    path = private_folder(folder, create=False) / SOCKET
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(connect_timeout)
        try:
            sock.connect(str(path))
        except OSError as error:
            raise Unavailable(f"no warm service answers at {path} ({error.strerror or error})") from None
        sock.settimeout(None)
        try:
            send(sock, {**message, "protocol": PROTOCOL})
            reply = receive(sock)
        except (OSError, EOFError, ValueError) as error:
            raise Unavailable(f"the warm service at {path} broke off ({error})") from None
    finally:
        sock.close()
    if reply.get("protocol") != PROTOCOL:
        raise Unavailable(f"the warm service at {path} speaks another protocol: restart it (harness warm stop)")
    if reply.get("refused"):
        raise Unavailable(str(reply["refused"]))
    return reply
