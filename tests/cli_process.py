"""The harness command line in a process of its own per command, forked from a server that imported
the command line's modules once.

A suite run starts the CLI some 600 times; each process spent 0.2-0.4 CPU-s importing (typer,
pydantic's models, the docker SDK, harness's own modules: two thirds of a scripted `harness run`)
before doing anything, on a machine whose two cores the suite keeps busy. `run_cli` gives each
command what `subprocess.run` gave it (a new process with the test's environment, working folder,
arguments, standard streams and exit code; its atexit handlers and interpreter shutdown; killed at
the timeout), forked from this worker's server (`python -m tests.cli_process`), which imported those
modules before the first command.

What a fork cannot give, a command gets from a real start (`subprocess.run`): standard input, or an
environment whose variables the interpreter reads as it starts (PYTHON*, the locale) different from
the server's. The tests of what a command imports, of the console script, and of processes a test
signals while they run start them as a user would (`subprocess`), as before.
"""

from __future__ import annotations

import atexit
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import types
from collections.abc import Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONSOLE_SCRIPT = str(Path(sys.executable).parent / "harness")
"""The console script a user runs (`pip install` made it beside the interpreter)."""
PYTHON_C = [sys.executable, "-c", "from harness.cli import main; main()"]

STARTUP_VARIABLES = ("PYTHON", "LANG", "LC_")
"""Prefixes of the variables the interpreter reads while it starts: a command whose environment
differs from the server's in one starts for real."""

PRELOAD = (
    "typer",
    "rich.console",
    "pydantic",
    "docker",
    "yaml",
    "dulwich.repo",
    "psutil",
    "tenacity",
    "requests",
    "httpx",
    "openai",
    "anthropic",
    "harness.cli",
    "harness.cli.app",
    "harness.config",
    "harness.types",
    "harness.assembly",
    "harness.agent.loop",
    "harness.agent.delegate",
    "sandbox.docker.engine",
    "sandbox.docker.containers",
    "sandbox.session.session",
)
"""What most commands import (a `harness run` of the example: 686 modules, ~0.4 s); each command's
own module and whatever it alone needs are imported by the command, as in a process of its own."""


# --- the server ----------------------------------------------------------------------------------


class _Forked(Exception):
    """Raised in a forked child to leave the server's loop: the command runs at the top level."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv


def _serve(path: str) -> None:
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    if threading.active_count() != 1:
        raise SystemExit(f"cli_process: a preloaded module started a thread: {threading.enumerate()}")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(64)
    parent = os.getppid()
    print("ready", flush=True)
    running: dict[int, socket.socket] = {}
    with selectors.DefaultSelector() as selector:
        selector.register(listener, selectors.EVENT_READ)
        while os.getppid() == parent:
            for _key, _events in selector.select(timeout=0.02):
                conn, _ = listener.accept()
                request = json.loads(conn.makefile("r").readline())
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    listener.close()
                    for other in running.values():
                        other.close()
                    _become(conn, request)
                    raise _Forked([request["argv0"], *request["argv"]])
                running[pid] = conn
                conn.sendall(json.dumps({"pid": pid}).encode() + b"\n")
            _reap(running)


def _reap(running: dict[int, socket.socket]) -> None:
    while running:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        conn = running.pop(pid, None)
        if conn is not None:
            try:
                conn.sendall(json.dumps({"code": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
            except OSError:
                pass  # the test gave up on it (its timeout)
            conn.close()


def _become(conn: socket.socket, request: dict) -> None:
    """Make this forked process the command's: its folder, environment and streams."""
    conn.close()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # found again from this environment's TMPDIR, as a new process would
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open(request["out"], os.O_WRONLY)
    err = os.open(request["err"], os.O_WRONLY)
    for fd, target in ((null, 0), (out, 1), (err, 2)):
        os.dup2(fd, target)
        os.close(fd)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as Python starts: the server changed none
    sys.modules["__main__"] = types.ModuleType("__main__")  # `python -c`'s: nothing for a spawned child to import


