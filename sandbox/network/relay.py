"""Runs inside a container that may use the network through its session's egress proxy (mounted
read-only, standard library only): serves 127.0.0.1:PORT and carries each connection to the proxy's
Unix socket, unchanged. The container has no other way out (no route, no resolver), so this is a
convenience for HTTP(S)_PROXY, not a boundary: the proxy decides. It returns once it listens (the
container's command starts after it), and serves on in the background."""

from __future__ import annotations  # runs in the container's python, 3.8 or newer

import os
import socket
import sys
import threading

CHUNK = 1 << 20


def pump(source, sink):
    try:
        if hasattr(os, "splice"):
            _splice(source, sink)
        else:
            while True:
                data = source.recv(CHUNK)
                if not data:
                    break
                sink.sendall(data)
    except OSError:
        pass
    finally:
        try:
            sink.shutdown(socket.SHUT_WR)
        except OSError:
            pass


def _splice(source, sink):
    """source to sink through a pipe, in the kernel (no copy through this process)."""
    read_end, write_end = os.pipe()
    try:
        try:
            import fcntl

            fcntl.fcntl(write_end, 1031, CHUNK)  # F_SETPIPE_SZ: bigger moves per call
        except OSError:
            pass
        while True:
            moved = os.splice(source.fileno(), write_end, CHUNK)
            if moved == 0:
                return
            while moved:
                moved -= os.splice(read_end, sink.fileno(), moved)
    finally:
        os.close(read_end)
        os.close(write_end)


def carry(client, path):
    try:
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        upstream.connect(path)
    except OSError:
        client.close()
        return
    back = threading.Thread(target=pump, args=(upstream, client), daemon=True)
    back.start()
    pump(client, upstream)
    back.join()
    client.close()
    upstream.close()


def main(port, path):
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(128)
    if os.fork() > 0:  # the parent returns: the port is served from here on
        os._exit(0)
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    while True:
        client, _ = listener.accept()
        client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        threading.Thread(target=carry, args=(client, path), daemon=True).start()


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
