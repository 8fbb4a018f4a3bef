"""A program harness starts on this machine (a user's hook), bounded in what it may hold and take.

Its deadline covers every process it starts: the program gets a process group of its own and a
marker in its environment; at the deadline, and whenever it ends, its group is killed and so is any
process that still carries the marker (one that left the group with `setsid`, a daemon). Its pipes
are read in pieces as they come, never whole: the first `cap` bytes of each are kept, the rest
counted and dropped, so a program printing a gigabyte costs the controller a few pieces of memory.
When the program itself has ended, what it left holding its pipes gets a short grace to let go,
then is ended: nothing it leaves behind can hold the caller past its deadline plus that grace.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import selectors
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

PIECE = 64 * 1024
GRACE_S = 0.5
"""How long pipes held open by what an ended program left behind are still read."""
MARKER = "HARNESS_PROCESS_MARK"
"""The environment variable that tells a started program's processes (and its daemons) from others."""


@dataclass(frozen=True)
class Finished:
    """How a bounded program ended."""

    returncode: int | None
    """Its exit status (negative: the signal that ended it); None when its deadline ended it."""
    stdout: bytes
    stderr: bytes
    dropped: int
    """Bytes of its output read past the cap and not kept (both streams)."""
    ended_left: int
    """Processes it left behind (its group's, or detached ones carrying its marker), killed at the end."""

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


def run_bounded(
    argv: Sequence[str],
    *,
    stdin: bytes,
    timeout_s: float,
    cap: int,
    env: Mapping[str, str],
    cwd: Path | None = None,
) -> Finished:
    """Run argv with stdin under the bounds above; OSError when it cannot start."""
    mark = secrets.token_hex(12)
    process = subprocess.Popen(
        list(argv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=cwd,
        env={**env, MARKER: mark},
        start_new_session=True,  # its own process group (and session): killed as one
    )
    deadline = time.monotonic() + timeout_s
    kept = {"stdout": bytearray(), "stderr": bytearray()}
    dropped = 0
    pending = memoryview(stdin)
    selector = selectors.DefaultSelector()
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    for name, pipe in (("stdout", process.stdout), ("stderr", process.stderr)):
        os.set_blocking(pipe.fileno(), False)
        selector.register(pipe, selectors.EVENT_READ, name)
    if pending:
        os.set_blocking(process.stdin.fileno(), False)
        selector.register(process.stdin, selectors.EVENT_WRITE, "stdin")
    else:
        process.stdin.close()
    ended_at: float | None = None
    timed_out = False
    try:
        while selector.get_map():
            now = time.monotonic()
            if ended_at is None and process.poll() is not None:
                ended_at = now
            limit = deadline if ended_at is None else min(deadline, ended_at + GRACE_S)
            if now >= limit:
                timed_out = ended_at is None
                break
            for key, _ in selector.select(min(limit - now, 0.1)):
                if key.data == "stdin":
                    try:
                        written = os.write(key.fd, pending[:PIECE])
                    except BlockingIOError:
                        continue
                    except OSError:  # it stopped reading (closed its stdin): what is left is not wanted
                        written = len(pending)
                    pending = pending[written:]
                    if not pending:
                        selector.unregister(key.fileobj)
                        process.stdin.close()
                    continue
                try:
                    piece = os.read(key.fd, PIECE)
                except BlockingIOError:
                    continue
                if not piece:
                    selector.unregister(key.fileobj)
                    continue
                room = cap - len(kept[key.data])
                kept[key.data] += piece[: max(room, 0)]
                dropped += max(len(piece) - max(room, 0), 0)
        if not timed_out and ended_at is None:
            remaining = max(deadline - time.monotonic(), 0.0)
            try:
                process.wait(remaining)
            except subprocess.TimeoutExpired:
                timed_out = True
    finally:
        selector.close()
        left = _end_all(process, mark)
        for pipe in (process.stdin, process.stdout, process.stderr):
            with contextlib.suppress(OSError):
                pipe.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(5)
    return Finished(
        returncode=None if timed_out else process.returncode,
        stdout=bytes(kept["stdout"]),
        stderr=bytes(kept["stderr"]),
        dropped=dropped,
        ended_left=left,
    )


def _end_all(process: subprocess.Popen[bytes], mark: str) -> int:
    """Kill the program's group and every process carrying its marker; how many there were (the
    program itself not counted)."""
    targets = set(marked(mark))
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)
    for pid in targets:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    targets.discard(process.pid)
    return len(targets)


def marked(mark: str) -> list[int]:
    """The processes whose environment carries MARKER=mark (those this user may read)."""
    needle = f"{MARKER}={mark}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as handle:
                environ = handle.read()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            found.append(int(name))
    return found
