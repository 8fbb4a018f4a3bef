"""`harness bench net`: a 20 MB download through a session's egress proxy (the container's relay, the
Unix socket, the proxy process) vs the same download straight from the same local server, side by
side in one run, and the added latency of one small request; and the same download through the same
hops with a bare splice forwarder in the proxy's place: the bound the route itself sets here.

Both sides run the same program inside a container of the same image, timing only the transfer
(`urlopen` to the last byte): the proxied side in a container with network `none` and the relay, as
every allowed call runs; the direct side in a container on the host's network (the bench's own
measuring container, never a call's) so it reaches the server on 127.0.0.1 without the proxy.
"""

from __future__ import annotations

import contextlib
import http.server
import os
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from harness.bench.measure import median, ratio
from sandbox.docker import hardening
from sandbox.docker.engine import another_machine, resolve_image_path, translate
from sandbox.errors import SandboxError
from sandbox.labels import of_process
from sandbox.network.egress import Egress
from sandbox.owner import container_user
from sandbox.spec import SandboxSpec

BIG = 20 * 1024 * 1024
FETCH = (
    "import os, sys, time, urllib.request\n"
    "for name in ('NO_PROXY', 'no_proxy'):\n    os.environ.pop(name, None)\n"
    "url, rounds = sys.argv[1], int(sys.argv[2])\n"
    "opener = urllib.request.build_opener() if os.environ.get('HTTP_PROXY') else "
    "urllib.request.build_opener(urllib.request.ProxyHandler({}))\n"
    "for _ in range(rounds):\n"
    "    started = time.perf_counter()\n"
    "    with opener.open(url) as answer:\n"
    "        while answer.read(1 << 20):\n            pass\n"
    "    print((time.perf_counter() - started) * 1000, flush=True)\n"
)


class NetBench(BaseModel):
    """Medians in milliseconds; the ratios are of medians."""

    megabytes: int
    rounds: int
    direct_ms: float
    proxy_ms: float
    proxy_over_direct: float
    """Target: <= 1.3."""
    small_direct_ms: float
    small_proxy_ms: float
    small_added_ms: float
    """What the proxy adds to one small request (a connection, the checks, the record)."""
    hops_ms: float = 0.0
    """The same download through the same hops with nothing on them but a splice forwarder (the
    container's relay, a Unix socket, a host process): the floor of the topology on this machine."""
    hops_over_direct: float = 0.0
    """The bound the proxy's route itself sets (the proxy cannot be under it)."""
    proxy_over_hops: float = 0.0
    """What the proxy's own work adds over its route: its parsing, checks, record and copies."""
    load_1m: float


class _Blob(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    blob = b""

    def do_GET(self) -> None:
        body = self.blob if "/big" in self.path else b"ok\n"  # the floor's forwarder passes the absolute URL
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return None


def measure(client: Any, *, image: str = "py311", rounds: int = 9) -> NetBench:
    with translate("reading engine info"):
        info = client.info()
    if why := another_machine(client, info):
        # Its direct side downloads from a server here over the host's network, and the relay's socket is
        # bound into the proxied side: neither reaches another machine's containers.
        raise SandboxError(
            f"bench net measures the egress route of an engine on this machine, and this engine is another "
            f"machine's ({why}); run it where the engine runs"
        )
    run_id = f"bench-net-{uuid.uuid4().hex[:10]}"
    handler = type("Blob", (_Blob,), {"blob": os.urandom(BIG)})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        with tempfile.TemporaryDirectory(prefix="harness-bench-net-") as tmp:
            script = Path(tmp) / "fetch.py"
            script.write_text(FETCH)
            os.chmod(tmp, 0o755)  # the container's user reads the script
            script.chmod(0o644)
            hops = Path(tmp) / "hops"
            hops.mkdir()
            os.chmod(hops, 0o755)
            with (
                Egress([f"127.0.0.1:{port}"], Path(tmp) / "network.jsonl") as egress,
                _forwarder(hops / "proxy.sock", port),
                _container(client, image, Path(tmp), run_id, egress=str(egress.folder)) as proxied,
                _container(client, image, Path(tmp), run_id, egress=str(hops)) as floor,
                _container(client, image, Path(tmp), run_id, network="host") as direct,
            ):
                big: dict[str, list[float]] = {"proxy": [], "direct": [], "hops": []}
                small: dict[str, list[float]] = {"proxy": [], "direct": []}
                for _ in range(rounds):  # interleaved: machine noise hits every side alike
                    for name, box in (("proxy", proxied), ("direct", direct), ("hops", floor)):
                        big[name] += _fetch(box, f"http://127.0.0.1:{port}/big", 1)
                        if name != "hops":
                            small[name] += _fetch(box, f"http://127.0.0.1:{port}/small", 5)
    finally:
        server.shutdown()
        server.server_close()
    proxy_ms, direct_ms, hops_ms = median(big["proxy"]), median(big["direct"]), median(big["hops"])
    small_proxy, small_direct = median(small["proxy"], 2), median(small["direct"], 2)
    return NetBench(
        megabytes=BIG // 1024**2,
        rounds=rounds,
        direct_ms=direct_ms,
        proxy_ms=proxy_ms,
        proxy_over_direct=ratio(proxy_ms, direct_ms),
        small_direct_ms=small_direct,
        small_proxy_ms=small_proxy,
        small_added_ms=round(small_proxy - small_direct, 2),
        hops_ms=hops_ms,
        hops_over_direct=ratio(hops_ms, direct_ms),
        proxy_over_hops=ratio(proxy_ms, hops_ms),
        load_1m=round(os.getloadavg()[0], 2),
    )


@contextlib.contextmanager
def _forwarder(path: Path, port: int) -> Iterator[None]:
    """A Unix socket whose every connection is spliced to 127.0.0.1:port, nothing read or checked:
    what the proxy's route costs with no proxy on it."""
    import socket

    from sandbox.network.proxy import _pump

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    os.chmod(path, 0o777)  # the container's user connects
    listener.listen(16)

    def carry(conn: socket.socket) -> None:
        with conn, socket.create_connection(("127.0.0.1", port)) as upstream:
            back = threading.Thread(target=_pump, args=(conn, upstream), daemon=True)
            back.start()
            _pump(upstream, conn)
            back.join(5)

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=carry, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield
    finally:
        listener.close()


def _fetch(container: Any, url: str, times: int) -> list[float]:
    code, output = container.exec_run(["python3", "/bench/fetch.py", url, str(times)])
    if code != 0:
        raise RuntimeError(f"bench net: the download failed: {output.decode('utf-8', 'replace')[-300:]}")
    return [float(line) for line in output.decode().split()]


@contextlib.contextmanager
def _container(
    client: Any, image: str, folder: Path, run_id: str, *, egress: str | None = None, network: str = "none"
) -> Iterator[Any]:
    image_id, path = resolve_image_path(client, image)
    spec = SandboxSpec(image=image, network=network, egress=egress)
    workspace = folder / "workspace"
    workspace.mkdir(exist_ok=True)
    config = hardening.container_config(
        image_id, spec, workspace, [], container_user(), of_process(run_id, "bench"), path=path
    )
    host = dict(config["host_config"])
    host["binds"] = {**host["binds"], str(folder): {"bind": "/bench", "mode": "ro"}}
    api = client.api
    created = api.create_container(**{**config, "host_config": api.create_host_config(**host)}, detach=True)["Id"]
    try:
        api.start(created)
        yield client.containers.get(created)
    finally:
        with contextlib.suppress(Exception):
            api.remove_container(created, force=True)
