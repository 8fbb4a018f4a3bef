"""An engine on another machine, for real: a second Docker daemon with its own data root, in its own
UTS namespace (it answers as another host), mount namespace (a fresh /tmp: the controller's
workspaces are not there, as on another machine) and network namespace (its network set-up never
touches this machine's), reached on a TCP socket on 127.0.0.1 (a relay to its API socket). harness
bind-mounts each call's workspace, so on such an engine a call would see an empty folder: `harness
doctor` says where the engine is, and every command that would run a call refuses at once with one
line, before any container is made."""

from __future__ import annotations

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

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.timeout(180)]

HARNESS = str(Path(sys.executable).parent / "harness")
ELSEWHERE = "harness-elsewhere"


class _Relay(socketserver.ThreadingTCPServer):
    """127.0.0.1:PORT to a unix socket, both ways, one thread per connection."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, target: Path) -> None:
        self.target = target
        super().__init__(("127.0.0.1", 0), _Pipe)


class _Pipe(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        upstream = socket.socket(socket.AF_UNIX)
        upstream.connect(str(self.server.target))  # type: ignore[attr-defined]
        ends = (self.request, upstream)

        def pump(source: socket.socket, sink: socket.socket) -> None:
            try:
                while data := source.recv(65536):
                    sink.sendall(data)
            except OSError:
                pass
            finally:
                for end in ends:
                    try:
                        end.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass

        back = threading.Thread(target=pump, args=(upstream, self.request), daemon=True)
        back.start()
        pump(self.request, upstream)
        back.join(timeout=10)
        upstream.close()


@pytest.fixture(scope="module")
def elsewhere() -> Iterator[str]:
    """DOCKER_HOST of a daemon that shares neither this machine's host name, nor its /tmp, nor its network."""
    if os.geteuid() != 0 or not shutil.which("dockerd") or not shutil.which("unshare"):
        pytest.skip("needs root, dockerd and unshare")
    root = Path(tempfile.mkdtemp(prefix="harness-remote-engine-", dir="/var/tmp"))
    api = root / "docker.sock"
    script = (
        f"ip link set lo up && hostname {ELSEWHERE} && mount -t tmpfs tmpfs /tmp && exec dockerd "
        f"--data-root {root}/data --exec-root {root}/exec --pidfile {root}/dockerd.pid -H unix://{api} "
        "--bridge none --iptables=false --ip6tables=false --ip-masq=false"
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
        deadline = time.monotonic() + 90
        while subprocess.run(["docker", "-H", host, "version"], capture_output=True).returncode != 0:
            if daemon.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the second daemon did not start: {(root / 'dockerd.log').read_text()[-2000:]}")
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


def _harness(host: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DOCKER_HOST": host, "HARNESS_RUN_ID": "remote-engine-test", "COLUMNS": "200"}
    env["HARNESS_WARM_DIR"] = tempfile.mkdtemp(prefix="harness-warm-none-")
    return subprocess.run([HARNESS, *args], capture_output=True, text=True, env=env, timeout=120)


def test_doctor_says_the_engine_is_elsewhere_and_a_call_is_refused_before_any_container(elsewhere, tmp_path):
    doctor = _harness(elsewhere, "doctor")
    assert doctor.returncode != 0, doctor.stdout
    assert f"engine location: another machine (it answers over TCP as host '{ELSEWHERE}'" in doctor.stdout
    assert "harness bind-mounts each call's workspace" in doctor.stderr
    assert "free disk at" in doctor.stdout and "not checked" in doctor.stdout

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "marker.txt").write_text("on the controller's disk\n")
    done = _harness(elsewhere, "exec", str(repo), "--", "cat", "marker.txt")
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 78 and len(lines) == 1, done.stderr
    assert lines[0].startswith("error: the engine at http://127.0.0.1:") and "is not on this machine" in lines[0]
    assert "Traceback" not in done.stderr and done.stdout == ""
    listed = subprocess.run(["docker", "-H", elsewhere, "ps", "-aq"], capture_output=True, text=True, check=True)
    assert listed.stdout.strip() == "", "nothing was started on the engine that cannot see the workspace"
