"""The egress proxy as a container's program meets it, through its Unix socket (its real process,
started as a session starts it): the allowed host answers over HTTP and HTTPS, everything else is a
403 with one line and a record; the four bypasses peers' proxies let through are refused (a CONNECT
whose TLS names another host, a CONNECT relayed through an allowed host, plain HTTP to a host off the
list, an address nobody listed); a name is checked again after it resolves; the proxy dies with the
controller that started it. Every server is on 127.0.0.1; refusal probes aim at `.invalid` names
and 192.0.2.0/24 only."""

from __future__ import annotations

import os
import re
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sandbox.network.allow import AllowError, Allowlist, parse
from sandbox.network.egress import Egress, leftover_proxies
from sandbox.network.netlog import read_log
from tests.sandbox.network.servers import BODY, Server, connect, http_get, make_ca, proxy_socket, read_all, tls_get


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    """An HTTP and an HTTPS server on 127.0.0.1, and one proxy allowing exactly them (by address, and
    the HTTPS one by the name `localhost` too), shared by the tests of this module."""
    folder = tmp_path_factory.mktemp("net")
    ca, cert, key = make_ca(folder / "tls")
    with Server() as plain, Server(cert=(cert, key)) as secure:
        allow = [f"127.0.0.1:{plain.port}", f"localhost:{secure.port}", f"127.0.0.1:{secure.port}", "nothing.invalid"]
        with Egress(allow, folder / "network.jsonl", "module") as egress:
            yield {"plain": plain, "secure": secure, "ca": ca, "egress": egress, "log": folder / "network.jsonl"}


def _last(world, **match) -> dict:
    time.sleep(0.05)  # the proxy writes its record as the connection ends
    found = [r for r in read_log(world["log"]) if all(r.get(k) == v for k, v in match.items())]
    assert found, f"no record with {match}: {read_log(world['log'])[-3:]}"
    return found[-1]


def test_an_allowed_host_answers_over_http_and_is_recorded(world):
    answer = http_get(world["egress"].socket, f"http://127.0.0.1:{world['plain'].port}/hello")
    assert answer.startswith(b"HTTP/1.0 200") or answer.startswith(b"HTTP/1.1 200"), answer[:200]
    assert answer.endswith(BODY)
    record = _last(world, method="GET", port=world["plain"].port)
    assert record["allowed"] and record["address"] == "127.0.0.1" and record["received"] == len(answer)
    seen = world["plain"].seen[-1]
    assert seen["path"] == "/hello" and "Proxy-Connection" not in seen["headers"]


def test_an_allowed_host_answers_over_https_with_its_own_certificate(world):
    conn, head = connect(world["egress"].socket, f"localhost:{world['secure'].port}")
    assert head.startswith(b"HTTP/1.1 200"), head
    answer = tls_get(conn, world["ca"], "localhost")
    assert answer.endswith(BODY), answer[:300]
    record = _last(world, method="CONNECT", host="localhost")
    assert record["allowed"] and record["extra"]["sni"] == "localhost" and record["received"] > len(BODY)


def test_a_host_off_the_list_gets_403_with_the_reason(world):
    for request in (
        lambda: http_get(world["egress"].socket, "http://example.invalid/hello"),  # plain HTTP off the list
        lambda: connect(world["egress"].socket, "example.invalid:443")[1],
    ):
        answer = request()
        assert answer.startswith(b"HTTP/1.1 403"), answer
        assert b"example.invalid" in answer and b"not on the session's --allow-net list" in answer
    record = _last(world, host="example.invalid", method="CONNECT")
    assert not record["allowed"] and record["status"] == 403


def test_a_tunnel_whose_tls_names_another_host_is_cut(world):
    conn, head = connect(world["egress"].socket, f"localhost:{world['secure'].port}")
    assert head.startswith(b"HTTP/1.1 200")
    with pytest.raises((ssl.SSLError, OSError)):
        tls_get(conn, world["ca"], "evil.invalid")
    record = _last(world, method="CONNECT", host="localhost", allowed=False)
    assert "names evil.invalid, not localhost" in record["reason"]
    assert world["secure"].seen == [] or all(s["headers"].get("Host") != "evil.invalid" for s in world["secure"].seen)


