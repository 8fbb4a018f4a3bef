"""What a session may reach: `--allow-net` entries (a host, `*.suffix`, an address or a range, each
with an optional port; or a preset naming an ecosystem's hosts), and the addresses that are refused
whatever a name resolves to (private, loopback, link-local, metadata...) unless listed explicitly."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

DEFAULT_PORTS = (80, 443)
"""The ports an entry without one allows."""
ANY_PORT: tuple[int, ...] = ()
"""`HOST:*`: every port of the host (how frameworks whose allowlists name hosts only are mapped)."""
PRESETS: dict[str, tuple[str, ...]] = {
    "pypi": ("pypi.org", "files.pythonhosted.org"),
    "npm": ("registry.npmjs.org", "registry.yarnpkg.com"),
    "crates": ("crates.io", "index.crates.io", "static.crates.io"),
    "go": ("proxy.golang.org", "sum.golang.org", "storage.googleapis.com"),
    "github": ("github.com", "api.github.com", "codeload.github.com", "objects.githubusercontent.com",
               "raw.githubusercontent.com"),
    "debian": ("deb.debian.org", "security.debian.org"),
}  # fmt: skip
"""Named sets of hosts, for the package registries and code hosts a setup usually needs."""
_NAME = re.compile(r"^(\*\.)?([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*\.?$")
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class AllowError(ValueError):
    """An `--allow-net` entry harness cannot read (the message names it and says the form)."""


@dataclass(frozen=True)
class Entry:
    """One allowed destination: a name (exact, or every subdomain of a `*.` suffix) or an address
    range, and the ports it allows."""

    name: str | None
    network: Network | None
    ports: tuple[int, ...]
    text: str

    def allows_port(self, port: int) -> bool:
        return self.ports == ANY_PORT or port in self.ports

    def allows_name(self, host: str, port: int) -> bool:
        if self.name is None or not self.allows_port(port):
            return False
        if self.name.startswith("*."):
            return host.endswith(self.name[1:]) and host != self.name[2:]
        return host == self.name

    def holds(self, address: Address, port: int) -> bool:
        return self.network is not None and address in self.network and self.allows_port(port)


def parse(entries: Iterable[str]) -> list[Entry]:
    """Entries and presets as given (AllowError names the first that cannot be read)."""
    found: list[Entry] = []
    for raw in entries:
        text = raw.strip()
        if text.lower() in PRESETS:
            found += [_entry(host, host) for host in PRESETS[text.lower()]]
        else:
            found.append(_entry(text, text))
    return found


def _entry(text: str, shown: str) -> Entry:
    if "://" in text or ("/" in text and _address(text.split("/", 1)[0]) is None):
        host = text.split("://", 1)[-1].split("/", 1)[0].rsplit("@", 1)[-1]
        raise AllowError(f"--allow-net {shown!r} is a URL: give a host, not a URL (try --allow-net {host})")
    host, ports = _split_port(text.strip().lower())
    if not host:
        raise AllowError(f"--allow-net {shown!r}: empty host ({_FORM})")
    try:
        network = ipaddress.ip_network(host.strip("[]"), strict=False)
    except ValueError:
        network = None
    if network is not None:
        return Entry(None, network, ports, shown)
    if "/" in host or not _NAME.match(host) or "*" in host.removeprefix("*."):
        raise AllowError(f"--allow-net {shown!r}: not a host name, address or preset ({_FORM})")
    return Entry(host.rstrip("."), None, ports, shown)


_FORM = f"HOST[:PORT|:*], *.SUFFIX[:PORT], ADDRESS[/BITS][:PORT] or a preset: {', '.join(PRESETS)}"


def _split_port(text: str) -> tuple[str, tuple[int, ...]]:
    if text.startswith("["):  # [v6]:port
        host, _, rest = text[1:].partition("]")
        port = rest.removeprefix(":")
    elif text.count(":") == 1:
        host, _, port = text.partition(":")
    else:
        host, port = text, ""
    if not port:
        return host, DEFAULT_PORTS
    if port == "*":
        return host, ANY_PORT
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise AllowError(f"--allow-net {text!r}: the port must be a number from 1 to 65535")
    return host, (int(port),)


SPECIAL_RANGES: tuple[tuple[str, str], ...] = (
    ("192.0.2.0/24", "a documentation range (TEST-NET-1, RFC 5737)"),
    ("198.51.100.0/24", "a documentation range (TEST-NET-2, RFC 5737)"),
    ("203.0.113.0/24", "a documentation range (TEST-NET-3, RFC 5737)"),
    ("198.18.0.0/15", "the benchmarking range (RFC 2544)"),
    ("100.64.0.0/10", "shared address space (carrier-grade NAT, RFC 6598)"),
    ("10.0.0.0/8", "a private range (RFC 1918)"),
    ("172.16.0.0/12", "a private range (RFC 1918)"),
    ("192.168.0.0/16", "a private range (RFC 1918)"),
    ("fc00::/7", "a unique local range (RFC 4193)"),
)
"""Ranges named by what they are, not just "private": a registry resolving into a documentation or
benchmarking range is a sign of split DNS or an intercepting proxy, which the refusal line says."""


def refused_kind(address: Address) -> str | None:
    """Why an address is never reached unless listed: its kind, or None for a public address."""
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:
        address = mapped
    if address == ipaddress.ip_address("169.254.169.254") or address == ipaddress.ip_address("fd00:ec2::254"):
        return "cloud metadata"
    for cidr, named in SPECIAL_RANGES:
        if address in ipaddress.ip_network(cidr):
            return named
    for kind, test in (
        ("loopback", address.is_loopback),
        ("link-local", address.is_link_local),
        ("private", address.is_private),
        ("multicast", address.is_multicast),
        ("reserved", address.is_reserved),
        ("unspecified", address.is_unspecified),
    ):
        if test:
            return kind
    return None


class Allowlist:
    """The decisions of one session's proxy: may this host and port be asked for, and may this
    address be connected to for it."""

    def __init__(self, entries: Sequence[Entry]) -> None:
        self.entries = list(entries)

    def host_refusal(self, host: str, port: int) -> str | None:
        """Why a CONNECT target or an HTTP Host is refused before any lookup, or None."""
        host = host.strip().lower().rstrip(".")
        literal = _address(host)
        if literal is not None:
            if any(entry.holds(literal, port) for entry in self.entries):
                return None
            return f"{host} is an address; only addresses listed with --allow-net are reached"
        if any(entry.allows_name(host, port) for entry in self.entries):
            return None
        return f"{host}:{port} is not on the session's --allow-net list"

    def address_refusal(self, host: str, address: Address, port: int) -> str | None:
        """Why an address a name resolved to may not be connected to (checked after DNS, so a
        name that rebinds to an inside address is refused), or None."""
        if any(entry.holds(address, port) for entry in self.entries):
            return None
        kind = refused_kind(address)
        if kind is None:
            return None
        said = f"{host} resolves to {address} ({kind}); list that address with --allow-net {address} to reach it"
        if kind.startswith(("a documentation", "the benchmarking", "shared address")):
            said += " (split DNS or an intercepting proxy does this: if it also re-signs TLS, add --ca-bundle FILE)"
        return said


def _address(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None
