"""Network by allowlist with real containers: the container has no route and no resolver, and its
only way out is the session's egress proxy through the relay on 127.0.0.1. Under runc and gVisor, a
listed host answers over HTTPS; a host off the list gets 403 (the command sees the reason); a direct
connection and a lookup get nothing; a tunnel whose TLS names another host is cut. In a run, setup
installs a package from a local index on the list, a tool call is refused on record, and `harness
show` lists both under their steps. The "internet" is servers on 127.0.0.1; probes aim at `.invalid`
names and 192.0.2.0/24 only."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.errors import ExitCode
from sandbox.docker.engine import another_machine
from sandbox.docker.ids import present_containers
from sandbox.network.netlog import read_log
from tests.cli_process import run_cli
from tests.sandbox.network.servers import Server, make_ca

ROOT = Path(__file__).resolve().parents[3]
CLI = [sys.executable, "-c", "from harness.cli import main; main()"]
pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]

PROBE = r"""
import json, os, socket, ssl, sys, urllib.error, urllib.request
tls_port, ca = int(sys.argv[1]), sys.argv[2]
for name in ("NO_PROXY", "no_proxy"):  # localhost here is the host's: send it to the proxy
    os.environ.pop(name, None)
out = {}
context = ssl.create_default_context(cafile=ca)
out["https"] = urllib.request.urlopen(f"https://localhost:{tls_port}/hello", context=context, timeout=20).read().decode()
try:
    urllib.request.urlopen("http://example.invalid/", timeout=20)
    out["off_list"] = "reached"
except urllib.error.HTTPError as error:
    out["off_list"] = f"{error.code} {error.read().decode().strip()}"
direct = socket.socket()
direct.settimeout(5)
try:
    direct.connect(("192.0.2.1", 80))
    out["direct"] = "connected"
except OSError as error:
    out["direct"] = "no route"
try:
    socket.getaddrinfo("example.invalid", 443)
    out["dns"] = "resolved"
except OSError:
    out["dns"] = "nothing"