def test_a_connect_relayed_through_an_allowed_host_is_cut(world):
    conn, head = connect(world["egress"].socket, f"localhost:{world['secure'].port}")
    assert head.startswith(b"HTTP/1.1 200")
    conn.sendall(b"CONNECT elsewhere.invalid:443 HTTP/1.1\r\nHost: elsewhere.invalid:443\r\n\r\n")
    try:
        assert read_all(conn) == b"", "nothing comes back: the tunnel is closed"
    except ConnectionResetError:
        pass  # closed with the relayed request unread: a reset says the same
    conn.close()
    assert "carries TLS only" in _last(world, method="CONNECT", allowed=False)["reason"]


def test_addresses_nobody_listed_are_refused_whatever_the_name(world, tmp_path):
    answer = http_get(world["egress"].socket, "http://192.0.2.1/")
    assert answer.startswith(b"HTTP/1.1 403") and b"only addresses listed with --allow-net" in answer
    # a listed name that resolves to an address nobody listed: checked after the lookup
    with Egress([f"localhost:{world['plain'].port}"], tmp_path / "n.jsonl") as egress:
        answer = http_get(egress.socket, f"http://localhost:{world['plain'].port}/hello")
    assert answer.startswith(b"HTTP/1.1 403"), answer
    assert b"resolves to 127.0.0.1 (loopback)" in answer
    metadata = Allowlist(parse(["metadata.invalid"])).address_refusal(
        "metadata.invalid", __import__("ipaddress").ip_address("169.254.169.254"), 80
    )
    assert metadata and "cloud metadata" in metadata


def test_what_is_not_a_proxy_request_is_refused_in_one_line(world):
    answer = http_get(world["egress"].socket, "https://localhost/hello")
    assert answer.startswith(b"HTTP/1.1 400") and b"goes by CONNECT" in answer
    with proxy_socket(world["egress"].socket) as conn:
        conn.sendall(b"GET /hello HTTP/1.1\r\nHost: localhost\r\n\r\n")
        answer = read_all(conn)
    assert answer.startswith(b"HTTP/1.1 400") and b"send the absolute URL" in answer
    answer = http_get(world["egress"].socket, "http://nothing.invalid/")
    assert answer.startswith(b"HTTP/1.1 502") and b"cannot resolve nothing.invalid" in answer


@pytest.mark.parametrize(
    "entry, says",
    [("foo bar", "not a host name"), ("pypi.org:99999", "port must be"), ("*.*.org", "not a host name"), ("", "empty")],
)
def test_entries_that_cannot_be_read_are_named(entry, says):
    with pytest.raises(AllowError, match=says):
        parse([entry])


def test_presets_wildcards_and_ports():
    allow = Allowlist(parse(["pypi", "*.example.org", "10.0.0.0/8:3141"]))
    assert allow.host_refusal("files.pythonhosted.org", 443) is None
    assert allow.host_refusal("files.pythonhosted.org", 22) is not None  # no port: 80 and 443 only
    assert allow.host_refusal("a.b.example.org", 80) is None and allow.host_refusal("example.org", 80) is not None
    assert allow.host_refusal("10.1.2.3", 3141) is None and allow.host_refusal("10.1.2.3", 80) is not None
    every = Allowlist(parse(["internal.example:*", "192.0.2.0/24:*"]))  # a host-only allowlist (Harbor's)
    assert every.host_refusal("internal.example", 8443) is None and every.host_refusal("other.example", 80)
    assert every.host_refusal("192.0.2.7", 5000) is None