def _main() -> None:
    try:
        _serve(sys.argv[1])
    except _Forked as forked:
        sys.argv = forked.argv
        os._exit(_command())


def _command() -> int:
    """Run the command and end as the interpreter ends a process (its threads joined, its atexit
    handlers run, its streams flushed; an exception printed, KeyboardInterrupt as SIGINT), without
    tearing down each module: with the preloaded ones that alone costs ~0.45 s."""
    from harness.cli import main

    code: int = 0
    interrupted = False
    try:
        main()
    except SystemExit as done:
        if done.code is None or isinstance(done.code, int):
            code = done.code or 0
        else:
            print(done.code, file=sys.stderr)
            code = 1
    except KeyboardInterrupt:
        interrupted = True
        sys.excepthook(*sys.exc_info())
    except BaseException:  # noqa: BLE001 - what the interpreter does with any uncaught exception
        sys.excepthook(*sys.exc_info())
        code = 1
    threading._shutdown()  # type: ignore[attr-defined]  # what the interpreter's exit does first
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    return code


# --- the client ----------------------------------------------------------------------------------

_server: dict[str, object] = {}
_lock = threading.Lock()


def _socket_path() -> str:
    with _lock:
        if "path" not in _server or _server["process"].poll() is not None:  # type: ignore[attr-defined]
            folder = tempfile.mkdtemp(prefix="harness-cli-")
            path = os.path.join(folder, "s")
            process = subprocess.Popen(
                [sys.executable, "-m", "tests.cli_process", path], cwd=ROOT, stdout=subprocess.PIPE, text=True
            )
            if process.stdout is None or process.stdout.readline().strip() != "ready":
                raise RuntimeError("the CLI's fork server did not start")
            _server.update(path=path, process=process, env=dict(os.environ))
            atexit.register(_stop, process, folder)
        return str(_server["path"])


def _stop(process: subprocess.Popen, folder: str) -> None:
    process.kill()
    process.wait()
    for name in os.listdir(folder):
        os.unlink(os.path.join(folder, name))
    os.rmdir(folder)


def _startup(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(STARTUP_VARIABLES)}


def run_cli(
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: str | Path | None = None,
    timeout: float | None = None,
    input: str | None = None,
    console: bool = False,
) -> subprocess.CompletedProcess[str]:
    """`subprocess.run([*PYTHON_C, *args], capture_output=True, text=True, ...)` (or the console
    script's, `console=True`: its name in the messages) from the fork server (see the module's
    docstring)."""
    environment = dict(os.environ if env is None else env)
    path = _socket_path()
    if input is not None or _startup(environment) != _startup(_server["env"]):  # type: ignore[arg-type]
        argv = [CONSOLE_SCRIPT, *args] if console else [*PYTHON_C, *args]
        return subprocess.run(
            argv, env=environment, cwd=cwd, timeout=timeout, input=input, capture_output=True, text=True
        )
    with tempfile.TemporaryDirectory(prefix="harness-cli-out-") as folder:
        out, err = Path(folder, "out"), Path(folder, "err")
        out.touch()
        err.touch()
        request = {
            "argv0": CONSOLE_SCRIPT if console else "-c",
            "argv": list(args),
            "env": environment,
            "cwd": str(cwd or os.getcwd()),
            "out": str(out),
            "err": str(err),
        }
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(path)
            conn.sendall(json.dumps(request).encode() + b"\n")
            answers = conn.makefile("r")
            pid = json.loads(answers.readline())["pid"]
            conn.settimeout(timeout)
            try:
                line = answers.readline()
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)
                raise subprocess.TimeoutExpired(args, timeout or 0, out.read_text(), err.read_text()) from None
            if not line:
                raise RuntimeError(f"the CLI's fork server ended while running {list(args)}")
            code = json.loads(line)["code"]
        return subprocess.CompletedProcess(list(args), code, out.read_text(), err.read_text())


if __name__ == "__main__":
    _main()