tunnel = socket.create_connection(("127.0.0.1", 3128), timeout=20)
tunnel.sendall(f"CONNECT localhost:{tls_port} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
tunnel.recv(4096)
try:
    ssl.create_default_context().wrap_socket(tunnel, server_hostname="evil.invalid").sendall(b"GET / HTTP/1.0\r\n\r\n")
    out["sni"] = "passed"
except (ssl.SSLError, OSError):
    out["sni"] = "cut"
print(json.dumps(out))
"""


def _harness(*args: str, state: Path, label: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HARNESS_RUN_ID": label, "HARNESS_STATE_DIR": str(state), "COLUMNS": "240"}
    return run_cli(args, cwd=ROOT, env=env, timeout=timeout)


@pytest.mark.parametrize("runtime", ["runc", "runsc"])
def test_a_call_reaches_only_its_hosts_through_the_proxy(tmp_path, run_label, runtime, engine_here):
    repo = tmp_path / "repo"
    repo.mkdir()
    _, cert, key = make_ca(repo / "tls")
    (repo / "probe.py").write_text(PROBE)
    with Server(cert=(cert, key)) as secure:
        ran = _harness(
            "exec", "--runtime", runtime, "--allow-net", f"localhost:{secure.port}", "--allow-net",
            f"127.0.0.1:{secure.port}", str(repo), "--", "python3", "probe.py", str(secure.port), "tls/ca.pem",
            state=tmp_path / "state", label=run_label,
        )  # fmt: skip
    if runtime == "runsc" and engine_here.product == "Podman":  # gVisor is not supported there yet: refused
        assert ran.returncode == 72 and "not supported yet" in ran.stderr, ran.stderr
        return
    check_probe(ran, secure.port)


def check_probe(ran: subprocess.CompletedProcess[str], port: int) -> None:
    """What PROBE's call (a `harness exec` of it against an HTTPS server on port) must have seen and said."""
    assert ran.returncode == 0, ran.stdout + ran.stderr
    out = json.loads(ran.stdout.strip().splitlines()[-1])
    assert out["https"] == "hello from the test's own internet\n"
    assert out["off_list"] == "403 harness egress proxy: example.invalid:80 is not on the session's --allow-net list"
    assert (out["direct"], out["dns"], out["sni"]) == ("no route", "nothing", "cut")
    assert f"net: allowed CONNECT localhost:{port}" in ran.stderr
    assert "net: REFUSED GET example.invalid:80: example.invalid:80 is not on" in ran.stderr
    assert f"net: REFUSED CONNECT localhost:{port}: the TLS ClientHello names evil.invalid" in ran.stderr


def _fetching_model(tmp_path: Path, allowed: str, first: str = "") -> str:
    """A scripted model whose one tool call (after `first`, Python) fetches /hello from the allowed
    host (sent to the proxy: in-container localhost is NO_PROXY) and then a host off the list."""
    fetch = (
        f"python3 -c \"import os, urllib.request as u; {first}os.environ.pop('NO_PROXY'); os.environ.pop('no_proxy'); "
        f"print(u.urlopen('http://{allowed}/hello').read().decode().strip()); u.urlopen('http://example.invalid/')\""
    )
    script = tmp_path / "script.yaml"
    turns = [{"tool_calls": [{"name": "run_command", "arguments": {"command": fetch}}]}, {"text": "Done."}]
    script.write_text(yaml.safe_dump({"turns": turns}))
    return str(script)


def _wheel(tmp_path: Path) -> Path:
    """A wheel of a tiny package `egress-probe`, built here without any index."""
    source = tmp_path / "pkg"
    (source / "egress_probe").mkdir(parents=True)
    (source / "egress_probe" / "__init__.py").write_text("WORDS = 'installed through the allowlist'\n")
    (source / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n'
        '[project]\nname = "egress-probe"\nversion = "0.1"\n'
    )
    wheels = tmp_path / "wheels"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(wheels),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    return next(wheels.glob("*.whl"))


def test_setup_installs_from_a_listed_index_and_a_refused_call_is_on_record(tmp_path, run_label, docker_client):
    wheel = _wheel(tmp_path)
    files = {
        "/simple/egress-probe/": f'<a href="/files/{wheel.name}">{wheel.name}</a>'.encode(),
        f"/files/{wheel.name}": wheel.read_bytes(),
    }
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README.md").write_text("a repository\n")
    with Server(files=files) as index:
        script = _fetching_model(
            tmp_path, f"localhost:{index.port}", "import egress_probe; print(egress_probe.WORDS); "
        )
        install = (
            f"env -u NO_PROXY -u no_proxy pip install --index-url http://localhost:{index.port}/simple/ egress-probe"
        )
        ran = _harness(
            "run", "--image", "py311", "--model", f"scripted:{script}", str(repo), "--task", "Check the network.",
            "--no-verify", "--session", "net", "--setup", install, "--allow-net", f"localhost:{index.port}",
            "--allow-net", f"127.0.0.1:{index.port}", "--allow-net-tools", "--json",
            state=tmp_path / "state", label=run_label,
        )  # fmt: skip
        assert ran.returncode == 10 and json.loads(ran.stdout)["outcome"] == "unverified", ran.stdout + ran.stderr
        shown = _harness("show", "net", state=tmp_path / "state", label=run_label)
        page = _harness("view", "net", "--no-open", state=tmp_path / "state", label=run_label)
    log = read_log(tmp_path / "state" / "net" / "network.jsonl")
    paths = [r for r in log if r["allowed"]]
    assert len(paths) >= 3, log  # the index page and the wheel in setup, /hello from the tool call
    refused = [r for r in log if not r["allowed"]]
    assert [r["host"] for r in refused] == ["example.invalid"] and refused[0]["status"] == 403
    trajectory = (tmp_path / "state" / "net" / "trajectory.jsonl").read_text()
    assert "installed through the allowlist" in trajectory and "HTTP Error 403" in trajectory
    image = json.loads((tmp_path / "state" / "net" / "session.json").read_text())["setup"]["image"]
    baked = docker_client.images.get(image).attrs["Config"]["Env"]
    assert not [v for v in baked if v.split("=")[0] in ("HTTP_PROXY", "https_proxy", "SSL_CERT_FILE", "PIP_CERT")], (
        "the setup image keeps none of setup's proxy or CA variables"
    )
    assert "Network: your commands may reach only these hosts" in trajectory  # the model was told
    rows = [" ".join(line.replace("│", " ").split()) for line in shown.stdout.splitlines()]
    setup_gets = [re.match(rf"setup net GET localhost:{index.port}(?: ×(\d+))? allowed", row) for row in rows]
    assert sum(int(found.group(1) or 1) for found in setup_gets if found) >= 2, shown.stdout  # one line, ×N
    step_1 = next(i for i, row in enumerate(rows) if row.startswith("step 1 "))
    refused_at = next(i for i, row in enumerate(rows) if row.startswith("net GET example.invalid:80 refused"))
    assert step_1 < refused_at and not any(row.startswith(("step 2", "verify")) for row in rows[step_1:refused_at])
    assert page.returncode == 0, page.stdout + page.stderr
    html = (tmp_path / "state" / "net" / "view.html").read_text(encoding="utf-8")
    assert f"Network ({len(log)} request(s), 1 refused)" in html and "example.invalid:80" in html
    assert "is not on the session&#x27;s --allow-net list" in html or "is not on the session's --allow-net list" in html


def test_bench_net_measures_both_sides_and_leaves_nothing(tmp_path, run_label, docker_client):
    ran = _harness("bench", "net", "--rounds", "3", "--json", state=tmp_path / "state", label=run_label)
    if why := another_machine(docker_client, docker_client.info()):  # (make test-elsewhere)
        assert ran.returncode == ExitCode.SANDBOX and ran.stdout == "", ran.stdout + ran.stderr
        assert ran.stderr.startswith("error: bench net measures the egress route of an engine on this machine")
        assert why in ran.stderr and len(ran.stderr.strip().splitlines()) == 1, ran.stderr
        return
    assert ran.returncode == 0, ran.stdout + ran.stderr
    figures = json.loads(ran.stdout.strip().splitlines()[-1])
    assert figures["megabytes"] == 20 and figures["rounds"] == 3
    assert figures["direct_ms"] > 0 and figures["proxy_ms"] > 0 and figures["small_added_ms"] is not None
    assert figures["proxy_over_direct"] == round(figures["proxy_ms"] / figures["direct_ms"], 2)
    assert figures["hops_ms"] > 0 and figures["hops_over_direct"] == round(figures["hops_ms"] / figures["direct_ms"], 2)
    assert figures["proxy_over_hops"] == round(figures["proxy_ms"] / figures["hops_ms"], 2)
    left = [
        c
        for c in present_containers(docker_client, {"label": "harness.run"})  # (Podman: 500 for one just removed)
        if c.labels.get("harness.run", "").startswith("bench-net-")
    ]
    assert left == []


SECRET_PROBE = r"""
import json, os, sys, urllib.request
for name in ("NO_PROXY", "no_proxy"):
    os.environ.pop(name, None)
tls_port, plain_port = int(sys.argv[1]), int(sys.argv[2])
token = os.environ["API_TOKEN"]
out = {"in_container": token}
for key, url in (("bound", f"https://localhost:{tls_port}/echo"), ("other", f"http://127.0.0.1:{plain_port}/echo")):
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    out[key] = urllib.request.urlopen(request, timeout=20).read().decode()
print(json.dumps(out))
"""
VALUE = "s3cr3t-" + "9f2c4e7a1b8d6f03" * 2


def test_a_secret_reaches_only_its_host_and_is_never_seen(tmp_path, run_label):
    repo = tmp_path / "repo"
    repo.mkdir()
    ca, cert, key = make_ca(tmp_path / "tls")
    (repo / "probe.py").write_text(SECRET_PROBE)
    state = tmp_path / "state"
    with Server(cert=(cert, key)) as bound, Server() as other:
        env = {**os.environ, "HARNESS_RUN_ID": run_label, "HARNESS_STATE_DIR": str(state), "TEST_API_TOKEN": VALUE}
        ran = subprocess.run(
            [*CLI, "exec", "--session", "sec", "--allow-net", f"127.0.0.1:{other.port}",
             "--allow-net", f"127.0.0.1:{bound.port}", "--secret", f"API_TOKEN=TEST_API_TOKEN@localhost:{bound.port}",
             "--allow-net-ca", str(ca), str(repo), "--", "python3", "probe.py", str(bound.port), str(other.port)],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
        )  # fmt: skip
        assert ran.returncode == 0, ran.stdout + ran.stderr
        out = json.loads(ran.stdout.strip().splitlines()[-1])
        placeholder = out["in_container"]
        assert len(placeholder) == len(VALUE) and placeholder != VALUE
        assert bound.seen[-1]["headers"]["Authorization"] == f"Bearer {VALUE}", "the bound host got the value"
        assert other.seen[-1]["headers"]["Authorization"] == f"Bearer {placeholder}", "another host, the placeholder"
        assert out["bound"] == f"Bearer {placeholder}", "the value echoed back was turned into the placeholder"
        assert out["other"] == f"Bearer {placeholder}"
    assert VALUE not in ran.stdout + ran.stderr
    for path in (state / "sec").rglob("*"):
        if path.is_file():
            assert VALUE.encode() not in path.read_bytes(), f"the value is in {path}"
    terminated = [r for r in read_log(state / "sec" / "network.jsonl") if r["extra"].get("terminated")]
    assert len(terminated) == 1 and terminated[0]["extra"]["secrets_swapped"] == 1
    missing = _harness(
        "exec", "--session", "sec2", "--secret", "API_TOKEN=NOT_SET_ANYWHERE_X@localhost", str(repo), "--", "true",
        state=state, label=run_label,
    )  # fmt: skip
    assert missing.returncode == 78 and "$NOT_SET_ANYWHERE_X is not set" in missing.stderr, missing.stderr


def test_a_batch_task_reaches_its_hosts_and_the_report_counts_the_refused(tmp_path, run_label):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "README.md").write_text("a repository\n")
    with Server() as index:
        script = _fetching_model(tmp_path, f"127.0.0.1:{index.port}")
        tasks = tmp_path / "tasks.yaml"
        tasks.write_text(
            yaml.safe_dump(
                {
                    "defaults": {"model": [f"scripted:{script}"], "allow_net": [f"127.0.0.1:{index.port}"]},
                    "tasks": [{"id": "net", "repo": str(repo), "task": "Fetch.", "allow_net_tools": True}],
                }
            )
        )
        out = tmp_path / "out"
        ran = _harness(
            "batch", str(tasks), "--out", str(out), "--workers", "1", "--json", state=tmp_path, label=run_label
        )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    from harness.batch.records import BatchDir

    (record,) = BatchDir(out).records()
    assert record.net_requests == 2 and record.net_refused == {"example.invalid": 1}, record
    assert (
        "### Network requests refused" in (out / "report.md").read_text()
        and "- example.invalid: 1" in (out / "report.md").read_text()
    )


