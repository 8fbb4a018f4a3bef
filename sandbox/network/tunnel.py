"""Runs inside a container whose engine is on another machine (sent there read-only, standard library
only, Python 3.8 or newer): the container's end of its egress, carried through the engine's API since
no socket of the controller's disk can be bound there. The host's end is `sandbox.docker.tunnel`.

    tunnel.py accept PORT   serves 127.0.0.1:PORT (as the relay does on a local engine); says `ready`
                            on stdout once it listens, then the number of each connection it accepts,
                            one per line; hands a connection over to the `join` that asks for it (by
                            its number, through an abstract Unix socket of the container's own network
                            namespace); ends when its stdin closes (the host is done with the call).
    tunnel.py join N        takes connection N and carries it: what the connection sends goes out on
                            stdout, stdin goes into the connection; the connection's end of sending is
                            one byte on stderr (the engine keeps the two streams apart, so no byte of
                            the data can fake it), the end of stdin ends its sending.

Each waits for the host's first byte on stdin before it says anything: a reply to the host's request
for the stream may carry the stream's first bytes with it, and the host's HTTP client would keep
them (so the host speaks first, once it has read that reply, and nothing can be lost there).

Each connection is its own `join` (its own exec, its own stream through the engine): a slow one
holds back nobody else, and each is paced by its stream as a socket is. The proxy on the host still
decides everything; this is how bytes get there, not a boundary. Both make themselves non-dumpable
first (as the call stub does), so the call's command, running as the same user, cannot open their
descriptors through /proc and speak for them.
"""

from __future__ import annotations  # runs in the container's python, 3.8 or newer

import array
import os
import selectors
import socket
import sys
import threading

PR_SET_DUMPABLE = 4
HANDOFF = "\0harness-egress-tunnel"
"""The abstract socket `accept` hands connections over on (the container's network namespace only)."""
CHUNK = 65536


def _undumpable():
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError, ValueError):  # no libc, no prctl: the host's caps still hold
        pass


def accept(port):
    _undumpable()
    if not os.read(0, 1):
        return 0  # the host went away before it spoke
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(512)
    handoff = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    handoff.bind(HANDOFF)
    handoff.listen(512)
    waiting = {}
    count = 0
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ, "connection")
    selector.register(handoff, selectors.EVENT_READ, "join")
    selector.register(sys.stdin.buffer, selectors.EVENT_READ, "host")
    _say(b"ready\n")
    while True:
        for key, _ in selector.select():
            if key.data == "host":
                if not os.read(0, CHUNK):
                    return 0  # the host is done: the call's connections end with the container
            elif key.data == "connection":
                try:
                    client, _ = listener.accept()
                except OSError:
                    continue
                count += 1
                waiting[count] = client
                _say(b"%d\n" % count)
            else:
                _hand_over(handoff, waiting)


def _hand_over(handoff, waiting):
    try:
        joiner, _ = handoff.accept()
    except OSError:
        return
    try:
        joiner.settimeout(10)
        asked = joiner.recv(32).strip()
        client = waiting.pop(int(asked), None) if asked.isdigit() else None
        if client is not None:
            joiner.sendmsg([b"+"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [client.fileno()]))])
            client.close()
    except (OSError, ValueError):
        pass
    finally:
        joiner.close()


def join(number):
    _undumpable()
    if not os.read(0, 1):
        return 0
    handoff = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    handoff.connect(HANDOFF)
    handoff.sendall(b"%d\n" % number)
    fds = array.array("i")
    _, ancillary, _, _ = handoff.recvmsg(1, socket.CMSG_LEN(fds.itemsize))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    handoff.close()
    if not fds:
        return 1
    client = socket.socket(fileno=fds[0])
    inward = threading.Thread(target=_inward, args=(client,), daemon=True)
    inward.start()
    try:
        while True:
            data = client.recv(CHUNK)
            if not data:
                break
            _write(1, data)
    except OSError:
        pass
    _write(2, b".")  # the connection sends no more
    inward.join()
    client.close()
    return 0


def _inward(client):
    """stdin into the connection; the end of stdin is the end of its receiving."""
    try:
        while True:
            data = os.read(0, CHUNK)
            if not data:
                break
            client.sendall(data)
    except OSError:
        pass
    try:
        client.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def _say(line):
    _write(1, line)


def _write(fd, data):
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "accept":
        sys.exit(accept(int(sys.argv[2])))
    if len(sys.argv) == 3 and sys.argv[1] == "join":
        sys.exit(join(int(sys.argv[2])))
    sys.stderr.write("usage: tunnel.py accept PORT | join N\n")
    sys.exit(64)
