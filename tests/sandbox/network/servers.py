"""The "internet" of the network tests: an HTTP and an HTTPS server on 127.0.0.1 (the HTTPS one with a
certificate for `localhost` and 127.0.0.1, signed by a CA made here), and a client of the egress
proxy's Unix socket that speaks as a container's program would."""

from __future__ import annotations

import datetime
import http.server
import ipaddress
import socket
import ssl
import threading
from pathlib import Path
from typing import Any, ClassVar

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

BODY = b"hello from the test's own internet\n"


def make_ca(folder: Path, addresses: tuple[str, ...] = ("127.0.0.1",)) -> tuple[Path, Path, Path]:
    """(ca.pem, server cert, server key) for `localhost` and the addresses (127.0.0.1)."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "harness test CA")])
    ca = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.DNSName("localhost"), *(x509.IPAddress(ipaddress.ip_address(a)) for a in addresses)]
    cert = (
        x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .sign(ca_key, hashes.SHA256())
    )  # fmt: skip
    folder.mkdir(parents=True, exist_ok=True)
    paths = folder / "ca.pem", folder / "server.pem", folder / "server.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    files: ClassVar[dict[str, bytes]] = {}
    seen: ClassVar[list[dict[str, Any]]] = []

    def do_GET(self) -> None:
        self.seen.append({"path": self.path, "headers": dict(self.headers.items())})
        body = self.files.get(self.path.split("?")[0], BODY if self.path.startswith("/hello") else None)
        if self.path.startswith("/echo"):  # what a careless API does: the credential back in the answer
            body = (self.headers.get("Authorization") or "").encode()
        if body is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        kind = "text/html" if self.path.endswith("/") else "application/octet-stream"
        self.send_header("Content-Type", "application/json" if body[:1] == b"{" else kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        return None


class Server:
    """An HTTP (or, with a cert, HTTPS) server on 127.0.0.1 serving /hello and the given files."""

    def __init__(
        self, files: dict[str, bytes] | None = None, cert: tuple[Path, Path] | None = None, host: str = "127.0.0.1"
    ) -> None:
        """host: another loopback address (127.0.0.2) is reached through the egress proxy from inside a
        container, where 127.0.0.1 and localhost are NO_PROXY (the container's own loopback)."""
        handler = type("Handler", (_Handler,), {"files": dict(files or {}), "seen": []})
        self.handler = handler
        self.host = host
        self.httpd = http.server.ThreadingHTTPServer((host, 0), handler)
        if cert is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(str(cert[0]), str(cert[1]))
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def seen(self) -> list[dict[str, Any]]:
        return self.handler.seen

    def __enter__(self) -> Server:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def proxy_socket(path: Path) -> socket.socket:
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.settimeout(10)
    client.connect(str(path))
    return client


def read_all(conn: socket.socket) -> bytes:
    data = b""
    while chunk := conn.recv(65536):
        data += chunk
    return data


def http_get(proxy: Path, url: str) -> bytes:
    """What a plain-HTTP client gets through the proxy: the whole answer."""
    host = url.split("/")[2]
    with proxy_socket(proxy) as conn:
        conn.sendall(f"GET {url} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: test\r\n\r\n".encode())
        return read_all(conn)


def connect(proxy: Path, target: str) -> tuple[socket.socket, bytes]:
    """A CONNECT: the socket and the proxy's answer head."""
    conn = proxy_socket(proxy)
    conn.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = conn.recv(4096)
        if not chunk:
            break
        head += chunk
    return conn, head


def tls_get(conn: socket.socket, ca: Path, server_name: str, path: str = "/hello") -> bytes:
    """An HTTPS GET over an open tunnel, TLS checked against the test CA for server_name."""
    context = ssl.create_default_context(cafile=str(ca))
    with context.wrap_socket(conn, server_hostname=server_name) as tls:
        tls.sendall(f"GET {path} HTTP/1.1\r\nHost: {server_name}\r\nConnection: close\r\n\r\n".encode())
        return read_all(tls)