def test_the_proxy_ends_with_the_controller_that_started_it(tmp_path):
    code = (
        "import sys, time; from pathlib import Path; from sandbox.network.egress import Egress; "
        f"e = Egress(['pypi'], Path({str(tmp_path / 'n.jsonl')!r})).start(); print(e.process.pid, e.folder, flush=True); "
        "time.sleep(60)"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[3]
    )
    pid, folder = child.stdout.readline().split()
    proxy = int(pid)
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and Path(f"/proc/{proxy}").exists():
        time.sleep(0.1)
    assert not Path(f"/proc/{proxy}").exists() or "Z" in Path(f"/proc/{proxy}/stat").read_text().split(")")[-1][:3]
    assert proxy not in leftover_proxies()
    assert not Path(folder).exists(), "the proxy removed its socket's folder on its way out"


def test_the_host_is_the_targets_and_two_hosts_are_refused_on_record(world):
    """A listed front end must not serve another site: the proxy sends the target's authority as Host
    (RFC 9112 3.2.2), whatever Host the client wrote. Two Host headers: 400, and on the record."""
    port = world["plain"].port
    with proxy_socket(world["egress"].socket) as conn:
        conn.sendall(f"GET http://127.0.0.1:{port}/hello HTTP/1.1\r\nHost: other.invalid\r\n\r\n".encode())
        answer = read_all(conn)
    assert answer.endswith(BODY)
    assert world["plain"].seen[-1]["headers"]["Host"] == f"127.0.0.1:{port}"
    with proxy_socket(world["egress"].socket) as conn:
        conn.sendall(
            f"GET http://127.0.0.1:{port}/hello HTTP/1.1\r\nHost: a.invalid\r\nHost: b.invalid\r\n\r\n".encode()
        )
        refused = read_all(conn)
    assert refused.startswith(b"HTTP/1.1 400") and b"malformed" in refused
    record = _last(world, method="?")
    assert not record["allowed"] and record["status"] == 400 and "malformed" in record["reason"]


def test_a_proxy_that_cannot_start_says_which_file_and_leaves_nothing(tmp_path, monkeypatch):
    """A bundle is checked for kind and size before a byte is read (sandbox.named): /dev/zero, a named
    pipe nobody writes, a folder, a file over the limit and one that holds no loadable certificate are
    each refused at once in one line naming the flag; nothing is left."""
    import os
    import tempfile

    from sandbox.named import NamedFileError
    from sandbox.network.egress import BUNDLE_LIMIT

    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    tempfile.tempdir = None  # read TMPDIR again
    os.mkfifo(tmp_path / "pipe.pem")
    (tmp_path / "plain.txt").write_text("hello")
    with open(tmp_path / "big.pem", "wb") as big:
        big.truncate(BUNDLE_LIMIT + 1)
    (tmp_path / "broken.pem").write_text("-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n")
    try:
        for bundle, says in (
            (Path("relative/ca.pem"), "give an absolute path"),
            (tmp_path / "missing.pem", str(tmp_path / "missing.pem")),
            (tmp_path / "plain.txt", "no PEM certificate"),
            (Path("/dev/zero"), "/dev/zero: is a character device, not a regular file"),
            (tmp_path / "pipe.pem", "is a named pipe, not a regular file"),
            (tmp_path, "is a folder, not a regular file"),
            (tmp_path / "big.pem", "at most 16.0 MiB is read"),
            (tmp_path / "broken.pem", "not a bundle of PEM certificates TLS can load"),
        ):
            for kwargs, flag in (({"upstream_ca": bundle}, "--allow-net-ca"), ({"trust": bundle}, "--ca-bundle")):
                with pytest.raises(NamedFileError, match=re.escape(says)) as refused:
                    Egress(["pypi"], tmp_path / "log.jsonl", "s", **kwargs).start()
                assert str(refused.value).startswith(flag) and refused.value.exit_code == 64
            with pytest.raises(NamedFileError, match=r"^--ca-bundle "):  # the one bundle for both: named as given
                Egress(["pypi"], tmp_path / "log.jsonl", "s", upstream_ca=bundle, trust=bundle).start()
        assert list((tmp_path / "tmp").iterdir()) == [], "no harness-egress-* folder is left"
    finally:
        tempfile.tempdir = None
