"""Pieces of one call that need no engine client: ending it from the host, stdin, rootfs diffs.

`CallWatch` ends a call from the host: it kills the container at the wall-clock deadline, on
request (output ceiling), or shortly after the command exits while daemonized children still hold
its output open — killing the container takes every process in it.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

ENGINE_ARTIFACTS = (
    "/sbin/docker-init",
    "/usr/sbin/docker-init",
    "/run/podman-init",
    "/run/.containerenv",
    "/etc/hosts",
    "/etc/hostname",
    "/etc/resolv.conf",
    "/etc/mtab",
)
"""Paths the engine itself puts into every container (Docker's init; Podman's init, its marker file,
its /etc/mtab link and the name files it writes into the root rather than binding them): not the
command's doing."""


def rootfs_changed(paths: list[str], keep_out: Sequence[str]) -> bool:
    """True when the command changed the root filesystem outside the workspace, mounts and /tmp."""
    under = lambda path, top: path == top or path.startswith(top.rstrip("/") + "/")  # noqa: E731
    # A directory listed as modified because something inside it changed is implied by that child.
    leaves = [p for p in paths if not any(other != p and under(other, p) for other in paths)]
    return any(not any(under(p, top) for top in (*keep_out, *ENGINE_ARTIFACTS)) for p in leaves)


def shut(sock: Any) -> None:
    """End both directions of an attach socket (wakes a reader blocked on it, unlike close)."""
    with contextlib.suppress(OSError):
        getattr(sock, "_sock", sock).shutdown(socket.SHUT_RDWR)


def read_ahead(sock: Any) -> bytes:
    """What the HTTP client read of a hijacked stream (an exec's start) past its response's head.

    The docker SDK hands over the raw socket under the response's buffered reader, so bytes that came
    in one read with the head stay in that buffer: over TCP, where a relay or the network joins the
    head and a quick command's whole output in one segment, the call would see no output at all. The
    buffer is taken without waiting: the socket is non-blocking while it is read."""
    reader = getattr(getattr(getattr(getattr(sock, "_response", None), "raw", None), "_fp", None), "fp", None)
    raw = getattr(sock, "_sock", sock)
    if reader is None or not hasattr(reader, "read1") or not hasattr(raw, "gettimeout"):
        return b""
    timeout = raw.gettimeout()
    try:
        raw.setblocking(False)
        return reader.read1(1 << 16) or b""
    except (BlockingIOError, ValueError):  # nothing there yet (or the reader was closed)
        return b""
    finally:
        with contextlib.suppress(OSError):
            raw.settimeout(timeout)


def frames(sock: Any, ahead: bytes = b"") -> Iterator[tuple[int, bytes]]:
    """(stream, data) of a multiplexed stream (an 8-byte head per frame: the stream's number, three
    zero bytes, the length), the bytes read ahead first; ends with the stream."""
    raw = getattr(sock, "_sock", sock)
    buffer = bytearray(ahead)

    def filled(size: int) -> bool:
        while len(buffer) < size:
            chunk = raw.recv(1 << 16)
            if not chunk:
                return False
            buffer.extend(chunk)
        return True

    while filled(8):
        stream, size = buffer[0], int.from_bytes(buffer[4:8], "big")
        if not filled(8 + size):
            if len(buffer) > 8:  # cut off midway: what came of it still counts
                yield stream, bytes(buffer[8:])
            return
        data = bytes(buffer[8 : 8 + size])
        del buffer[: 8 + size]
        yield stream, data


def exec_output(api: Any, exec_id: str) -> bytes:
    """What an exec said (stdout and stderr as they came) once it ended. The SDK's own
    `exec_start(stream=False)` reads from under the HTTP client's buffer too, and lost a quick
    command's output over TCP (see read_ahead); no timeout: the command's own bounds it."""
    sock = api.exec_start(exec_id, socket=True)
    raw = getattr(sock, "_sock", sock)
    try:
        ahead = read_ahead(sock)
        api._disable_socket_timeout(sock)
        return b"".join(data for _, data in frames(sock, ahead))
    finally:
        with contextlib.suppress(OSError):
            sock.close()
        with contextlib.suppress(OSError):
            raw.close()


