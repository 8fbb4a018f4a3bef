"""Secrets by placeholder: a container sees only a random placeholder of the secret's length; the
egress proxy, and only for requests to the secret's host, terminates TLS with a certificate of the
session's own CA (which the containers trust), puts the real value in place of the placeholder in
the request's headers, and puts the placeholder back in place of the value in what the host answers
(so an echo never carries the value into a container)."""

from __future__ import annotations

import datetime
import ipaddress
import secrets as random
import ssl
import string
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

MIN_LENGTH = 12
"""A shorter value could be guessed from its placeholder's length and is refused."""
_ALPHABET = string.ascii_letters + string.digits


class SecretError(ValueError):
    """A secret that cannot be bound (the message names it, never its value)."""


@dataclass(frozen=True)
class Secret:
    """One binding: the container's variable, the host that gets the value, and the two strings."""

    name: str
    host: str
    value: str = field(repr=False)
    placeholder: str = ""
    path: str = ""
    """Only requests whose target starts with this get the value ("": every request to the host)."""

    @property
    def hostname(self) -> str:
        return self.host.rsplit(":", 1)[0] if self.host.count(":") == 1 else self.host

    def port_matches(self, port: int) -> bool:
        return ":" not in self.host or self.host.rsplit(":", 1)[1] == str(port)


def bind(name: str, host: str, value: str, path: str = "") -> Secret:
    """A secret with a fresh placeholder of the value's own length (path: the requests it goes with)."""
    if len(value) < MIN_LENGTH:
        raise SecretError(f"--secret {name}: the value is shorter than {MIN_LENGTH} characters")
    if any(ch in value for ch in "\r\n\0"):
        raise SecretError(f"--secret {name}: the value holds a line break or NUL; it cannot go in a header")
    placeholder = "".join(random.choice(_ALPHABET) for _ in range(len(value)))
    return Secret(name=name, host=host.lower(), value=value, placeholder=placeholder, path=path)


class SessionCA:
    """The session's own certificate authority (made in the proxy's process, its key never written)
    and the server contexts it signs, one per secret's host."""

    def __init__(self) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        now = datetime.datetime.now(datetime.UTC)
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "harness session egress CA")])
        self.certificate = (
            x509.CertificateBuilder().subject_name(self._name).issuer_name(self._name)
            .public_key(self._key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=7))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
            .sign(self._key, hashes.SHA256())
        )  # fmt: skip
        self._contexts: dict[str, ssl.SSLContext] = {}
        self._lock = threading.Lock()

    def pem(self) -> bytes:
        from cryptography.hazmat.primitives import serialization

        return self.certificate.public_bytes(serialization.Encoding.PEM)

    def server_context(self, host: str) -> ssl.SSLContext:
        """A TLS server context presenting a certificate for host signed by this CA."""
        with self._lock:
            found = self._contexts.get(host)
            if found is None:
                found = self._contexts[host] = self._make(host)
            return found

    def _make(self, host: str) -> ssl.SSLContext:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        now = datetime.datetime.now(datetime.UTC)
        key = ec.generate_private_key(ec.SECP256R1())
        try:
            alternative: x509.GeneralName = x509.IPAddress(ipaddress.ip_address(host))
        except ValueError:
            alternative = x509.DNSName(host)
        leaf = (
            x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, host)]))
            .issuer_name(self._name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(hours=1)).not_valid_after(now + datetime.timedelta(days=7))
            .add_extension(x509.SubjectAlternativeName([alternative]), critical=False)
            .sign(self._key, hashes.SHA256())
        )  # fmt: skip
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.set_alpn_protocols(["http/1.1"])  # headers are read as HTTP/1.1
        with tempfile.TemporaryDirectory(prefix="harness-egress-tls-") as folder:  # ssl loads files only
            cert, private = Path(folder) / "cert.pem", Path(folder) / "key.pem"
            cert.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
            private.write_bytes(
                key.private_bytes(
                    serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
                )
            )
            private.chmod(0o600)
            context.load_cert_chain(str(cert), str(private))
        return context


def upstream_context(extra_ca: str | None) -> ssl.SSLContext:
    """How the proxy checks a secret's host: the system's trust, plus extra_ca (PEM text) when given."""
    context = ssl.create_default_context()
    if extra_ca:
        context.load_verify_locations(cadata=extra_ca)
    context.set_alpn_protocols(["http/1.1"])
    return context


class Swap:
    """Replaces one byte string by another of the same length in a stream cut into chunks anywhere.
    Only a tail that could be the start of the string waits for the next chunk, so an answer that
    ends is never held back."""

    def __init__(self, old: bytes, new: bytes) -> None:
        if len(old) != len(new) or not old:
            raise ValueError("a swap keeps the length")
        self.old, self.new, self._held = old, new, b""

    def feed(self, data: bytes) -> bytes:
        """What may be sent now."""
        data = (self._held + data).replace(self.old, self.new)
        keep = _prefix_tail(data, self.old)
        self._held = data[len(data) - keep :] if keep else b""
        return data[: len(data) - keep]

    def end(self) -> bytes:
        held, self._held = self._held, b""
        return held


def _prefix_tail(data: bytes, old: bytes) -> int:
    """The length of the longest end of data that is a start of old (shorter than old)."""
    for size in range(min(len(old) - 1, len(data)), 0, -1):
        if old.startswith(data[-size:]):
            return size
    return 0
