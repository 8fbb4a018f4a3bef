"""The answers of a secret's host, as the terminating proxy reads them (in process): decoded before
they are looked at, the value never left in any encoding the proxy can undo, whatever the reads'
sizes; keep-alive answers one after the other; a coding it cannot undo is not passed on."""

from __future__ import annotations

import base64
import gzip

import h11
import pytest

from sandbox.network.secrets import Secret
from sandbox.network.terminate import Answers, Unreadable, forms

VALUE = "tok-" + "a1B2c3D4e5F6g7H8" * 2
PLACEHOLDER = "plc-" + "Z9y8X7w6V5u4T3s2" * 2
SECRET = Secret(name="T", host="api.example.invalid", value=VALUE, placeholder=PLACEHOLDER)


def _through(raw: bytes, piece: int, methods: tuple[bytes, ...] = (b"GET",)) -> bytes:
    answers = Answers([SECRET])
    for method in methods:
        answers.expect(method)
    out = b"".join(answers.feed(raw[i : i + piece]) for i in range(0, len(raw), piece))
    return out + answers.feed(b"")


def _body(out: bytes) -> bytes:
    """The container's view: the answers parsed as its client would (chunked framing undone)."""
    client = h11.Connection(h11.CLIENT)
    client.send(h11.Request(method="GET", target="/", headers=[("Host", "x")]))
    client.send(h11.EndOfMessage())
    client.receive_data(out)
    body = b""
    while (event := client.next_event()) not in (h11.NEED_DATA, h11.PAUSED):
        if isinstance(event, h11.Data):
            body += bytes(event.data)
        if isinstance(event, h11.EndOfMessage):
            break
    return body


@pytest.mark.parametrize("piece", [1, 3, 7, 64, 100_000])
def test_no_encoding_brings_the_value_through_whatever_the_reads(piece: int) -> None:
    echo = f"you sent {VALUE}".encode()
    split = len(echo) - 10
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (
        split, echo[:split], len(echo) - split, echo[split:]
    )  # fmt: skip
    zipped = gzip.compress(echo)
    compressed = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s" % (len(zipped), zipped)
    encoded = base64.b64encode(b"xy" + echo)
    b64 = b"HTTP/1.1 200 OK\r\nX-Echo: %s\r\nContent-Length: %d\r\n\r\n%s" % (VALUE.encode(), len(encoded), encoded)
    for raw in (chunked, compressed):
        out = _through(raw, piece)
        assert VALUE.encode() not in out and _body(out) == f"you sent {PLACEHOLDER}".encode()
    out = _through(b64, piece)
    decoded = base64.b64decode(_body(out))
    assert VALUE.encode() not in out and decoded == b"xy" + f"you sent {PLACEHOLDER}".encode()
    assert f"X-Echo: {PLACEHOLDER}".encode() in out


def test_keep_alive_answers_a_head_and_an_undecodable_one() -> None:
    first = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(VALUE), VALUE.encode())
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 999\r\n\r\n"  # a HEAD's answer: no body whatever it says
    third = b"HTTP/1.1 204 No Content\r\n\r\n"
    out = _through(first + head + third, 5, methods=(b"GET", b"HEAD", b"GET"))
    assert VALUE.encode() not in out and out.count(b"HTTP/1.1 ") == 3 and PLACEHOLDER.encode() in out
    with pytest.raises(Unreadable, match="cannot undo"):
        _through(b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 3\r\n\r\nabc", 100)
    with pytest.raises(Unreadable):  # a switch of protocols: nothing past it could be read
        _through(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n", 100)


def test_every_form_keeps_its_length() -> None:
    pairs = forms(VALUE.encode(), PLACEHOLDER.encode())
    assert len(pairs) >= 6 and all(len(old) == len(new) for old, new in pairs)


def test_the_value_goes_only_with_requests_under_its_path_and_no_compression_is_asked() -> None:
    from dataclasses import replace

    from sandbox.network.terminate import Requests
    from sandbox.settings import parse_secret, secret_path

    bound = replace(SECRET, path=secret_path("T=TOKEN@api.example.invalid/v1/"))
    assert parse_secret("T=TOKEN@api.example.invalid/v1/") == ("T", "TOKEN", "api.example.invalid")
    requests = Requests([bound], Answers([bound]))
    asked = (
        f"GET /v1/items HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer {PLACEHOLDER}\r\nAccept-Encoding: gzip\r\n\r\n"
        f"GET /v2/items HTTP/1.1\r\nHost: api\r\nAuthorization: Bearer {PLACEHOLDER}\r\n\r\n"
    ).encode()
    sent = requests.feed(asked)
    first, second = sent.split(b"GET /v2/")
    assert f"Bearer {VALUE}".encode() in first and b"Accept-Encoding" not in first
    assert f"Bearer {PLACEHOLDER}".encode() in second and VALUE.encode() not in second


def _reflections():
    """The value reflected in base64 by its own host at every offset and length: after 0-5 bytes and
    before 0-5 bytes of its own, standard or URL-safe, padded or not, alone or glued to neighbours that
    are base64 characters themselves (`token=`, `&x=1`), in one read or in pieces."""
    for encoder in (base64.b64encode, base64.urlsafe_b64encode):
        for before in range(6):
            for after in range(6):
                for padded in (True, False):
                    data = bytes(range(200, 200 + before)) + VALUE.encode() + b"-=!?%"[:after]
                    encoded = encoder(data)
                    encoded = encoded if padded else encoded.rstrip(b"=")
                    for left, right in ((b"", b""), (b'{"echo": "', b'"}'), (b"token=", b"&x=1"), (b"Zz9", b"Qq")):
                        yield data, encoder, padded, left, right, encoded


def test_a_base64_reflection_carries_no_bit_of_the_value_at_any_offset_or_length() -> None:
    failures = []
    for data, encoder, padded, left, right, encoded in _reflections():
        body = left + encoded + right
        raw = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body)
        for piece in (len(raw), 5):
            out = _body(_through(raw, piece))
            assert len(out) == len(body)
            got = out[len(left) : len(left) + len(encoded)]
            decoder = base64.b64decode if encoder is base64.b64encode else base64.urlsafe_b64decode
            decoded = decoder(got + b"=" * (-len(got) % 4))
            wanted = data.replace(VALUE.encode(), PLACEHOLDER.encode())
            if decoded != wanted or out[: len(left)] != left or out[len(left) + len(encoded) :] != right:
                failures.append((len(data) - len(VALUE), encoder.__name__, padded, left, right, piece, got))
    assert not failures, f"{len(failures)} reflections leak bits of the value, e.g. {failures[:3]}"
