"""The warm service's wire, for a client that must start fast: framing, the folder's checks, one
request and its checked reply, as plain JSON objects.

One request and one reply per connection, each a JSON object behind a 4-byte big-endian length, over
a Unix socket in a folder only its user can enter. The quick path of `harness exec` is an interpreter
start and this module: it imports the standard library's socket and json and nothing else it can
avoid (not `typing`, `pathlib` or `dataclasses`: each costs a one-shot call milliseconds it would pay
at every command). Folders are paths as strings or path objects, answered as given. `protocol` is the
typed side of the same wire (named-tuple messages, the service's replies, loans).
"""

from __future__ import annotations

import json
import os
import socket
import stat
import struct

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (see above)
if TYPE_CHECKING:
    from typing import Any, TypeVar

    Folder = TypeVar("Folder", bound="str | os.PathLike[str]")

PROTOCOL = 1
"""Bumped whenever a request or reply changes shape: a client never talks to another version."""
SOCKET = "warm.sock"
MAX_MESSAGE = 256 * 1024 * 1024
"""A reply carries a call's capped output (a few MiB at most); anything larger is a broken peer."""


class Unavailable(Exception):
    """No usable warm service here (the caller runs the command the cold way)."""


def engine_subfolder(docker_host: str | None) -> str:
    """The name of the service folder for one engine: `default` for the engine's usual socket, else
    one named by a digest of the `DOCKER_HOST` address (a service serves one engine)."""
    if docker_host is None:
        return "default"
    import hashlib

    return "engine-" + hashlib.sha256(docker_host.encode()).hexdigest()[:12]


def private_folder(folder: Folder, *, create: bool) -> Folder:
    """folder, checked to belong to this user and to be closed to everybody else (created 0700)."""
    if create:
        os.makedirs(folder, mode=0o700, exist_ok=True)
    try:
        st = os.lstat(folder)
    except OSError:
        raise Unavailable(f"no warm service folder at {folder}") from None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise Unavailable(
            f"the warm service folder {folder} must be a directory of this user that nobody else can enter (chmod 700)"
        )
    return folder


def framed(message: dict[str, Any]) -> bytes:
    body = json.dumps(message).encode()
    return struct.pack(">I", len(body)) + body


def body(sock: socket.socket, head: bytes) -> dict[str, Any]:
    """The message whose 4-byte length head was read: its body, bounded and checked to be an object."""
    size = struct.unpack(">I", head)[0]
    if size > MAX_MESSAGE:
        raise ValueError(f"message of {size} bytes")
    message = json.loads(exactly(sock, size))
    if not isinstance(message, dict):
        raise ValueError("a message must be a JSON object")
    return message


def send(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.sendall(framed(message))


def receive(sock: socket.socket) -> dict[str, Any]:
    """One message; EOFError if the peer closed before a whole one arrived."""
    return body(sock, exactly(sock, 4))


def exactly(sock: socket.socket, size: int) -> bytes:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            raise EOFError("the peer closed the connection")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def connect(folder: str | os.PathLike[str], timeout: float) -> socket.socket:
    path = os.path.join(private_folder(folder, create=False), SOCKET)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect(path)
    except OSError as error:
        sock.close()
        raise Unavailable(f"no warm service answers at {path} ({error.strerror or error})") from None
    sock.settimeout(None)
    return sock


def checked(reply: dict[str, Any], folder: str | os.PathLike[str]) -> dict[str, Any]:
    """reply, unless it is of another protocol or a refusal (Unavailable)."""
    if reply.get("protocol") != PROTOCOL:
        raise Unavailable(f"the warm service in {folder} speaks another protocol: restart it (harness warm stop)")
    if reply.get("refused"):
        raise Unavailable(str(reply["refused"]))
    return reply


def ask(folder: str | os.PathLike[str], message: dict[str, Any], *, connect_timeout: float = 2.0) -> dict[str, Any]:
    """Send one request (a wire object) to the service in folder and wait for its reply (as long as
    it takes: the service bounds every call by its own deadline). Unavailable if there is no service
    to ask, or it answers another protocol or refuses the request."""
    sock = connect(folder, connect_timeout)
    try:
        try:
            send(sock, {**message, "protocol": PROTOCOL})
            reply = receive(sock)
        except (OSError, EOFError, ValueError) as error:
            raise Unavailable(f"the warm service in {folder} broke off ({error})") from None
    finally:
        sock.close()
    return checked(reply, folder)


def exec_request(path: str, argv: list[str], spec: dict[str, Any], keep: str | None = None) -> dict[str, Any]:
    """The wire object of a one-shot call (`messages.ExecRequest`'s, field for field)."""
    return {"path": path, "argv": argv, "spec": spec, "keep": keep, "op": "exec"}


def exec_reply(data: dict[str, Any]) -> dict[str, Any]:
    """The reply to an exec request, checked: either `error` (a string) and `exit_code` (a number, 70
    when it names none), or `envelope` (an object with a numeric exit code and a status) and
    `headline` (a string). ValueError when it is malformed (the command may have run)."""
    if "error" in data:
        code = data.get("exit_code")
        return {"error": str(data["error"]), "exit_code": code if isinstance(code, int) else 70}
    envelope = data.get("envelope", {})
    if not isinstance(envelope, dict):
        raise ValueError("envelope must be an object")
    if not isinstance(envelope.get("exit_code"), int) or not isinstance(envelope.get("status"), str):
        raise ValueError("the envelope must carry an exit code and a status")
    headline = data.get("headline")
    if not isinstance(headline, str):
        raise ValueError("headline must be a string")
    return {"envelope": envelope, "headline": headline}
