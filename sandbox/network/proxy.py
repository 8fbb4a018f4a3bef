"""The egress proxy of one session: an asyncio server on a Unix socket (the containers reach it
through their relay), speaking HTTP/1.1 proxy requests parsed by h11.

- `CONNECT host:port`: allowed only for a listed host; the name is resolved here (the containers
  have no resolver) and every address checked after resolution; the tunnel's first bytes must be a
  TLS ClientHello whose server name is the CONNECT host (no SNI is accepted only for a listed
  address); then bytes are relayed to the address that was checked, never resolved again.
- `GET http://host/...` (any method, absolute form): the same checks on the Host, then the request
  is sent on with `Connection: close` and the answer relayed back.
A refusal is a 403 with one line saying why (or, once a tunnel is open, its close), and every
request, allowed or not, is one record for the session's log."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import h11

from sandbox.network import hello
from sandbox.network.allow import Allowlist

HEAD_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_S = 10.0
CHUNK = 1 << 18
HOP_BY_HOP = frozenset(
    {b"connection", b"proxy-connection", b"keep-alive", b"proxy-authorization", b"proxy-authenticate", b"te",
     b"trailer", b"upgrade"}
)  # fmt: skip


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
    """Serves one session's containers; `record` is told every request once it is over."""

    def __init__(self, allowlist: Allowlist, record: Callable[[RequestRecord], None]) -> None:
        self.allowlist, self.record = allowlist, record

    async def serve(self, path: str) -> asyncio.AbstractServer:
        return await asyncio.start_unix_server(self._handle, path=path, limit=CHUNK)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        started = time.monotonic()
        entry = RequestRecord(ts=time.time(), method="", host="", port=0)
        try:
            await self._request(reader, writer, entry)
        except Refused as refused:
            entry.allowed, entry.reason, entry.status = False, refused.reason, refused.status
            if not entry.extra.get("tunnel_open"):
                await _answer(writer, refused.status, refused.reason)
        except (TimeoutError, OSError, asyncio.IncompleteReadError, h11.ProtocolError) as error:
            entry.reason = entry.reason or f"{type(error).__name__}: {error}".strip(": ")
        finally:
            entry.extra.pop("tunnel_open", None)
            entry.duration_ms = int((time.monotonic() - started) * 1000)
            with contextlib.suppress(Exception):
                writer.close()
            if entry.method:
                self.record(entry)

    async def _request(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, entry: RequestRecord) -> None:
        parser = h11.Connection(h11.SERVER)
        request = await asyncio.wait_for(_head(reader, parser), HEAD_TIMEOUT_S)
        entry.method = request.method.decode("ascii", "replace").upper()
        if entry.method == "CONNECT":
            entry.host, entry.port = _authority(request.target.decode("ascii", "replace"), 443)
            await self._tunnel(reader, writer, parser, entry)
        else:
            await self._forward(reader, writer, parser, request, entry)

    async def _open(self, entry: RequestRecord) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to the host after every check: the list, the lookup, every address."""
        refusal = self.allowlist.host_refusal(entry.host, entry.port)
        if refusal:
            raise Refused(403, refusal)
        loop = asyncio.get_running_loop()
        try:
            found = await loop.getaddrinfo(entry.host.strip("[]"), entry.port, type=socket.SOCK_STREAM)
        except socket.gaierror as error:
            raise Refused(502, f"cannot resolve {entry.host}: {error.strerror}") from None
        addresses = list(dict.fromkeys(str(item[4][0]) for item in found))
        for address in addresses:
            refusal = self.allowlist.address_refusal(entry.host, ipaddress.ip_address(address), entry.port)
            if refusal:
                raise Refused(403, refusal)
        entry.address = addresses[0]
        try:
            return await asyncio.wait_for(
                asyncio.open_connection(entry.address, entry.port, limit=CHUNK), CONNECT_TIMEOUT_S
            )
        except (TimeoutError, OSError) as error:
            reason = "timed out" if isinstance(error, asyncio.TimeoutError) else (error.strerror or str(error))
            raise Refused(502, f"cannot connect to {entry.host}:{entry.port} ({entry.address}): {reason}") from None

    async def _tunnel(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, parser: h11.Connection, entry: RequestRecord
    ) -> None:
        upstream_reader, upstream_writer = await self._open(entry)
        try:
            writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
            await writer.drain()
            entry.extra["tunnel_open"] = True
            try:
                first = await asyncio.wait_for(_client_hello(reader, parser.trailing_data[0]), HEAD_TIMEOUT_S)
            except hello.NotTls as error:
                raise Refused(403, f"a tunnel carries TLS only: {error}") from None
            self._check_hello(first, entry)
            entry.allowed, entry.status = True, 200
            upstream_writer.write(first)
            entry.sent += len(first)
            await _relay(reader, writer, upstream_reader, upstream_writer, entry)
        finally:
            with contextlib.suppress(Exception):
                upstream_writer.close()

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

    async def _forward(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        parser: h11.Connection,
        request: h11.Request,
        entry: RequestRecord,
    ) -> None:
        target = request.target.decode("ascii", "replace")
        scheme, _, rest = target.partition("://")
        if not rest:
            entry.host = _header(request, b"host") or "?"
            raise Refused(400, f"not a proxy request ({entry.method} {target[:80]}): send the absolute URL")
        authority, _, path = rest.partition("/")
        entry.host, entry.port = _authority(authority, 80)
        if scheme.lower() != "http":
            raise Refused(400, f"{scheme}:// through a proxy goes by CONNECT, not {entry.method}")
        upstream_reader, upstream_writer = await self._open(entry)
        try:
            head = [f"{entry.method} /{path} HTTP/1.1\r\n".encode()]
            chunked = False
            for name, value in request.headers:
                if name.lower() in HOP_BY_HOP:
                    continue
                chunked = chunked or (name.lower() == b"transfer-encoding" and b"chunked" in value.lower())
                head.append(name + b": " + value + b"\r\n")
            head.append(b"Connection: close\r\n\r\n")
            upstream_writer.write(b"".join(head))
            entry.allowed = True
            await _send_body(reader, parser, upstream_writer, chunked, entry)
            while data := await upstream_reader.read(CHUNK):
                writer.write(data)
                entry.received += len(data)
                await writer.drain()
        finally:
            with contextlib.suppress(Exception):
                upstream_writer.close()


async def _head(reader: asyncio.StreamReader, parser: h11.Connection) -> h11.Request:
    while True:
        event = parser.next_event()
        if isinstance(event, h11.Request):
            return event
        if event is h11.NEED_DATA:
            data = await reader.read(CHUNK)
            if not data:
                raise asyncio.IncompleteReadError(b"", None)
            parser.receive_data(data)
            continue
        raise h11.RemoteProtocolError(f"unexpected {type(event).__name__}")


async def _client_hello(reader: asyncio.StreamReader, early: bytes) -> bytes:
    data = bytes(early)
    while (wanted := hello.needed(data)) > 0:
        if wanted > hello.MAX_HELLO:
            raise hello.NotTls("a ClientHello larger than 64 KiB")
        more = await reader.read(wanted - len(data))
        if not more:
            raise hello.NotTls("the tunnel closed before a whole ClientHello")
        data += more
    return data


async def _send_body(
    reader: asyncio.StreamReader, parser: h11.Connection, out: asyncio.StreamWriter, chunked: bool, entry: RequestRecord
) -> None:
    while True:
        event = parser.next_event()
        if event is h11.NEED_DATA:
            data = await reader.read(CHUNK)
            if not data:
                raise asyncio.IncompleteReadError(b"", None)
            parser.receive_data(data)
            continue
        if isinstance(event, h11.Data):
            body = bytes(event.data)
            out.write(b"%x\r\n%s\r\n" % (len(body), body) if chunked else body)
            entry.sent += len(body)
            await out.drain()
        elif isinstance(event, h11.EndOfMessage):
            if chunked:
                out.write(b"0\r\n\r\n")
            await out.drain()
            return


async def _relay(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    upstream_reader: asyncio.StreamReader,
    upstream_writer: asyncio.StreamWriter,
    entry: RequestRecord,
) -> None:
    async def pump(source: asyncio.StreamReader, sink: asyncio.StreamWriter, field_name: str) -> None:
        try:
            while data := await source.read(CHUNK):
                sink.write(data)
                setattr(entry, field_name, getattr(entry, field_name) + len(data))
                await sink.drain()
        finally:
            with contextlib.suppress(Exception):
                if sink.can_write_eof():
                    sink.write_eof()

    await asyncio.gather(
        pump(reader, upstream_writer, "sent"), pump(upstream_reader, writer, "received"), return_exceptions=True
    )


async def _answer(writer: asyncio.StreamWriter, status: int, reason: str) -> None:
    line = f"harness egress proxy: {reason}\n".encode()
    title = {400: "Bad Request", 403: "Forbidden", 502: "Bad Gateway"}.get(status, "Error")
    head = (
        f"HTTP/1.1 {status} {title}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {len(line)}\r\n"
        f"X-Harness-Egress: refused\r\nConnection: close\r\n\r\n"
    ).encode()
    with contextlib.suppress(Exception):
        writer.write(head + line)
        await writer.drain()


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
