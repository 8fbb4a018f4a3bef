"""A tunnel to a secret's host, terminated: TLS with the container (a certificate of the session CA)
and TLS with the host (checked as any client would), HTTP/1.1 both ways read with h11.

Requests: a placeholder in a header value becomes the real value (only for targets under the
secret's path, when it names one); `Accept-Encoding` is dropped, so the host has no reason to
compress. Answers: each is decoded before it is looked at (chunked transfer coding, then gzip or
deflate content coding; any other coding is not passed on at all) and the value is turned back into
the placeholder, as written and in the encodings a client could undo without knowing the value
(base64 and base64url at each alignment, hex, percent-encoding), in headers and body, across every
chunk and read boundary. The body goes on to the container re-framed as chunked, uncompressed.

What is not promised: an encoding of the value the proxy cannot know (encrypted, hashed, split by
the host's own scheme and put back together by a program in the container). docs/security.md says so.
One thread moves both directions (an SSL object is not for two threads at once)."""

from __future__ import annotations

import base64
import re
import select
import socket
import ssl
import urllib.parse
import zlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import h11

from sandbox.network.secrets import Secret, Swap

IDLE_TIMEOUT_S = 300.0
DECODED_PIECE = 1 << 20
"""A compressed answer is inflated at most this much at a time (a small bomb stays small in memory)."""


class Unreadable(Exception):
    """An answer the proxy cannot decode: it is not passed on (the value could be inside)."""


class Requests:
    """The container's side of the stream in, the host's side out: each request's head rewritten,
    bodies passed on as they are; each request is told to `answers` (which parses the replies)."""

    def __init__(self, secrets: Sequence[Secret], answers: Answers) -> None:
        self.secrets, self.answers = list(secrets), answers
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
                self.answers.expect(event.method)
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
        target = request.target.decode("ascii", "replace")
        for name, value in request.headers.raw_items():
            if name.lower() in (b"accept-encoding", b"te"):
                continue  # the answer comes uncompressed: nothing to undo before it is read
            for secret in self.secrets:
                if secret.placeholder.encode() in value and target.startswith(secret.path or ""):
                    value = value.replace(secret.placeholder.encode(), secret.value.encode())
                    self.swapped += 1
            self.chunked = self.chunked or (name.lower() == b"transfer-encoding" and b"chunked" in value.lower())
            lines.append(name + b": " + value + b"\r\n")
        return b"".join(lines) + b"\r\n"


class Answers:
    """The host's answers, decoded, looked at and re-framed for the container."""

    def __init__(self, secrets: Sequence[Secret]) -> None:
        self.pairs = [pair for secret in secrets for pair in forms(secret.value.encode(), secret.placeholder.encode())]
        self.plain = [p for s in secrets for p in plain_forms(s.value.encode(), s.placeholder.encode())]
        self.parser = h11.Connection(h11.CLIENT)
        self.methods: deque[bytes] = deque()
        """Requests sent whose answers have not begun."""
        self.method = b"GET"
        self.swaps: list[Swap] = []
        self.runs = Runs(self.plain)
        self.decoders: list[Inflate] = []
        self.body = False

    def expect(self, method: bytes) -> None:
        """A request went out: its answer comes after the ones before it (HEAD's has no body)."""
        self.methods.append(method)
        self._arm()

    def _arm(self) -> None:
        """Tell the parser the next request (it reads an answer only to a request it sent; the method
        decides whether the answer has a body)."""
        if self.parser.our_state is h11.IDLE and self.methods:
            self.method = self.methods.popleft()
            self.parser.send(h11.Request(method=self.method, target="/", headers=[("Host", "harness")]))
            self.parser.send(h11.EndOfMessage())

    def feed(self, data: bytes) -> bytes:
        """What may go to the container now (data b"": the host closed)."""
        try:
            self.parser.receive_data(data)
            return self._events()
        except h11.ProtocolError as error:
            raise Unreadable(f"the answer is not HTTP/1.1 the proxy can read: {error}") from None

    def _events(self) -> bytes:
        out = bytearray()
        while True:
            event = self.parser.next_event()
            if event is h11.NEED_DATA or event is h11.PAUSED or isinstance(event, h11.ConnectionClosed):
                return bytes(out)
            if isinstance(event, h11.InformationalResponse):
                if event.status_code == 101:
                    raise Unreadable("the host switched protocols: nothing past the switch can be read")
                out += self._head(event, body=False)
            elif isinstance(event, h11.Response):
                body = self.method != b"HEAD" and event.status_code not in (204, 304)
                out += self._head(event, body=body)
            elif isinstance(event, h11.Data):
                out += self._chunk(self._decoded(bytes(event.data)))
            elif isinstance(event, h11.EndOfMessage):
                tail = b"".join(decoder.end() for decoder in self.decoders)
                out += self._chunk(self._swapped(tail, end=True))
                if self.body:
                    out += b"0\r\n\r\n"
                self.body = False
                if self.parser.our_state is h11.DONE and self.parser.their_state is h11.DONE:
                    self.parser.start_next_cycle()  # keep-alive: the next answer, in the same parser
                    self._arm()

    def _head(self, response: h11.InformationalResponse | h11.Response, *, body: bool) -> bytes:
        codings: list[str] = []
        lines = [b"HTTP/1.1 %d %s\r\n" % (response.status_code, response.reason or b"")]
        for name, value in response.headers.raw_items():
            lowered = name.lower()
            if lowered == b"content-encoding":
                codings += [c.strip() for c in value.decode("ascii", "replace").lower().split(",") if c.strip()]
                continue
            if lowered in (b"content-length", b"transfer-encoding") and body:
                continue
            lines.append(name + b": " + _swap_once(self.runs.fixed(value), self.pairs) + b"\r\n")
        unknown = [c for c in codings if c not in ("identity", "gzip", "x-gzip", "deflate")]
        if unknown:
            raise Unreadable(f"the answer is in a content coding the proxy cannot undo ({', '.join(unknown)})")
        self.decoders = [Inflate(coding) for coding in reversed(codings) if coding != "identity"]
        self.swaps = [Swap(old, new) for old, new in self.pairs]
        self.runs = Runs(self.plain)
        self.body = body
        if body:
            lines.append(b"Transfer-Encoding: chunked\r\n")
        return b"".join(lines) + b"\r\n"

    def _decoded(self, data: bytes) -> bytes:
        for decoder in self.decoders:
            data = decoder.feed(data)
        return self._swapped(data)

    def _swapped(self, data: bytes, end: bool = False) -> bytes:
        data = self.runs.feed(data) + (self.runs.end() if end else b"")  # whole base64 runs first
        for swap in self.swaps:  # at the end, each one's held tail goes through the ones after it
            data = swap.feed(data) + (swap.end() if end else b"")
        return data

    def _chunk(self, data: bytes) -> bytes:
        if not data or not self.body:
            return b""
        return b"%x\r\n%s\r\n" % (len(data), data)