def exit_code_of(api: Any, exec_id: str, wait_s: float = 5.0) -> int | None:
    """An ended exec's exit code. The engine may still say it runs, or give no code, a moment after
    its output ended (Podman under load): asked again until it gives one, for wait_s at most (None
    then)."""
    deadline = time.monotonic() + wait_s
    while True:
        inspected = api.exec_inspect(exec_id)
        code = inspected.get("ExitCode")
        if (not inspected.get("Running") and code is not None) or time.monotonic() > deadline:
            return code
        time.sleep(0.02)


def send_stdin(sock: Any, data: bytes) -> None:
    raw = getattr(sock, "_sock", sock)
    with contextlib.suppress(OSError):
        raw.sendall(data)
        raw.shutdown(socket.SHUT_WR)


class CallWatch:
    """Kills the container at the deadline, on `stop`, or GRACE_S after the command has exited; if
    the output stream is still open ABORT_AFTER_S after a kill, closes it from the host (`abort`),
    so no engine or runtime that keeps an exec stream open can hold a call past its deadline."""

    POLL_AFTER_S, POLL_EVERY_S, GRACE_S, ABORT_AFTER_S = 0.5, 0.25, 0.3, 2.0

    def __init__(
        self,
        kill: Callable[[], None],
        exited: Callable[[], bool],
        timeout_s: float,
        abort: Callable[[], None] = lambda: None,
    ) -> None:
        self._kill, self._exited, self._abort = kill, exited, abort
        self._deadline = time.monotonic() + timeout_s
        self._done = threading.Event()
        self.reason: str | None = None
        self._thread = threading.Thread(target=self._loop, daemon=True, name="harness-watch")
        self._thread.start()

    def stop(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        self._kill()
        self._done.set()

    def cut(self, reason: str) -> None:
        """End the call from another thread (its caller stopped it): the kill, then, if the stream
        outlives it by ABORT_AFTER_S, its close from the host, as at the deadline."""
        if self.reason is None:
            self.reason = reason
        self._end()

    def finish(self) -> None:
        self._done.set()
        self._thread.join()

    def _loop(self) -> None:
        next_poll = time.monotonic() + self.POLL_AFTER_S
        while not self._done.wait(max(0.0, min(self._deadline, next_poll) - time.monotonic())):
            now = time.monotonic()
            if now >= self._deadline:
                if self.reason is None:
                    self.reason = "timeout"
                self._end()
                return
            if now >= next_poll:
                next_poll = now + self.POLL_EVERY_S
                if self._exited():
                    if not self._done.wait(self.GRACE_S):
                        self._end()  # the command is over; its leftovers are not
                    return

    def _end(self) -> None:
        self._kill()
        if not self._done.wait(self.ABORT_AFTER_S):
            self._abort()  # the stream outlived the kill: stop reading it


def cgroup_oom_killed(cid: str) -> bool:
    """True when the kernel OOM-killed a process in the container's memory cgroup."""
    # Engine 20.10 on cgroup v1 sets State.OOMKilled only when pid 1 dies; an exec'd process killed
    # by the OOM killer shows only in the container cgroup's counter (cgroupfs or systemd driver, v1 or v2).
    candidates = (
        f"/sys/fs/cgroup/memory/docker/{cid}/memory.oom_control",
        f"/sys/fs/cgroup/memory/system.slice/docker-{cid}.scope/memory.oom_control",
        f"/sys/fs/cgroup/system.slice/docker-{cid}.scope/memory.events",
        f"/sys/fs/cgroup/docker/{cid}/memory.events",
        # Podman's (cgroupfs or systemd manager, v1 or v2)
        f"/sys/fs/cgroup/memory/libpod_parent/libpod-{cid}/memory.oom_control",
        f"/sys/fs/cgroup/memory/machine.slice/libpod-{cid}.scope/memory.oom_control",
        f"/sys/fs/cgroup/libpod_parent/libpod-{cid}/memory.events",
        f"/sys/fs/cgroup/machine.slice/libpod-{cid}.scope/memory.events",
    )
    for candidate in candidates:
        with contextlib.suppress(OSError, ValueError):
            for line in Path(candidate).read_text().splitlines():
                if line.startswith("oom_kill ") and int(line.split()[1]) > 0:
                    return True
    return False
    return False
