"""The egress proxy of one session: a server on a Unix socket (the containers reach it through their
relay), speaking HTTP/1.1 proxy requests parsed by h11, a thread per connection, and the bytes of an
allowed connection moved in the kernel (splice) once every check has passed.

- `CONNECT host:port`: allowed only for a listed host; the name is resolved here (the containers
  have no resolver) and every address checked after resolution; the tunnel's first bytes must be a
  TLS ClientHello whose server name is the CONNECT host (no SNI is accepted only for a listed
  address); then bytes are relayed to the address that was checked, never resolved again.
- `GET http://host/...` (any method, absolute form): the same checks on the Host, then the request
  is sent on with `Connection: close` and the answer relayed back.
A refusal is a 403 with one line saying why (or, once a tunnel is open, its close), and every
request, allowed or not, is one record for the session's log."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
import ssl
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import h11

from sandbox.network import hello
from sandbox.network.allow import Allowlist
from sandbox.network.secrets import Secret, SessionCA

HEAD_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 10.0
CHUNK = 1 << 20
HOP_BY_HOP = frozenset(
    {b"connection", b"proxy-connection", b"keep-alive", b"proxy-authorization", b"proxy-authenticate", b"te",
     b"trailer", b"upgrade"}
)  # fmt: skip


class Resolver:
    """A proxy's name lookups: an answer is kept for `ttl` seconds (a package manager's hundreds of
    requests to one registry make one lookup, and see one answer), and a temporary failure (EAI_AGAIN:
    the resolver under a burst) is tried again twice before the request is refused. Every address is
    still checked against the allowlist on every request."""

    def __init__(self, ttl: float = 30.0, attempts: int = 3, pause: float = 0.2) -> None:
        self.ttl, self.attempts, self.pause = ttl, attempts, pause
        self._known: dict[str, tuple[float, list[str]]] = {}
        self._lock = threading.Lock()

    def lookup(self, host: str, port: int) -> list[str]:
        now = time.monotonic()
        with self._lock:
            cached = self._known.get(host)
        if cached is not None and now - cached[0] < self.ttl:
            return cached[1]
        for attempt in range(self.attempts):
            try:
                found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
                break
            except socket.gaierror as error:
                if error.errno != socket.EAI_AGAIN or attempt + 1 == self.attempts:
                    raise
                time.sleep(self.pause * (attempt + 1))
        addresses = list(dict.fromkeys(str(item[4][0]) for item in found))
        with self._lock:
            self._known[host] = (time.monotonic(), addresses)
        return addresses


@dataclass
class RequestRecord:
    """One request through the proxy, as the session's network log keeps it."""

    ts: float
    method: str
    host: str
    port: int
    allowed: bool = False
    reason: str = ""
    address: str = ""
    sent: int = 0
    """Bytes from the container towards the host (after the request head)."""
    received: int = 0
    """Bytes from the host back to the container."""
    duration_ms: int = 0
    status: int = 0
    """The status the proxy answered with (403 refused, 502 unreachable, 200 a tunnel opened);
    0 when the host's own answer was relayed."""
    extra: dict[str, Any] = field(default_factory=dict)


