"""A session's egress proxy, from the host's side: started as its own process (so a flood of traffic
or a bug in it never stalls the controller) on a Unix socket in a short private folder, stopped with
the session, its requests appended to the session's network log."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from sandbox.errors import SandboxError
from sandbox.named import NamedFileError, read_named
from sandbox.network.allow import parse
from sandbox.network.secrets import Secret

MARKER = "sandbox.network.serve"
"""The proxy's module, which its command line holds (prune looks for it)."""
CA_NAME = "ca.pem"
"""The session CA's certificate, beside the socket (containers trust it when the session has secrets)."""
TRUST_NAME = "trust.pem"
"""The user's `--ca-bundle`, beside the socket (containers trust it: an intercepting proxy's CA)."""
SOCKET_NAME = "proxy.sock"
ENVIRONMENT_NAME = "environment.json"
"""The secrets' placeholders by variable name, beside the socket (what the containers' environment gets)."""
CONTAINER_DIR = "/run/harness-egress"
"""Where a container sees the socket's folder (read-only)."""
RELAY_PORT = 3128
"""The port the relay serves inside each container, on 127.0.0.1."""
START_TIMEOUT_S = 20.0
BUNDLE_LIMIT = 16 * 1024**2
"""A CA bundle larger than this is refused (the system's whole bundle is a few hundred KiB)."""


class EgressError(SandboxError):
    """The egress proxy could not be started."""

    infra_cause = "sandbox_failed"


class Egress:
    """One session's proxy process; `folder` is what containers mount. A context manager."""

    def __init__(
        self,
        allow: Sequence[str],
        log: Path,
        session: str = "",
        secrets: Sequence[Secret] = (),
        upstream_ca: Path | None = None,
        trust: Path | None = None,
    ) -> None:
        """trust: a PEM bundle the session's containers trust (`--ca-bundle`), put beside the socket."""
        parse(allow)  # an entry that cannot be read fails here, before any process starts
        upstream_flag = "--ca-bundle" if upstream_ca is not None and upstream_ca == trust else "--allow-net-ca"
        self.upstream_pem = pem_bundle(upstream_ca, upstream_flag) if upstream_ca is not None else None
        trusted = pem_bundle(trust, "--ca-bundle") if trust is not None else None
        self.allow, self.log, self.session = list(allow), Path(log), session
        self.secrets = list(secrets)
        self.folder = Path(tempfile.mkdtemp(prefix="harness-egress-"))
        os.chmod(self.folder, 0o755)  # the containers' user traverses it to reach the socket
        if self.secrets:  # what the containers see instead of the values
            placeholders = {secret.name: secret.placeholder for secret in self.secrets}
            (self.folder / ENVIRONMENT_NAME).write_text(json.dumps(placeholders))
        if trusted is not None:
            (self.folder / TRUST_NAME).write_bytes(trusted)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def socket(self) -> Path:
        return self.folder / SOCKET_NAME

    def start(self) -> Egress:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", MARKER, "--socket", str(self.socket), "--log", str(self.log)]
        argv += ["--owner", str(os.getpid()), "--session", self.session]
        for entry in self.allow:
            argv += ["--allow", entry]
        if self.secrets:
            argv.append("--secrets-on-stdin")
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE if self.secrets else subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            start_new_session=True,
            env=_environment(),
            cwd="/",
        )
        if self.secrets and self.process.stdin is not None:  # on stdin: a command line is readable by others
            message = {
                "secrets": [dataclasses.asdict(secret) for secret in self.secrets],
                "upstream_ca": self.upstream_pem.decode("ascii") if self.upstream_pem else None,
            }
            with contextlib.suppress(BrokenPipeError):
                self.process.stdin.write((json.dumps(message) + "\n").encode())
            self.process.stdin.close()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self.socket.exists():
            if self.process.poll() is not None:
                error = (self.process.stderr.read() if self.process.stderr else b"").decode("utf-8", "replace")
                raise EgressError(f"the egress proxy exited at start: {error.strip().splitlines()[-1:] or 'no output'}")
            if time.monotonic() > deadline:
                self.stop()
                raise EgressError(f"the egress proxy did not start within {START_TIMEOUT_S:g} s")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        if self.process is not None and self.process.stderr:
            self.process.stderr.close()
        self.process = None
        for leftover in self.folder.glob("*"):
            leftover.unlink(missing_ok=True)
        try:
            self.folder.rmdir()
        except OSError:
            pass

    def __enter__(self) -> Egress:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def pem_bundle(path: Path, flag: str) -> bytes:
    """A CA bundle's bytes, read once (sandbox.named: a regular file of at most BUNDLE_LIMIT) and checked
    to be PEM certificates TLS can load; NamedFileError (a bad flag) naming the flag and the file."""
    import ssl

    path = Path(path).expanduser()
    if not path.is_absolute():
        raise NamedFileError(f"{flag} {path}: give an absolute path (the proxy does not run in this folder)")
    data = read_named(path, what=flag, limit=BUNDLE_LIMIT)
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise NamedFileError(f"{flag} {path}: no PEM certificate in it (-----BEGIN CERTIFICATE-----)")
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=data.decode("ascii"))
    except (ssl.SSLError, UnicodeDecodeError, ValueError) as error:
        reason = str(getattr(error, "reason", None) or error).splitlines()[0][:120]
        raise NamedFileError(f"{flag} {path}: not a bundle of PEM certificates TLS can load ({reason})") from None
    return data


def _environment() -> dict[str, str]:
    """The proxy's environment: enough to find its interpreter and the sandbox package, nothing else."""
    keep = ("PATH", "LANG", "LC_ALL", "PYTHONPATH", "VIRTUAL_ENV", "HOME")
    found = {key: os.environ[key] for key in keep if key in os.environ}
    package_root = str(Path(__file__).resolve().parents[2])
    found["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, found.get("PYTHONPATH", "")]))
    return found


def leftover_proxies() -> list[int]:
    """Pids of egress proxies whose owner is gone (what `harness sandbox prune` ends)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if MARKER.encode() not in argv or b"--owner" not in argv:
            continue
        owner = int(argv[argv.index(b"--owner") + 1])
        if not Path(f"/proc/{owner}").exists():
            found.append(int(entry.name))
    return found
