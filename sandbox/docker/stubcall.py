"""The host side of the call stub (`stub.py`): a pre-started container's attached stream, its hello,
one request down, framed output and the exit status back.

The stub runs as the container's first process, started by the pool before it is needed, so its own
start-up is off the critical path; a call is one write and the reads of its frames (a few ms,
against two engine round trips and runc's exec path for `docker exec`). The engine's multiplexed
stream carries the stub's stdout as stream 1; the stub's frames are parsed from it here.
"""

from __future__ import annotations

import base64
import contextlib
import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from docker.utils.socket import frames_iter

STUB_DIR = "/opt/harness-stub"
STUB_TARGET = f"{STUB_DIR}/stub.py"
STUB_ARGV = ["python3", "-I", "-S", "-B", STUB_TARGET]
"""-I: no environment, no user site, no cwd on sys.path (the cwd is the untrusted workspace);
-S: no site module; -B: no bytecode written (the mount is read-only)."""
HELLO = b"stub 1"
HELLO_TIMEOUT_S = 15.0
"""How long a pool start waits for the stub's hello (a cold interpreter on a loaded machine)."""


NODEV_TARGET = f"{STUB_DIR}/nodev.py"
NODEV_ARGV = ["python3", "-I", "-S", "-B", NODEV_TARGET]
"""Under gVisor, what a call by `docker exec` runs under: no device nodes (see nodev.py)."""


def nodev_source() -> Path:
    """nodev.py on the host (bound read-only into every gVisor container)."""
    return Path(__file__).with_name("nodev.py")


def stub_source() -> Path:
    """The stub on the host (bound read-only into every stub container)."""
    return Path(__file__).with_name("stub.py")


class StubLost(Exception):
    """The stream ended before the stub said how the command ended (the stub was killed)."""


class StubStream:
    """One attached stream to one stub."""

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self._frames = frames_iter(sock, tty=False)
        self._buffer = b""
        self.stderr = b""
        """What the stub itself wrote to its stderr (a traceback, if it crashed)."""

    @property
    def raw(self) -> Any:
        return getattr(self.sock, "_sock", self.sock)

    def hello(self) -> bool:
        """Wait for the stub's hello; False when it does not come (no python3, or no prctl)."""
        self.raw.settimeout(HELLO_TIMEOUT_S)
        try:
            kind, payload = next(self.messages())
        except (StopIteration, StubLost, OSError):
            return False
        return kind == b"H" and payload == HELLO

    def request(self, argv: list[str], stdin: bytes | None) -> None:
        body = json.dumps(
            {"argv": argv, "stdin": None if stdin is None else base64.b64encode(stdin).decode("ascii")}
        ).encode()
        self.raw.sendall(struct.pack(">I", len(body)) + body)

    def messages(self) -> Iterator[tuple[bytes, bytes]]:
        """The stub's frames as they arrive; StubLost if the stream ends inside or between them
        without the end frame having been read by the caller."""
        while True:
            while len(self._buffer) >= 5:
                size = struct.unpack(">I", self._buffer[1:5])[0]
                if len(self._buffer) < 5 + size:
                    break
                kind, payload = self._buffer[:1], self._buffer[5 : 5 + size]
                self._buffer = self._buffer[5 + size :]
                yield kind, payload
            try:
                stream, data = next(self._frames)
            except StopIteration:
                raise StubLost() from None
            if stream == 2:
                self.stderr = (self.stderr + data)[-4096:]
            else:
                self._buffer += data

    def close(self) -> None:
        """This process's end of the stream, now (no shutdown: a descriptor lent to another process
        keeps it open). The SDK's socket object alone would close only once its response, which
        refers back to it, is collected: until then the stub would wait on."""
        raw = self.raw  # (first: closing the SDK's object forgets its socket)
        with contextlib.suppress(OSError):
            self.sock.close()
        if raw is not None:
            with contextlib.suppress(OSError):
                raw.close()