class Refused(Exception):
    """A request the proxy will not carry: the status and the one line the command is told."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status, self.reason = status, reason


class EgressProxy:
    """Serves one session's containers; `record` is told every request once it is over. With
    secrets, a tunnel to a secret's host is terminated (see sandbox.network.terminate) with
    certificates of ca, and the host is checked with upstream."""

    def __init__(
        self,
        allowlist: Allowlist,
        record: Callable[[RequestRecord], None],
        secrets: Sequence[Secret] = (),
        ca: SessionCA | None = None,
        upstream: ssl.SSLContext | None = None,
    ) -> None:
        self.allowlist, self._record = allowlist, record
        self.secrets, self.ca, self.upstream = list(secrets), ca, upstream
        self.resolver = Resolver()
        self._open_entries: dict[int, RequestRecord] = {}
        self._lock = threading.Lock()

    def record(self, entry: RequestRecord) -> None:
        """Tell the log once per request (its handler, or the stop for one still open)."""
        with self._lock:
            if self._open_entries.pop(id(entry), None) is None:
                return
        self._record(entry)

    def cut_open(self) -> None:
        """At stop: every request still open is recorded as cut (a download the session outlived)."""
        with self._lock:
            still = list(self._open_entries.values())
        for entry in still:
            if entry.method:
                entry.reason = entry.reason or "cut: the session ended while it was open"
                self.record(entry)

    def serve(self, listener: socket.socket, stop: threading.Event) -> None:
        """Accept until stop is set (the listener polls it twice a second)."""
        listener.settimeout(0.5)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if stop.is_set():
                    break
                raise
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()
        self.cut_open()

    def handle(self, conn: socket.socket) -> None:
        started = time.monotonic()
        entry = RequestRecord(ts=time.time(), method="", host="", port=0)
        with self._lock:
            self._open_entries[id(entry)] = entry
        try:
            self._request(conn, entry)
        except Refused as refused:
            entry.allowed, entry.reason, entry.status = False, refused.reason, refused.status
            if not entry.extra.get("tunnel_open"):
                _answer(conn, refused.status, refused.reason)
        except (OSError, h11.ProtocolError, hello.NotTls) as error:
            entry.reason = entry.reason or f"{type(error).__name__}: {error}".strip(": ")
        except Exception as error:  # noqa: BLE001 - one connection's bug must not end the proxy
            entry.reason = f"proxy error {type(error).__name__}: {error}"
        finally:
            entry.extra.pop("tunnel_open", None)
            entry.duration_ms = int((time.monotonic() - started) * 1000)
            with contextlib.suppress(OSError):
                conn.close()
            if entry.method:
                self.record(entry)
            else:
                with self._lock:
                    self._open_entries.pop(id(entry), None)

    def _request(self, conn: socket.socket, entry: RequestRecord) -> None:
        conn.settimeout(HEAD_TIMEOUT_S)
        parser = h11.Connection(h11.SERVER)
        try:
            request = _head(conn, parser)
        except h11.RemoteProtocolError as error:  # two Hosts, a bad line: refused, and on the record like any
            entry.method, entry.host = "?", "?"
            raise Refused(400, f"a malformed request: {error}") from None
        entry.method = request.method.decode("ascii", "replace").upper()
        if entry.method == "CONNECT":
            entry.host, entry.port = _authority(request.target.decode("ascii", "replace"), 443)
            self._tunnel(conn, parser, entry)
        else:
            self._forward(conn, parser, request, entry)

    def _open(self, entry: RequestRecord) -> socket.socket:
        """A connection to the host after every check: the list, the lookup, every address."""
        refusal = self.allowlist.host_refusal(entry.host, entry.port)
        if refusal:
            raise Refused(403, refusal)
        try:
            addresses = self.resolver.lookup(entry.host.strip("[]"), entry.port)
        except socket.gaierror as error:
            raise Refused(502, f"cannot resolve {entry.host}: {error.strerror}") from None
        for address in addresses:
            refusal = self.allowlist.address_refusal(entry.host, ipaddress.ip_address(address), entry.port)
            if refusal:
                raise Refused(403, refusal)
        entry.address = addresses[0]
        try:
            upstream = socket.create_connection((entry.address, entry.port), timeout=CONNECT_TIMEOUT_S)
        except OSError as error:
            reason = "timed out" if isinstance(error, TimeoutError) else (error.strerror or str(error))
            raise Refused(502, f"cannot connect to {entry.host}:{entry.port} ({entry.address}): {reason}") from None
        upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return upstream

    def _tunnel(self, conn: socket.socket, parser: h11.Connection, entry: RequestRecord) -> None:
        bound = [s for s in self.secrets if s.hostname == entry.host and s.port_matches(entry.port)]
        if bound:
            self._terminated(conn, parser, entry, bound)
            return
        with self._open(entry) as upstream:
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            entry.extra["tunnel_open"] = True
            try:
                first = _client_hello(conn, parser.trailing_data[0])
            except hello.NotTls as error:
                raise Refused(403, f"a tunnel carries TLS only: {error}") from None
            self._check_hello(first, entry)
            entry.allowed, entry.status = True, 200
            upstream.sendall(first)
            entry.sent += len(first)
            _relay(conn, upstream, entry)

    def _terminated(
        self, conn: socket.socket, parser: h11.Connection, entry: RequestRecord, bound: list[Secret]
    ) -> None:
        """The tunnel to a secret's host: its ClientHello checked without being read, then TLS on
        both sides and the placeholders swapped in the requests' headers only."""
        if self.ca is None or self.upstream is None:
            raise Refused(502, "the proxy has secrets but no session CA")
        if parser.trailing_data[0]:
            raise Refused(400, "TLS sent before the tunnel was established")
        with self._open(entry) as raw_upstream:
            conn.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            entry.extra["tunnel_open"] = True
            try:
                self._check_hello(_peek_hello(conn), entry)
            except hello.NotTls as error:
                raise Refused(403, f"a tunnel carries TLS only: {error}") from None
            entry.allowed, entry.status = True, 200
            entry.extra["terminated"] = True
            try:
                client = self.ca.server_context(entry.host).wrap_socket(conn, server_side=True)
                upstream = self.upstream.wrap_socket(raw_upstream, server_hostname=entry.host)
            except (ssl.SSLError, OSError) as error:
                entry.allowed = False
                raise Refused(502, f"TLS with {entry.host} failed: {error}") from None
            from sandbox.network.terminate import Unreadable, carry

            try:
                entry.sent, entry.received, swapped = carry(client, upstream, bound)
            except Unreadable as why:  # an answer the proxy could not look into: not passed on
                entry.status, entry.reason = 502, f"the answer was not passed on: {why}"
                return
            entry.extra["secrets_swapped"] = swapped

    def _check_hello(self, data: bytes, entry: RequestRecord) -> None:
        try:
            name = hello.server_name(data)
        except hello.NotTls as error:
            raise Refused(403, f"a tunnel carries TLS only: {error}") from None
        entry.extra["sni"] = name or ""
        target = entry.host.strip("[]").lower().rstrip(".")
        if name is None:
            if _is_address(target):
                return
            raise Refused(403, f"the TLS ClientHello names no server; the tunnel was asked for {target}")
        if name != target:
            raise Refused(403, f"the TLS ClientHello names {name}, not {target} that the tunnel was asked for")

    def _forward(self, conn: socket.socket, parser: h11.Connection, request: h11.Request, entry: RequestRecord) -> None:
        target = request.target.decode("ascii", "replace")
        scheme, _, rest = target.partition("://")
        if not rest:
            entry.host = _header(request, b"host") or "?"
            raise Refused(400, f"not a proxy request ({entry.method} {target[:80]}): send the absolute URL")
        authority, _, path = rest.partition("/")
        entry.host, entry.port = _authority(authority, 80)
        if scheme.lower() != "http":
            raise Refused(400, f"{scheme}:// through a proxy goes by CONNECT, not {entry.method}")
        with self._open(entry) as upstream:
            # the target's authority is the Host (RFC 9112 3.2.2): a Host of the client's own choosing
            # would let a listed front end serve any site
            head = [f"{entry.method} /{path} HTTP/1.1\r\n".encode(), b"Host: " + authority.encode("ascii") + b"\r\n"]
            chunked = False
            for name, value in request.headers.raw_items():
                if name.lower() in HOP_BY_HOP or name.lower() == b"host":
                    continue
                chunked = chunked or (name.lower() == b"transfer-encoding" and b"chunked" in value.lower())
                head.append(name + b": " + value + b"\r\n")
            head.append(b"Connection: close\r\n\r\n")
            upstream.sendall(b"".join(head))
            entry.allowed = True
            _send_body(conn, parser, upstream, chunked, entry)
            entry.received += _pump(upstream, conn)