HOSTILE_PROBE = r"""
import base64, binascii, json, os, sys, urllib.error, urllib.request
for name in ("NO_PROXY", "no_proxy"):
    os.environ.pop(name, None)
port, token = int(sys.argv[1]), os.environ["API_TOKEN"]
out = {"in_container": token}
for path in ("chunked", "gzip", "deflate", "gzip-twice", "b64", "b64url", "hex", "header", "br"):
    request = urllib.request.Request(f"https://localhost:{port}/{path}", headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=20) as answer:
            body = answer.read()
            seen = body.decode("latin-1") + " | " + " ".join(answer.headers.values())
    except urllib.error.HTTPError as error:
        seen = f"HTTP {error.code}: {error.read().decode('latin-1')}"
    for decode in (base64.b64decode, base64.urlsafe_b64decode, binascii.unhexlify):
        try:
            seen += " | " + decode(body.strip()).decode("latin-1")
        except Exception:
            pass
    out[path] = seen
failures = []
for name, decode in (("b64", base64.b64decode), ("b64url", base64.urlsafe_b64decode)):
    for before in range(6):
        for after in range(6):
            for padded in ("padded", "bare"):
                request = urllib.request.Request(f"https://localhost:{port}/reflect/{name}/{before}/{after}/{padded}",
                                                 headers={"Authorization": f"Bearer {token}"})
                with urllib.request.urlopen(request, timeout=20) as answer:
                    body = answer.read()
                got = body[len(b"token="):-len(b"&x=1")]
                wanted = bytes(range(200, 200 + before)) + token.encode() + b"-=!?%"[:after]
                if decode(got + b"=" * (-len(got) % 4)) != wanted:
                    failures.append(f"{name}/{before}/{after}/{padded}")
out["reflect_failures"] = failures
print(json.dumps(out))
"""


