"""An engine on another machine, for real, on this one: a second Docker daemon with its own data root,
in its own UTS namespace (it answers as another host), mount namespace (a fresh /tmp: the controller's
workspaces are not there, as on another machine) and network namespace (its network set-up never
touches this machine's), reached on a TCP socket on 127.0.0.1 (a relay to its API socket). A bind
mount there would show a call an empty folder.

Used by tests/sandbox/docker/test_remote_engine.py (`elsewhere()`), and by `make test-elsewhere`:

    python -m tests.engine_elsewhere COMMAND...

starts the daemon, copies harness's images to it from the default engine (scripts/copy-images.sh),
runs COMMAND with DOCKER_HOST naming it, stops the daemon and removes its data root, and exits with
COMMAND's status."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

ELSEWHERE = "harness-elsewhere"
"""The host name the daemon answers with."""


class EngineNotStarted(RuntimeError):
    """The second daemon did not answer (its log's end is the message)."""


class _Relay(socketserver.ThreadingTCPServer):
    """127.0.0.1:PORT to a unix socket, both ways, one thread per connection."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, target: Path) -> None:
        self.target = target
        super().__init__(("127.0.0.1", 0), _Pipe)


class _Pipe(socketserver.BaseRequestHandler):
    """One connection, both ways; one side's end of sending is passed on as the same (a half-close:
    the end of an exec's stdin), and the connection closes when both have ended."""

    def handle(self) -> None:
        upstream = socket.socket(socket.AF_UNIX)
        try:
            upstream.connect(str(self.server.target))  # type: ignore[attr-defined]
        except OSError:  # the daemon is not listening yet: the client's connection just closes
            upstream.close()
            return

        def pump(source: socket.socket, sink: socket.socket) -> None:
            try:
                while data := source.recv(65536):
                    sink.sendall(data)
            except OSError:
                pass
            finally:
                try:
                    sink.shutdown(socket.SHUT_WR)
                except OSError:
                    pass

        back = threading.Thread(target=pump, args=(upstream, self.request), daemon=True)
        back.start()
        pump(self.request, upstream)
        back.join()
        upstream.close()


def can_start() -> str | None:
    """Why the second daemon cannot start here, or None."""
    if os.geteuid() != 0 or not shutil.which("dockerd") or not shutil.which("unshare"):
        return "needs root, dockerd and unshare"
    return None


@contextlib.contextmanager
def elsewhere(start_within: float = 90) -> Iterator[str]:
    """DOCKER_HOST of a daemon that shares neither this machine's host name, nor its /tmp, nor its
    network; stopped, and its data root removed, at the end."""
    root = Path(tempfile.mkdtemp(prefix="harness-remote-engine-", dir="/var/tmp"))
    api = root / "docker.sock"
    (root / "daemon.json").write_text(json.dumps({"runtimes": runsc_here()}))  # gVisor there too, if here
    script = (
        f"ip link set lo up && hostname {ELSEWHERE} && mount -t tmpfs tmpfs /tmp && exec dockerd "
        f"--config-file {root}/daemon.json --data-root {root}/data --exec-root {root}/exec "
        f"--pidfile {root}/dockerd.pid -H unix://{api} --bridge none --iptables=false --ip6tables=false --ip-masq=false"
    )
    with open(root / "dockerd.log", "wb") as log:
        daemon = subprocess.Popen(
            ["unshare", "--net", "--uts", "--mount", "--propagation", "private", "sh", "-c", script],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    relay = _Relay(api)
    threading.Thread(target=relay.serve_forever, daemon=True).start()
    host = f"tcp://127.0.0.1:{relay.server_address[1]}"
    try:
        deadline = time.monotonic() + start_within
        while subprocess.run(["docker", "-H", host, "version"], capture_output=True).returncode != 0:
            if daemon.poll() is not None or time.monotonic() > deadline:
                raise EngineNotStarted((root / "dockerd.log").read_text(errors="replace")[-2000:])
            time.sleep(0.5)
        yield host
    finally:
        relay.shutdown()
        relay.server_close()
        daemon.send_signal(signal.SIGTERM)
        try:
            daemon.wait(timeout=60)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait(timeout=30)
        shutil.rmtree(root, ignore_errors=True)


def runsc_here() -> dict:
    """gVisor's registration on this machine's engine (its path and arguments), to give the engine
    elsewhere the same; none when this engine has none."""
    try:
        config = json.loads(Path("/etc/docker/daemon.json").read_text())
    except (OSError, ValueError):
        return {}
    runsc = (config.get("runtimes") or {}).get("runsc")
    return {"runsc": runsc} if runsc and Path(runsc.get("path", "")).is_file() else {}


def main(command: list[str]) -> int:
    if not command:
        print("usage: python -m tests.engine_elsewhere COMMAND...", file=sys.stderr)
        return 64
    if why := can_start():
        print(f"error: the engine elsewhere {why}", file=sys.stderr)
        return 69
    # Ended by a signal: the daemon is stopped and its data root removed all the same.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        with elsewhere() as host:
            print(f"setup: an engine elsewhere at {host} (host {ELSEWHERE!r}, its own data root, /tmp and network)")
            copied = subprocess.run(["bash", str(Path(__file__).parent.parent / "scripts" / "copy-images.sh"), host])
            if copied.returncode != 0:
                return copied.returncode
            return subprocess.run(command, env={**os.environ, "DOCKER_HOST": host}).returncode
    except EngineNotStarted as error:
        print(f"error: the engine elsewhere did not start: {error}", file=sys.stderr)
        return 69
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