def _event(conn: socket.socket, parser: h11.Connection, closed: str) -> object:
    """The parser's next event, reading from conn while it needs data (closed: what an early end is)."""
    while (event := parser.next_event()) is h11.NEED_DATA:
        data = conn.recv(65536)
        if not data:
            raise ConnectionError(f"the client closed before {closed}")
        parser.receive_data(data)
    return event


def _head(conn: socket.socket, parser: h11.Connection) -> h11.Request:
    event = _event(conn, parser, "a whole request")
    if isinstance(event, h11.Request):
        return event
    raise h11.RemoteProtocolError(f"unexpected {type(event).__name__}")


def _client_hello(conn: socket.socket, early: bytes) -> bytes:
    data = bytes(early)
    while (wanted := hello.needed(data)) > 0:
        if wanted > hello.MAX_HELLO:
            raise hello.NotTls("a ClientHello larger than 64 KiB")
        more = conn.recv(wanted - len(data))
        if not more:
            raise hello.NotTls("the tunnel closed before a whole ClientHello")
        data += more
    return data


def _peek_hello(conn: socket.socket) -> bytes:
    """The whole ClientHello, left unread in the socket (the TLS server reads it next)."""
    seen = b""
    for _ in range(3000):  # a ClientHello comes in one or two segments; ~3 s at most
        data = conn.recv(hello.MAX_HELLO, socket.MSG_PEEK)
        if not data:
            raise hello.NotTls("the tunnel closed before a whole ClientHello")
        if hello.needed(data) == 0:
            return data
        if len(data) == len(seen):
            time.sleep(0.001)
        seen = data
    raise hello.NotTls("no whole ClientHello came")


