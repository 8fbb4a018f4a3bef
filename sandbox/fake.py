"""FakeSandbox: the Sandbox contract as a host subprocess, for fast unit tests of the loop.

TEST DOUBLE ONLY. It gives NO isolation: the command runs on the host as the current user, with
the host's filesystem and network. Never use it for untrusted code. What it does keep from the real
sandbox: the envelope, statuses, output caps and ceiling, the wall-clock kill (of its own process
group), an empty environment (a PATH whose `python3` is the interpreter running the tests), and
container paths (spec.workdir, mount targets) in argv mapped to host paths.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from io import BufferedReader
from pathlib import Path
from typing import IO

from sandbox import stopping
from sandbox.envelope import CallOutcome, Envelope, Status
from sandbox.errors import SpecError, WorkspaceError
from sandbox.output import CappedOutput
from sandbox.spec import Mount, SandboxSpec, posture

INTERPRETER_DIR = os.path.dirname(os.path.realpath(sys.executable))


def _path() -> str:
    """The calls' PATH: the host's, after the folder of the interpreter running this. A call's `python3`
    (a tool call is `python3 runner.py`) is that interpreter, not a version manager's shim that starts
    a shell and looks the version up before every call."""
    return os.pathsep.join([INTERPRETER_DIR, os.environ.get("PATH", "/usr/bin:/bin")])


class FakeSandbox:
    """Runs argv as a host subprocess with the real sandbox's envelope semantics (no isolation)."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        """Every argv run, after path mapping (for assertions in loop tests)."""

    def run(
        self,
        argv: Sequence[str],
        *,
        workspace: Path,
        spec: SandboxSpec,
        mounts: Sequence[Mount] = (),
        stdin: bytes | None = None,
        commit_changes: bool = False,
        refill: bool = True,
    ) -> Envelope:
        """Run argv on the host in workspace; same statuses and caps as DockerSandbox."""
        if not argv:
            raise SpecError("nothing to run: the command is empty")
        workspace = Path(workspace).resolve()
        if not workspace.is_dir():
            raise WorkspaceError(f"workspace is not a directory: {workspace}")
        argv = [self._map(arg, workspace, spec, mounts) for arg in argv]
        self.calls.append(argv)
        env = {"PATH": _path(), "HOME": str(workspace), "LANG": "C.UTF-8"}
        out, err = CappedOutput(spec.stdout_cap), CappedOutput(spec.stderr_cap)
        started = time.monotonic()
        if stopping.why_stopped() is not None:  # its caller gave up on it before it ran
            return self._envelope(137, "exit_nonzero", started, out, err, spec, stderr_text=stopping.said())
        try:
            proc = subprocess.Popen(
                argv,
                cwd=workspace,
                env=env,
                start_new_session=True,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except OSError as error:
            return self._envelope(
                127, "exit_nonzero", started, out, err, spec, stderr_text=f"{argv[0]}: {error.strerror}\n"
            )
        reason: list[Status] = []

        def kill(why: Status) -> None:
            reason.append(why)
            _killpg(proc.pid)

        detach = stopping.on_stop(lambda: _killpg(proc.pid))  # its caller stopped it (sandbox.stopping)

        readers = [
            threading.Thread(target=_pump, args=(pipe, sink, out, err, spec.output_ceiling, kill), daemon=True)
            for pipe, sink in ((proc.stdout, out), (proc.stderr, err))
        ]
        for reader in readers:
            reader.start()
        if proc.stdin is not None:
            _feed_stdin(proc.stdin, stdin)
        try:
            code = proc.wait(timeout=spec.timeout_s)
        except subprocess.TimeoutExpired:
            kill("timeout")
            code = proc.wait()
        _killpg(proc.pid)  # the call is over: whatever it left in its group goes too
        detach()
        for reader in readers:
            reader.join(timeout=1.0)
        if stopping.why_stopped() is not None and not reason:
            return self._envelope(137, "exit_nonzero", started, out, err, spec, stderr_text=stopping.said())
        if reason:
            return self._envelope(124 if reason[0] == "timeout" else 137, reason[0], started, out, err, spec)
        code = 128 - code if code < 0 else code
        return self._envelope(code, "ok" if code == 0 else "exit_nonzero", started, out, err, spec)

    def prewarm(self, *, workspace: Path, spec: SandboxSpec, mounts: Sequence[Mount] = ()) -> None:
        """Nothing to pre-start."""

    def quiesce(self) -> None:
        """Nothing starts ahead of time here."""

    def close(self) -> None:
        """Nothing is owned between calls."""

    @staticmethod
    def _map(arg: str, workspace: Path, spec: SandboxSpec, mounts: Sequence[Mount]) -> str:
        for target, source in [(m.target, Path(m.source)) for m in mounts] + [(spec.workdir, workspace)]:
            target = target.rstrip("/")
            if arg == target or arg.startswith(target + "/"):
                return str(source) + arg[len(target) :]
            if arg.endswith(f"={target}"):  # key=/workspace (the file tools' runner names its root so)
                return arg[: -len(target)] + str(source)
            arg = arg.replace(f"={target}/", f"={source}/").replace(f" {target}/", f" {source}/")
        return arg

    @staticmethod
    def _envelope(
        code: int,
        status: Status,
        started: float,
        out: CappedOutput,
        err: CappedOutput,
        spec: SandboxSpec,
        stderr_text: str | None = None,
    ) -> Envelope:
        if stderr_text is not None:
            err.feed(stderr_text.encode())
        outcome = CallOutcome.captured(
            code, status, int((time.monotonic() - started) * 1000), out, err, call_path="host"
        )
        limits = posture(spec.model_copy(update={"network": "host"}), str(os.getuid()))
        return Envelope.of(outcome, limits=limits, image_id="fake", runtime="fake")


def _pump(
    pipe: BufferedReader,
    sink: CappedOutput,
    out: CappedOutput,
    err: CappedOutput,
    ceiling: int,
    kill: Callable[[Status], None],
) -> None:
    while chunk := pipe.read1(65536):
        sink.feed(chunk)
        if out.total + err.total > ceiling:
            kill("output_limit")
            break
    pipe.close()


def _feed_stdin(pipe: IO[bytes], data: bytes | None) -> None:
    try:
        if data:
            pipe.write(data)
        pipe.close()
    except OSError:
        pass


def _killpg(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