class Inflate:
    """One content coding undone as the body streams (gzip, several members too; deflate with or
    without its zlib header)."""

    def __init__(self, coding: str) -> None:
        self.coding = coding
        self.inflater = zlib.decompressobj(31 if coding in ("gzip", "x-gzip") else 15)
        self.raw = False

    def feed(self, data: bytes) -> bytes:
        out = bytearray()
        while data:
            try:
                piece = self.inflater.decompress(data, DECODED_PIECE)
            except zlib.error as error:
                if self.coding == "deflate" and not self.raw and not out:
                    self.inflater, self.raw = zlib.decompressobj(-15), True  # deflate sent without its header
                    continue
                raise Unreadable(f"the answer's {self.coding} body does not decode: {error}") from None
            out += piece
            data = self.inflater.unconsumed_tail
            if self.inflater.eof and self.inflater.unused_data:  # another gzip member
                data = self.inflater.unused_data
                self.inflater = zlib.decompressobj(31 if self.coding != "deflate" else 15)
        return bytes(out)

    def end(self) -> bytes:
        return self.inflater.flush()


def plain_forms(value: bytes, placeholder: bytes) -> list[tuple[bytes, bytes]]:
    """(the value, the placeholder) as written, in hex (both cases) and percent-encoded: each pair
    keeps its length."""
    found = [(value, placeholder), (value.hex().encode(), placeholder.hex().encode())]
    found += [(value.hex().upper().encode(), placeholder.hex().upper().encode())]
    quoted = urllib.parse.quote(value, safe="").encode()
    if quoted != value:
        found.append((quoted, urllib.parse.quote(placeholder, safe="").encode()))
    return [(old, new) for old, new in dict.fromkeys(found) if len(old) == len(new) and old]


def forms(value: bytes, placeholder: bytes) -> list[tuple[bytes, bytes]]:
    """(how the value may appear, the placeholder the same way) for every encoding a client in the
    container could undo without knowing the value: the plain forms, and base64 and base64url of each
    at each of the three alignments (the characters only the value decides; `Runs` mends the
    characters at each end). Each pair keeps its length."""
    found = plain_forms(value, placeholder)
    for anchor in anchors(found):
        found.append((anchor.old, anchor.new))
    return list(dict.fromkeys(found))