def _hostile_host(cert: Path, key: Path):
    """A secret's host that hands the credential back in every way a careless or hostile API could:
    split across chunks, compressed (twice), base64 at an odd offset, at every offset and length
    glued to base64 characters of its own, hex, in a header, and in a coding the proxy cannot undo."""
    import base64
    import gzip
    import http.server
    import ssl
    import threading
    import zlib

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            token = (self.headers.get("Authorization") or "").removeprefix("Bearer ").encode()
            echo = b"you sent " + token
            kind = self.path.strip("/")
            headers = {"Content-Type": "text/plain"}
            if kind.startswith("reflect/"):  # the value in base64 at an offset and length, glued to its neighbours
                _, name, before, after, padded = kind.split("/")
                data = bytes(range(200, 200 + int(before))) + token + b"-=!?%"[: int(after)]
                encoded = (base64.b64encode if name == "b64" else base64.urlsafe_b64encode)(data)
                body = b"token=" + (encoded if padded == "padded" else encoded.rstrip(b"=")) + b"&x=1"
            elif kind == "chunked":
                cut = len(echo) - len(token) // 2
                body = b"%x\r\n%s\r\n%x\r\n%s\r\n0\r\n\r\n" % (cut, echo[:cut], len(echo) - cut, echo[cut:])
                headers["Transfer-Encoding"] = "chunked"
            elif kind in ("gzip", "gzip-twice"):
                body = gzip.compress(echo) if kind == "gzip" else gzip.compress(gzip.compress(echo))
                headers["Content-Encoding"] = "gzip" if kind == "gzip" else "gzip, gzip"
            elif kind == "deflate":
                squeeze = zlib.compressobj(wbits=-15)
                body = squeeze.compress(echo) + squeeze.flush()
                headers["Content-Encoding"] = "deflate"
            elif kind in ("b64", "b64url"):
                encode = base64.b64encode if kind == "b64" else base64.urlsafe_b64encode
                body = encode(b"x" + echo)
            elif kind == "hex":
                body = token.hex().encode()
            elif kind == "header":
                body, headers["X-Echo"] = b"see the header", token.decode()
            else:
                body, headers["Content-Encoding"] = b"\x1b\x2a\x00" + token, "br"
            self.send_response(200)
            for name, value in headers.items():
                self.send_header(name, value)
            if "Transfer-Encoding" not in headers:
                self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return None

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cert), str(key))
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd


