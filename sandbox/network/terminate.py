"""A tunnel to a secret's host, terminated: TLS with the container (a certificate of the session CA)
and TLS with the host (checked as any client would), HTTP/1.1 requests read with h11 so that only
their headers get the real value in place of the placeholder, and every answer relayed back with the
value turned into the placeholder again. One thread moves both directions (an SSL object is not for
two threads at once)."""

from __future__ import annotations

import select
import socket
import ssl
from collections.abc import Sequence

import h11

from sandbox.network.secrets import Secret, Swap

IDLE_TIMEOUT_S = 300.0


class Requests:
    """The container's side of the stream in, the host's side out: each request's head rewritten
    (placeholders in header values become the values), bodies passed on as they are."""

    def __init__(self, secrets: Sequence[Secret]) -> None:
        self.secrets = list(secrets)
        self.parser = h11.Connection(h11.SERVER)
        self.chunked = False
        self.swapped = 0
        """Header values that carried a placeholder (counted for the record, never what they hold)."""

    def feed(self, data: bytes) -> bytes:
        self.parser.receive_data(data)
        out = bytearray()
        while True:
            event = self.parser.next_event()
            if event is h11.NEED_DATA:
                return bytes(out)
            if event is h11.PAUSED:  # one request done: the next starts with what is left
                left, _ = self.parser.trailing_data
                self.parser = h11.Connection(h11.SERVER)
                self.parser.receive_data(left)
                continue
            if isinstance(event, h11.Request):
                out += self._head(event)
            elif isinstance(event, h11.Data):
                body = bytes(event.data)
                out += b"%x\r\n%s\r\n" % (len(body), body) if self.chunked else body
            elif isinstance(event, h11.EndOfMessage):
                if self.chunked:
                    out += b"0\r\n\r\n"
            elif isinstance(event, h11.ConnectionClosed):
                return bytes(out)

    def _head(self, request: h11.Request) -> bytes:
        lines = [request.method + b" " + request.target + b" HTTP/1.1\r\n"]
        self.chunked = False
        for name, value in request.headers.raw_items():
            for secret in self.secrets:
                if secret.placeholder.encode() in value:
                    value = value.replace(secret.placeholder.encode(), secret.value.encode())
                    self.swapped += 1
            self.chunked = self.chunked or (name.lower() == b"transfer-encoding" and b"chunked" in value.lower())
            lines.append(name + b": " + value + b"\r\n")
        return b"".join(lines) + b"\r\n"


def carry(client: ssl.SSLSocket, upstream: ssl.SSLSocket, secrets: Sequence[Secret]) -> tuple[int, int, int]:
    """Both directions until both are done; (bytes sent, bytes received, placeholders swapped).

    Reads are non-blocking and tried before every wait: a handshake may already have pulled the first
    request's record into the SSL object, where no select would see it."""
    requests = Requests(secrets)
    answers = [Swap(s.value.encode(), s.placeholder.encode()) for s in secrets]
    sent = received = 0
    open_ends = [client, upstream]
    for end in open_ends:
        end.setblocking(False)
    while open_ends:
        moved = False
        for end in list(open_ends):
            try:
                data = end.recv(65536)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                continue
            except OSError:  # ssl.SSLError is one: a broken stream ends like a closed one
                data = b""
            moved = True
            if end is client:
                if not data:
                    open_ends.remove(client)
                    _shut(upstream)
                    continue
                out = requests.feed(data)
                _send(upstream, out)
                sent += len(out)
                continue
            if not data:
                open_ends.remove(upstream)
                tail = b""
                for swap in answers:  # each one's held tail through the ones after it
                    tail = swap.feed(tail) + swap.end()
                _send(client, tail)
                received += len(tail)
                _shut(client)
                if client in open_ends:
                    open_ends.remove(client)
                continue
            for swap in answers:
                data = swap.feed(data)
            _send(client, data)
            received += len(data)
        if not moved and not select.select(open_ends, [], [], IDLE_TIMEOUT_S)[0]:
            break  # idle past the bound
    return sent, received, requests.swapped


def _send(end: ssl.SSLSocket, data: bytes) -> None:
    if not data:
        return
    end.settimeout(IDLE_TIMEOUT_S)  # a whole write, however slow the reader
    try:
        end.sendall(data)
    finally:
        end.setblocking(False)


def _shut(end: socket.socket) -> None:
    try:
        end.shutdown(socket.SHUT_WR)
    except OSError:
        pass
