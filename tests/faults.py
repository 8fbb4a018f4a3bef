"""Fault injection for the tests: a real filesystem that fills up, writes whose fsync fails with an I/O
error, files torn at a chosen byte. Reusable by any test (they inject into the real code paths:
nothing of harness is replaced)."""

from __future__ import annotations

import contextlib
import errno
import os
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest


@contextlib.contextmanager
def small_filesystem(where: Path, size: str = "8m") -> Iterator[Path]:
    """A real tmpfs of `size` mounted at where (root only; skips otherwise). Writes past it fail with
    ENOSPC exactly as a full disk does."""
    where.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({done.stderr.decode().strip()}): needs root")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill(filesystem: Path, leave: int = 0) -> Path:
    """Fill filesystem until `leave` bytes remain free; returns the filler file (delete it to make room)."""
    filler = filesystem / f".filler-{uuid.uuid4().hex[:6]}"
    with open(filler, "wb") as handle:
        chunk = b"\0" * (1 << 20)
        while True:
            free = os.statvfs(filesystem).f_bavail * os.statvfs(filesystem).f_frsize
            if free <= leave:
                break
            try:
                handle.write(chunk[: max(1, min(len(chunk), free - leave))])
                handle.flush()
            except OSError as error:
                if error.errno != errno.ENOSPC:
                    raise
                break
    return filler


@contextlib.contextmanager
def failing_fsync(under: Path, error: int = errno.EIO, after: int = 0) -> Iterator[list[str]]:
    """Every fsync of a file under `under` fails with `error` once `after` of them succeeded (a dying
    disk reports at fsync). Yields the paths whose fsync failed."""
    real, failed, seen = os.fsync, [], [0]
    root = str(Path(under).resolve())

    def fsync(fd: int) -> None:
        path = ""
        with contextlib.suppress(OSError):
            path = os.readlink(f"/proc/self/fd/{fd}")
        if path.startswith(root) and not os.path.isdir(path):
            seen[0] += 1
            if seen[0] > after:
                failed.append(path)
                raise OSError(error, os.strerror(error), path)
        real(fd)

    os.fsync = fsync
    try:
        yield failed
    finally:
        os.fsync = real


def tear(path: Path, at: int) -> bytes:
    """Cut path at byte `at` (what a crash mid-write leaves); returns the bytes cut off."""
    data = path.read_bytes()
    path.write_bytes(data[:at])
    return data[at:]


class EngineProxy:
    """A unix socket that forwards to the real Docker engine and can be cut and restored: to harness
    (pointed at it through DOCKER_HOST) the engine goes away mid-run and comes back. Stopping closes
    the listener and every open connection, as a dying engine does."""

    def __init__(self, path: Path, engine: str = "/var/run/docker.sock") -> None:
        import threading

        self.path, self.engine = Path(path), engine
        self._threading = threading
        self._server: socket.socket | None = None
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"unix://{self.path}"

    def start(self) -> None:
        self.path.unlink(missing_ok=True)
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(self.path))
        server.listen(64)
        self._server = server
        self._threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            with contextlib.suppress(OSError):
                server.shutdown(socket.SHUT_RDWR)
            server.close()
        with self._lock:
            doomed, self._open = self._open, []
        for conn in doomed:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()
        self.path.unlink(missing_ok=True)

    def _accept(self, server: socket.socket) -> None:
        while self._server is server:
            try:
                client, _ = server.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                upstream.connect(self.engine)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._open += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                self._threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def stall(self, stalled: bool = True) -> None:
        """Stalled: connections stay open and accepted, but nothing passes either way (an engine that
        hangs instead of going away); False lets everything held through again."""
        self.stalled = stalled

    stalled = False

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        import time

        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                while self.stalled:
                    time.sleep(0.05)
                sink.sendall(data)
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)

    def __enter__(self) -> EngineProxy:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class SecondEngine:
    """A second, real Docker engine of the test's own (its own socket, data root, containerd and
    bridge), holding copies of the images a test names: it can be stopped and started again
    mid-run (a real `dockerd` restart: every container on it stops, connections drop, the socket
    goes away) without touching the engine other tests share. Root only; skips otherwise."""

    def __init__(self, root: Path, images: list[str]) -> None:
        self.root, self.images = Path(root), images
        self.process: subprocess.Popen[bytes] | None = None
        tag = uuid.uuid4().hex[:8]
        self.bridge = f"hrn{tag}"  # its own bridge: `--bridge none` would delete the shared engine's docker0
        self.subnet = f"10.254.{int(tag[:2], 16)}.1/24"

    @property
    def url(self) -> str:
        return f"unix://{self.root / 'docker.sock'}"

    def _env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_HOST": self.url}

    def answers(self) -> bool:
        return subprocess.run(["docker", "info"], env=self._env(), capture_output=True).returncode == 0

    def start(self) -> None:
        import shutil
        import time

        if os.geteuid() != 0 or shutil.which("dockerd") is None:
            pytest.skip("a second engine needs root and dockerd")
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / "daemon.json").write_text("{}\n")
        if subprocess.run(["ip", "link", "show", self.bridge], capture_output=True).returncode != 0:
            for argv in (
                ["ip", "link", "add", "name", self.bridge, "type", "bridge"],
                ["ip", "addr", "add", self.subnet, "dev", self.bridge],
                ["ip", "link", "set", self.bridge, "up"],
            ):
                subprocess.run(argv, check=True, capture_output=True)
        log = open(self.root / "dockerd.log", "ab")  # noqa: SIM115 - the engine writes to it while it runs
        r = self.root
        self.process = subprocess.Popen(
            ["dockerd", "--config-file", str(r / "daemon.json"), "--host", self.url, "--data-root", str(r / "data"),
             "--exec-root", str(r / "exec"), "--pidfile", str(r / "docker.pid"), "--bridge", self.bridge,
             "--iptables=false", "--ip-masq=false", "--storage-driver", "overlay2"],
            stdout=log, stderr=log,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while not self.answers():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the second engine did not start; see {r / 'dockerd.log'}")
            time.sleep(0.3)

    def load_images(self) -> None:
        save = subprocess.Popen(["docker", "save", *self.images], stdout=subprocess.PIPE)
        loaded = subprocess.run(["docker", "load"], stdin=save.stdout, env=self._env(), capture_output=True)
        save.wait()
        if save.returncode or loaded.returncode:
            raise RuntimeError(f"loading images into the second engine failed: {loaded.stderr.decode()[-300:]}")

    def stop(self) -> None:
        """SIGTERM to the engine, as a service manager stops it; wait until it has exited."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=90)
        self.process = None

    def __enter__(self) -> SecondEngine:
        self.start()
        self.load_images()
        return self

    def __exit__(self, *exc: object) -> None:
        from sandbox.tree import remove_tree

        if self.process is not None:
            with contextlib.suppress(OSError):
                subprocess.run(["docker", "rm", "-f", *self._all()], env=self._env(), capture_output=True, timeout=60)
        self.stop()
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
        remove_tree(self.root, ignore_errors=True)

    def _all(self) -> list[str]:
        listed = subprocess.run(["docker", "ps", "-aq"], env=self._env(), capture_output=True, text=True)
        return listed.stdout.split() or ["-"]