def test_a_secrets_host_cannot_hand_the_value_back_in_any_encoding_the_proxy_can_undo(tmp_path, run_label):
    repo = tmp_path / "repo"
    repo.mkdir()
    ca, cert, key = make_ca(tmp_path / "tls")
    (repo / "probe.py").write_text(HOSTILE_PROBE)
    state = tmp_path / "state"
    host = _hostile_host(cert, key)
    port = host.server_address[1]
    try:
        env = {**os.environ, "HARNESS_RUN_ID": run_label, "HARNESS_STATE_DIR": str(state), "TEST_API_TOKEN": VALUE}
        ran = subprocess.run(
            [*CLI, "exec", "--session", "hostile", "--allow-net", f"127.0.0.1:{port}",
             "--secret", f"API_TOKEN=TEST_API_TOKEN@localhost:{port}", "--allow-net-ca", str(ca), str(repo), "--",
             "python3", "probe.py", str(port)],
            cwd=ROOT, env=env, capture_output=True, text=True, timeout=240,
        )  # fmt: skip
    finally:
        host.shutdown()
    assert ran.returncode == 0, ran.stdout + ran.stderr
    out = json.loads(ran.stdout.strip().splitlines()[-1])
    placeholder = out.pop("in_container")
    assert VALUE not in ran.stdout, "no encoding the proxy can undo brought the value into the container"
    for kind in ("chunked", "gzip", "deflate", "gzip-twice", "header"):
        assert placeholder in out[kind], (kind, out[kind])
    assert "you sent " + placeholder in out["b64"] and "you sent " + placeholder in out["b64url"], out
    assert placeholder in out["hex"], out["hex"]
    assert out["reflect_failures"] == [], "a base64 reflection carried bits of the value into the container"
    assert out["br"].startswith("HTTP 502") and "cannot undo (br)" in out["br"], out["br"]
    records = read_log(state / "hostile" / "network.jsonl")
    assert any(r.get("status") == 502 and "not passed on" in r.get("reason", "") for r in records), records
    for path in (state / "hostile").rglob("*"):
        if path.is_file():
            assert VALUE.encode() not in path.read_bytes(), f"the value is in {path}"
