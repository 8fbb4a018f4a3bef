"""Runs inside a container that may use the network through its session's egress proxy (mounted
read-only, standard library only): serves 127.0.0.1:PORT and carries each connection to the proxy's
Unix socket, unchanged. The container has no other way out (no route, no resolver), so this is a
convenience for HTTP(S)_PROXY, not a boundary: the proxy decides. It returns once it listens (the
container's command starts after it), and serves on in the background.

One thread carries every connection (non-blocking sockets, one selector): a package manager opens
two hundred connections at once, and a container's pids limit counts threads; a relay that spent a
thread per connection ran out of them, refused connections and stalled installs for minutes."""

from __future__ import annotations  # runs in the container's python, 3.8 or newer

import collections
import os
import selectors
import socket
import sys
import time

CHUNK = 1 << 20
HIGH_WATER = 4 << 20
"""Bytes held for a slow receiver before the other side stops being read."""


class Queue:
    """Bytes waiting for one socket, as the chunks they came in (nothing is copied to send them)."""

    def __init__(self):
        self.chunks = collections.deque()  # type: ignore[var-annotated]
        self.size = 0

    def __bool__(self):
        return self.size > 0

    def room(self):
        """Whether the queue takes more (a slow receiver stops its sender being read)."""
        return self.size < HIGH_WATER

    def fill_from(self, sock):
        """Read what sock has into the queue: bytes moved, 0 at its end, None when it had nothing."""
        try:
            data = sock.recv(CHUNK)
        except (BlockingIOError, InterruptedError):
            return None
        if data:
            self.chunks.append(memoryview(data))
            self.size += len(data)
        return len(data)

    def drain_to(self, sock):
        """Write what the socket takes now (BlockingIOError-free; OSError: the receiver is gone)."""
        try:
            count = sock.send(self.chunks[0])
        except (BlockingIOError, InterruptedError):
            return 0
        self.size -= count
        if count == len(self.chunks[0]):
            self.chunks.popleft()
        elif count:
            self.chunks[0] = self.chunks[0][count:]
        return count

    def close(self):
        pass


class Piped(Queue):
    """The same through a pipe, moved by the kernel (splice: no copy through this process)."""

    def __init__(self):
        super().__init__()
        self.read_end, self.write_end = os.pipe()
        self.capacity = 1 << 16
        try:
            import fcntl

            fcntl.fcntl(self.write_end, 1031, CHUNK)  # F_SETPIPE_SZ: bigger moves per call
            self.capacity = fcntl.fcntl(self.write_end, 1032)  # F_GETPIPE_SZ: what it holds
        except OSError:
            pass

    def room(self):
        return self.size < self.capacity  # a full pipe takes nothing: reading on would only spin

    def fill_from(self, sock):
        try:
            moved = os.splice(sock.fileno(), self.write_end, CHUNK, flags=os.SPLICE_F_NONBLOCK)
        except (BlockingIOError, InterruptedError):
            return None
        self.size += moved
        return moved

    def drain_to(self, sock):
        try:
            moved = os.splice(self.read_end, sock.fileno(), self.size, flags=os.SPLICE_F_NONBLOCK)
        except (BlockingIOError, InterruptedError):
            return 0
        self.size -= moved
        return moved

    def close(self):
        for end in (self.read_end, self.write_end):
            try:
                os.close(end)
            except OSError:
                pass


def _queue():
    """A pipe when the kernel and this Python can splice (and a descriptor is left), else a queue."""
    if hasattr(os, "splice"):
        try:
            return Piped()
        except OSError:
            pass
    return Queue()


class Pair:
    """A client connection and its connection to the proxy: what waits to be written to each."""

    def __init__(self, client, upstream):
        self.peer = {client: upstream, upstream: client}
        self.pending = {client: _queue(), upstream: _queue()}
        self.reading = {client: True, upstream: True}
        self.closed = False

    def interest(self, sock):
        wanted = selectors.EVENT_READ if self.reading[sock] and self.pending[self.peer[sock]].room() else 0
        return wanted | (selectors.EVENT_WRITE if self.pending[sock] else 0)

    def done(self):
        return not any(self.reading.values()) and not any(self.pending.values())


def serve(listener, path):
    """Accept and carry until the process ends; nothing that happens to one connection stops it."""
    selector = selectors.DefaultSelector()
    listener.setblocking(False)
    selector.register(listener, selectors.EVENT_READ, None)
    while True:
        for key, events in selector.select():
            if key.data is None:
                _accept(listener, path, selector)
                continue
            pair = key.data
            if pair.closed:
                continue
            try:
                _move(pair, key.fileobj, events)
                _settle(pair, selector)
            except Exception:  # noqa: BLE001 - one connection's trouble ends that connection, never the relay
                pair.reading = dict.fromkeys(pair.reading, False)
                for queue in pair.pending.values():
                    queue.size = 0
                _settle(pair, selector)


def _accept(listener, path, selector):
    try:
        client, _ = listener.accept()
    except (BlockingIOError, InterruptedError):
        return
    except OSError:  # out of descriptors: let connections end first
        time.sleep(0.05)
        return
    try:
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            upstream.connect(path)
        except OSError:
            upstream.close()
            raise
    except OSError:
        client.close()
        return
    client.setblocking(False)
    upstream.setblocking(False)
    pair = Pair(client, upstream)
    for sock in (client, upstream):
        selector.register(sock, selectors.EVENT_READ, pair)


def _move(pair, sock, events):
    if events & selectors.EVENT_READ and pair.reading[sock]:
        try:
            moved = pair.pending[pair.peer[sock]].fill_from(sock)
        except OSError:
            moved = 0
        if moved == 0:
            pair.reading[sock] = False
            if not pair.pending[pair.peer[sock]]:
                _close_write(pair.peer[sock])
    if events & selectors.EVENT_WRITE and pair.pending[sock]:
        try:
            pair.pending[sock].drain_to(sock)
        except OSError:  # the receiver is gone: nothing more to carry either way
            pair.reading = dict.fromkeys(pair.reading, False)
            for queue in pair.pending.values():
                queue.size = 0
            return
        if not pair.pending[sock] and not pair.reading[pair.peer[sock]]:
            _close_write(sock)


def _settle(pair, selector):
    """Each socket watched for what it can do next; both closed once nothing is left to carry."""
    if pair.done():
        pair.closed = True
        for sock in pair.peer:
            if sock in selector.get_map():
                selector.unregister(sock)
            sock.close()
            pair.pending[sock].close()
        return
    for sock in pair.peer:
        wanted = pair.interest(sock)
        registered = sock in selector.get_map()
        if wanted and registered:
            selector.modify(sock, wanted, pair)
        elif wanted:
            selector.register(sock, wanted, pair)
        elif registered:
            selector.unregister(sock)


def _close_write(sock):
    try:
        sock.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def main(port, path):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(512)
    if os.fork() > 0:  # the parent returns: the port is served from here on
        os._exit(0)
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    serve(listener, path)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
