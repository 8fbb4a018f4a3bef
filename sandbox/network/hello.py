"""The server name a TLS ClientHello asks for (its SNI), read from the first bytes of a tunnel
without terminating TLS: what lets the proxy refuse a CONNECT to an allowed host whose TLS names
another (RFC 8446 4.1.2 and RFC 6066 3)."""

from __future__ import annotations

import struct

MAX_HELLO = 1 << 16
"""The most bytes read while waiting for a whole ClientHello."""


class NotTls(ValueError):
    """The bytes are not a TLS handshake starting with a ClientHello."""


def needed(data: bytes) -> int:
    """How many bytes a ClientHello starting data needs in all (0 when data already holds it)."""
    if len(data) < 5:
        return 5
    if data[0] != 0x16:
        raise NotTls("the tunnel's first bytes are not a TLS handshake")
    handshake, offset = b"", 0
    while offset + 5 <= len(data):
        if data[offset] != 0x16:
            raise NotTls("a ClientHello interrupted by another record")
        (length,) = struct.unpack_from("!H", data, offset + 3)
        if offset + 5 + length > len(data):
            return offset + 5 + length
        handshake += data[offset + 5 : offset + 5 + length]
        offset += 5 + length
        if len(handshake) >= 4:
            if handshake[0] != 0x01:
                raise NotTls("the first handshake message is not a ClientHello")
            total = 4 + int.from_bytes(handshake[1:4], "big")
            if len(handshake) >= total:
                return 0
    return offset + 5


def server_name(data: bytes) -> str | None:
    """The host name a complete ClientHello (as `needed` says) asks for, lower case, or None."""
    handshake, offset = b"", 0
    while offset + 5 <= len(data):
        (length,) = struct.unpack_from("!H", data, offset + 3)
        handshake += data[offset + 5 : offset + 5 + length]
        offset += 5 + length
    try:
        return _sni(memoryview(handshake)[4:])
    except (IndexError, struct.error, UnicodeDecodeError) as error:
        raise NotTls(f"a malformed ClientHello ({type(error).__name__})") from None


def _sni(body: memoryview) -> str | None:
    at = 2 + 32  # client version, random
    at += 1 + body[at]  # session id
    (suites,) = struct.unpack_from("!H", body, at)
    at += 2 + suites
    at += 1 + body[at]  # compression methods
    if at >= len(body):
        return None  # no extensions at all
    (extensions,) = struct.unpack_from("!H", body, at)
    at += 2
    end = at + extensions
    while at + 4 <= end:
        kind, size = struct.unpack_from("!HH", body, at)
        at += 4
        if kind == 0:  # server_name: a list of (type, name); type 0 is a host name
            (listed,) = struct.unpack_from("!H", body, at)
            item, stop = at + 2, at + 2 + listed
            while item + 3 <= stop:
                name_type, name_length = body[item], struct.unpack_from("!H", body, item + 1)[0]
                if name_type == 0:
                    return bytes(body[item + 3 : item + 3 + name_length]).decode("ascii").lower().rstrip(".")
                item += 3 + name_length
            return None
        at += size
    return None
