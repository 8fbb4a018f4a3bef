"""Runs inside a container whose engine is on another machine (sent there read-only, standard library
only, Python 3.8 or newer): the container's end of its egress, carried through the engine's API since
no socket of the controller's disk can be bound there. The host's end is `sandbox.docker.tunnel`.

    tunnel.py carry PORT    serves 127.0.0.1:PORT (as the relay does on a local engine) and carries
                            every connection it accepts over its own stdin and stdout, one exec's
                            stream through the engine, until its stdin closes.

It waits for the host's first byte before it says anything (the engine's reply to the exec's start
may carry the stream's first bytes, which the host's HTTP client would keep), then frames everything:
a kind byte, a 4-byte connection number, a 4-byte length, the payload:

    R  ready (once)                  N  a new connection (to the proxy, on the host's side)
    D  bytes of a connection         E  the end of a side's sending (a half-close)
    W  a window: so many more bytes of D may be sent on the connection
    C  a connection is over (either side: reset)

Each side may have at most WINDOW bytes of D in flight per connection, and gives the window back as
it delivers them, so a slow connection holds nobody else back and neither side ever holds more than
a window per connection; one thread carries everything (non-blocking sockets, one selector), so a
hundred connections cost a hundred sockets, not a hundred processes or threads of the call's pids and
memory. It makes itself non-dumpable first (as the call stub does), so the call's command, running as
the same user, cannot open its descriptors through /proc and speak for it. The proxy on the host
still decides everything; this is how bytes get there, not a boundary.
"""

from __future__ import annotations  # runs in the container's python, 3.8 or newer

import os
import selectors
import socket
import struct
import sys

PR_SET_DUMPABLE = 4
CHUNK = 65536
WINDOW = 256 * 1024
HEAD = struct.Struct(">cII")


def frame(kind, number, payload=b""):
    return HEAD.pack(kind, number, len(payload)) + payload


class Stream:
    def __init__(self, sock):
        self.sock = sock
        self.inbound = bytearray()  # from the host, for the connection
        self.credit = WINDOW  # bytes of D we may still send the host
        self.reading = True  # the connection may still send
        self.ending = False  # the host's side sends no more: shut ours once inbound is out


def _undumpable():
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError, ValueError):  # no libc, no prctl
        pass


def carry(port):
    _undumpable()
    if not os.read(0, 1):
        return 0  # the host went away before it spoke
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(512)
    listener.setblocking(False)
    os.set_blocking(0, False)
    os.set_blocking(1, False)
    streams = {}  # type: ignore[var-annotated]
    out = bytearray(frame(b"R", 0))
    got = bytearray()
    count = 0
    selector = selectors.DefaultSelector()
    while True:
        _watch(selector, listener, streams, out)
        for key, events in selector.select():
            what = key.data
            if what == "listener":
                try:
                    client, _ = listener.accept()
                except OSError:
                    continue
                client.setblocking(False)
                count += 1
                streams[count] = Stream(client)
                out += frame(b"N", count)
            elif what == "in":
                try:
                    data = os.read(0, CHUNK)
                except BlockingIOError:
                    continue
                if not data:
                    return 0  # the host is done: the call's connections end with the container
                got += data
                _take(got, streams, out)
            elif what == "out":
                try:
                    del out[: os.write(1, out)]
                except BlockingIOError:
                    pass
            else:
                _move(what, streams, out, events)


def _watch(selector, listener, streams, out):
    """What to wait for now: each socket for what it can do next."""
    wanted = {listener: (selectors.EVENT_READ, "listener"), 0: (selectors.EVENT_READ, "in")}
    if out:
        wanted[1] = (selectors.EVENT_WRITE, "out")
    for number, stream in streams.items():
        mask = (selectors.EVENT_READ if stream.reading and stream.credit > 0 else 0) | (
            selectors.EVENT_WRITE if stream.inbound else 0
        )
        if mask:
            wanted[stream.sock] = (mask, number)
    for key in list(selector.get_map().values()):
        if key.fileobj not in wanted:
            selector.unregister(key.fileobj)
    for fileobj, (mask, data) in wanted.items():
        try:
            key = selector.get_key(fileobj)
        except KeyError:
            selector.register(fileobj, mask, data)
            continue
        if key.events != mask or key.data != data:
            selector.modify(fileobj, mask, data)


def _move(number, streams, out, events):
    stream = streams.get(number)
    if stream is None:
        return
    try:
        if events & selectors.EVENT_READ and stream.reading and stream.credit > 0:
            data = stream.sock.recv(min(CHUNK, stream.credit))
            if data:
                stream.credit -= len(data)
                out += frame(b"D", number, data)
            else:
                stream.reading = False
                out += frame(b"E", number)
        if events & selectors.EVENT_WRITE and stream.inbound:
            sent = stream.sock.send(stream.inbound)
            del stream.inbound[:sent]
            out += frame(b"W", number, struct.pack(">I", sent))
            if not stream.inbound and stream.ending:
                stream.sock.shutdown(socket.SHUT_WR)
    except BlockingIOError:
        return
    except OSError:
        _close(number, streams)
        out += frame(b"C", number)
        return
    _settle(number, streams)


def _take(got, streams, out):
    """The whole frames the host sent, applied."""
    while len(got) >= HEAD.size:
        kind, number, size = HEAD.unpack_from(got)
        if len(got) < HEAD.size + size:
            return
        payload = bytes(got[HEAD.size : HEAD.size + size])
        del got[: HEAD.size + size]
        stream = streams.get(number)
        if stream is None:
            continue  # over already
        if kind == b"D":
            stream.inbound += payload[: max(0, WINDOW - len(stream.inbound))]
        elif kind == b"W" and len(payload) == 4:
            stream.credit = min(WINDOW, stream.credit + struct.unpack(">I", payload)[0])
        elif kind == b"E":
            stream.ending = True
            if not stream.inbound:
                try:
                    stream.sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
        elif kind == b"C":
            _close(number, streams)
            continue
        _settle(number, streams)


def _settle(number, streams):
    """A connection both sides have ended, all of it delivered, is closed."""
    stream = streams.get(number)
    if stream is not None and not stream.reading and stream.ending and not stream.inbound:
        _close(number, streams)


def _close(number, streams):
    stream = streams.pop(number, None)
    if stream is not None:
        try:
            stream.sock.close()
        except OSError:
            pass


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "carry":
        sys.exit(carry(int(sys.argv[2])))
    sys.stderr.write("usage: tunnel.py carry PORT\n")
    sys.exit(64)
