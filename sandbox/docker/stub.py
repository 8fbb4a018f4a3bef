"""The call stub: the first process of a pre-started single-use container (standard library only,
mounted read-only, Python 3.6+).

It makes itself non-dumpable (so a command running as the same user cannot open its descriptors
through /proc), says hello, then waits on its attached stdin for one request: a 4-byte big-endian
length and a JSON object {"argv": [...], "stdin": base64 or null}. It runs the command with pipes of
its own (the command never sees the control stream) and frames everything it sends back on its
stdout: one kind byte, a 4-byte big-endian length, the payload:

    H  hello (sent once at start)    A  the request arrived (before the command starts)
    O  a chunk of the command's stdout
    E  a chunk of its stderr         X  the end: JSON {"exit": code}

Because every byte of the command's output arrives inside a length-prefixed frame, nothing the
command prints can end the call, forge an exit code or inject output. When the command exits, what
is left in its pipes is drained for a short grace (daemonized children may keep them open; the host
kills the whole container after the call anyway). After the end it waits until the host closes the
stream: the container (its cgroup, what the host reads to tell an OOM kill) stays until the host has
read what it needs, and then ends by itself (an engine that removes it on exit needs no removal asked).
"""

import base64
import json
import os
import selectors
import signal
import struct
import subprocess
import sys
import threading
import time

GRACE_S = 0.3
CHUNK = 65536
PR_SET_DUMPABLE = 4


def _undumpable():
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError, ValueError):  # no libc, no prctl: not Linux as we know it
        return False


def _send(kind, payload):
    data = kind + struct.pack(">I", len(payload)) + payload
    view = memoryview(data)
    while view:
        written = os.write(1, view)
        view = view[written:]


def _read_exactly(count):
    data = bytearray()  # appended in place: a large stdin arrives in many reads
    while len(data) < count:
        chunk = os.read(0, min(count - len(data), 1 << 20))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def _feed(pipe, data):
    try:
        if data:
            pipe.write(data)
    except OSError:
        pass
    finally:
        try:
            pipe.close()
        except OSError:
            pass


def main():
    if not _undumpable():
        _send(b"H", b"stub 1 dumpable")  # the host falls back to exec for this container
        return 3
    _send(b"H", b"stub 1")
    header = _read_exactly(4)
    if header is None:
        return 0  # the host went away before any call
    request = json.loads(_read_exactly(struct.unpack(">I", header)[0]).decode("utf-8"))
    _send(b"A", b"")  # the request arrived: from here on, a lost stream means the stub was killed
    stdin = request.get("stdin")
    try:
        proc = subprocess.Popen(
            request["argv"],
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            close_fds=True,
            start_new_session=True,
        )
    except OSError as error:
        _send(b"E", "{}: {}\n".format(request["argv"][0], error.strerror).encode("utf-8", "replace"))
        _send(b"X", json.dumps({"exit": 127 if isinstance(error, FileNotFoundError) else 126}).encode())
        return 0
    if stdin is not None:
        threading.Thread(target=_feed, args=(proc.stdin, base64.b64decode(stdin)), daemon=True).start()
    selector = selectors.DefaultSelector()
    assert proc.stdout is not None and proc.stderr is not None
    selector.register(proc.stdout, selectors.EVENT_READ, b"O")
    selector.register(proc.stderr, selectors.EVENT_READ, b"E")
    open_pipes, ended_at = 2, None
    while open_pipes:
        if ended_at is None and proc.poll() is not None:
            ended_at = time.monotonic()
        wait = 0.05 if ended_at is None else max(0.0, GRACE_S - (time.monotonic() - ended_at))
        if ended_at is not None and wait == 0.0:
            break  # the command is over; whatever still holds its pipes is not
        for key, _ in selector.select(wait):
            data = os.read(key.fd, CHUNK)
            if data:
                _send(key.data, data)
            else:
                selector.unregister(key.fileobj)
                open_pipes -= 1
    code = proc.wait()
    if code < 0:
        code = 128 - code
    if ended_at is not None and open_pipes:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass
    _send(b"X", json.dumps({"exit": code}).encode())
    return 0


def _until_closed():
    try:
        while os.read(0, 1 << 16):
            pass
    except OSError:
        pass


if __name__ == "__main__":
    status = main()
    _until_closed()
    sys.exit(status)