_RUN = re.compile(rb"[A-Za-z0-9+/_=-]+")
RUN_HOLD = 1 << 16
"""Base64-alphabet bytes held back at a piece's end (a run may go on in the next piece); a longer run
is let go as it is (its middle is still covered by `forms`)."""
_ALPHABETS = ((b"+/", frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")),
              (b"-_", frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")))  # fmt: skip


@dataclass(frozen=True)
class Anchor:
    """One plain form's base64 in one alphabet at one alignment: `old` is what only the form decides
    (whole quanta), `lead` and `tail` how many of the form's bytes share the quantum before and after
    it with bytes of the host's own."""

    old: bytes
    new: bytes
    value: bytes
    placeholder: bytes
    altchars: bytes
    alphabet: frozenset[int]
    lead: int
    tail: int


def anchors(plain: Sequence[tuple[bytes, bytes]]) -> list[Anchor]:
    """Every base64 anchor of the plain forms (8 characters at least: shorter ones would match by chance)."""
    found = []
    for value, placeholder in plain:
        for altchars, alphabet in _ALPHABETS:
            for shift in range(3):
                old, new = (
                    _core(base64.b64encode(b"\0" * shift + text, altchars=altchars), shift, len(text))
                    for text in (value, placeholder)
                )
                if len(old) >= 8:
                    lead, tail = (3 - shift) % 3, (shift + len(value)) % 3
                    found.append(Anchor(old, new, value, placeholder, altchars, alphabet, lead, tail))
    return found


class Runs:
    """Every run of base64-alphabet characters searched for each form's base64 core (standard and
    URL-safe, at each alignment); where one is found it becomes the placeholder's, and the quanta at
    its two ends, which hold some of the form's bits beside bits of the host's own, are decoded,
    given the placeholder's bytes and encoded again: no character of the run carries a bit of the
    value, whatever its offset and length, padded or not, glued to its neighbours or not."""

    def __init__(self, plain: Sequence[tuple[bytes, bytes]]) -> None:
        self.anchors = anchors(plain)
        self.held = b""

    def feed(self, data: bytes) -> bytes:
        data = self.held + data
        cut = len(data)
        while cut and _RUN.fullmatch(data[cut - 1 : cut]):
            cut -= 1
        if len(data) - cut > RUN_HOLD:
            cut = len(data)
        self.held = data[cut:]
        return self.fixed(data[:cut])

    def end(self) -> bytes:
        held, self.held = self.held, b""
        return self.fixed(held)

    def fixed(self, text: bytes) -> bytes:
        return _RUN.sub(lambda found: self._run(found.group()), text) if self.anchors else text

    def _run(self, run: bytes) -> bytes:
        mended = bytearray(run)
        for anchor in self.anchors:
            start = 0
            while (at := mended.find(anchor.old, start)) != -1:
                end = at + len(anchor.old)
                mended[at:end] = anchor.new
                if anchor.lead:
                    _mend(mended, max(at - 4, 0), at, anchor, leading=True)
                if anchor.tail:
                    _mend(mended, end, min(end + 4, len(mended)), anchor, leading=False)
                start = end
        return bytes(mended)


def _mend(run: bytearray, start: int, end: int, anchor: Anchor, *, leading: bool) -> None:
    """The quantum run[start:end] (cut short at the run's start or end, or by padding) with the value's
    bytes in it replaced by the placeholder's."""
    part = bytes(run[start:end])
    if not leading:
        part = part.split(b"=", 1)[0]
    if not part or any(byte not in anchor.alphabet for byte in part):
        return  # not one encoding with the core: no bit of the value is here
    missing = b"A" * (4 - len(part))
    quantum = bytearray(base64.b64decode(missing + part if leading else part + missing, altchars=anchor.altchars))
    if leading:
        quantum[3 - anchor.lead :] = anchor.placeholder[: anchor.lead]
    else:
        quantum[: anchor.tail] = anchor.placeholder[len(anchor.placeholder) - anchor.tail :]
    again = base64.b64encode(bytes(quantum), altchars=anchor.altchars)
    run[start : start + len(part)] = again[4 - len(part) :] if leading else again[: len(part)]


def _core(encoded: bytes, shift: int, length: int) -> bytes:
    """The base64 characters of `shift` unknown bytes then the text that the text alone decides."""
    start = 4 if shift else 0
    end = ((shift + length) // 3) * 4
    return encoded[start:end]


def _swap_once(value: bytes, pairs: Sequence[tuple[bytes, bytes]]) -> bytes:
    for old, new in pairs:
        value = value.replace(old, new)
    return value


def carry(client: ssl.SSLSocket, upstream: ssl.SSLSocket, secrets: Sequence[Secret]) -> tuple[int, int, int]:
    """Both directions until both are done; (bytes sent, bytes received, placeholders swapped).

    Reads are non-blocking and tried before every wait: a handshake may already have pulled the first
    request's record into the SSL object, where no select would see it. An answer that cannot be read
    ends the tunnel with a 502 to the container (or, mid-answer, a cut): never passed on unread."""
    answers = Answers(secrets)
    requests = Requests(secrets, answers)
    sent = received = 0
    open_ends = [client, upstream]
    for end in open_ends:
        end.setblocking(False)
    try:
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
                out = answers.feed(data)
                _send(client, out)
                received += len(out)
                if not data:
                    open_ends.remove(upstream)
                    _shut(client)
                    if client in open_ends:
                        open_ends.remove(client)
            if not moved and not select.select(open_ends, [], [], IDLE_TIMEOUT_S)[0]:
                break  # idle past the bound
    except Unreadable as why:
        if received == 0:
            said = f"the egress proxy did not pass on the answer of a secret's host: {why}\n".encode()
            head = b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nConnection: close\r\n"
            _send(client, head + b"Content-Length: %d\r\n\r\n" % len(said) + said)
        raise
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