def _send_body(
    conn: socket.socket, parser: h11.Connection, out: socket.socket, chunked: bool, entry: RequestRecord
) -> None:
    while True:
        event = _event(conn, parser, "the request's end")
        if isinstance(event, h11.Data):
            body = bytes(event.data)
            out.sendall(b"%x\r\n%s\r\n" % (len(body), body) if chunked else body)
            entry.sent += len(body)
        elif isinstance(event, h11.EndOfMessage):
            if chunked:
                out.sendall(b"0\r\n\r\n")
            return


def _relay(conn: socket.socket, upstream: socket.socket, entry: RequestRecord) -> None:
    """Both directions until each side has closed; the byte counts go on the record."""
    up: list[int] = [0]
    other = threading.Thread(target=lambda: up.__setitem__(0, _pump(conn, upstream)), daemon=True)
    other.start()
    entry.received += _pump(upstream, conn)
    other.join()
    entry.sent += up[0]


def _pump(source: socket.socket, sink: socket.socket) -> int:
    """source to sink until source's end (then sink's write side is shut); the bytes moved. The
    kernel moves them (splice through a pipe) where it can."""
    source.settimeout(None)
    sink.settimeout(None)
    moved = 0
    try:
        if hasattr(os, "splice"):
            moved = _splice(source, sink)
        else:
            while data := source.recv(CHUNK):
                sink.sendall(data)
                moved += len(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)
    return moved


def _splice(source: socket.socket, sink: socket.socket) -> int:
    read_end, write_end = os.pipe()
    total = 0
    try:
        with contextlib.suppress(OSError):
            import fcntl

            fcntl.fcntl(write_end, 1031, CHUNK)  # F_SETPIPE_SZ: bigger moves per call
        while True:
            count = os.splice(source.fileno(), write_end, CHUNK)
            if count == 0:
                return total
            total += count
            while count:
                count -= os.splice(read_end, sink.fileno(), count)
    finally:
        os.close(read_end)
        os.close(write_end)


def _answer(conn: socket.socket, status: int, reason: str) -> None:
    line = f"harness egress proxy: {reason}\n".encode()
    title = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}.get(status, "Error")
    head = (
        f"HTTP/1.1 {status} {title}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {len(line)}\r\n"
        f"X-Harness-Egress: refused\r\nConnection: close\r\n\r\n"
    ).encode()
    with contextlib.suppress(OSError):
        conn.sendall(head + line)


def _authority(text: str, default_port: int) -> tuple[str, int]:
    text = text.strip()
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":")
    else:
        host, _, port = text.rpartition(":") if text.count(":") == 1 else (text, "", "")
    if port and not port.isdigit():
        raise Refused(400, f"a bad port in {text[:80]!r}")
    return host.lower(), int(port) if port else default_port


def _header(request: h11.Request, name: bytes) -> str:
    for key, value in request.headers:
        if key.lower() == name:
            return value.decode("ascii", "replace")
    return ""


def _is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def as_dict(record: RequestRecord) -> dict[str, Any]:
    return asdict(record)
