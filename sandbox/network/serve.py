"""The egress proxy's process: `python -m sandbox.network.serve --socket PATH --log FILE --owner PID
--allow ENTRY...`. It serves until SIGTERM, or until its owner (the controller of the session) is
gone: a controller killed with SIGKILL leaves it for at most a second, and `harness sandbox prune`
finds any that remain by their command line (`MARKER`)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import ssl
import sys
import threading
from pathlib import Path

from sandbox.network.allow import Allowlist, parse
from sandbox.network.egress import CA_NAME, ENVIRONMENT_NAME, MARKER, SOCKET_NAME
from sandbox.network.proxy import EgressProxy, RequestRecord, as_dict
from sandbox.network.secrets import Secret, SessionCA, upstream_context


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MARKER}")
    parser.add_argument("--socket", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--owner", type=int, required=True)
    parser.add_argument("--session", default="")
    parser.add_argument("--allow", action="append", default=[])
    parser.add_argument("--secrets-on-stdin", action="store_true")
    args = parser.parse_args(argv)
    secrets, ca, upstream = _secrets(sys.stdin.readline() if args.secrets_on_stdin else "")
    proxy_log = open(args.log, "a", encoding="utf-8")  # noqa: SIM115 - held for the process's life
    lock = threading.Lock()

    def record(entry: RequestRecord) -> None:
        line = json.dumps(as_dict(entry), separators=(",", ":")) + "\n"
        with lock:
            proxy_log.write(line)
            proxy_log.flush()

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    path = Path(args.socket)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        path.unlink(missing_ok=True)
        if ca is not None:  # what the containers trust, beside the socket (the key stays in this process)
            (path.parent / CA_NAME).write_bytes(ca.pem())
            os.chmod(path.parent / CA_NAME, 0o644)
        listener.bind(f"{path}.new")
        listener.listen(128)
        os.chmod(f"{path}.new", 0o666)  # the containers' user is not this one
        os.rename(f"{path}.new", path)  # the socket appears only once it serves (the parent waits for it)
        server = threading.Thread(
            target=EgressProxy(Allowlist(parse(args.allow)), record, secrets, ca, upstream).serve,
            args=(listener, stop),
            daemon=True,
        )
        server.start()
        while not stop.wait(1.0) and _alive(args.owner):
            pass
        stop.set()
        server.join(2)
    finally:
        listener.close()
        proxy_log.close()
        _remove_folder(path.parent)
    return 0


def _remove_folder(folder: Path) -> None:
    """The socket's private folder and what the proxy and its starter put there (a controller killed
    before its own cleanup leaves nothing in /tmp either)."""
    for name in (SOCKET_NAME, f"{SOCKET_NAME}.new", CA_NAME, ENVIRONMENT_NAME):
        (folder / name).unlink(missing_ok=True)
    try:
        folder.rmdir()
    except OSError:
        pass  # something else is in it: not ours to remove


def _secrets(line: str) -> tuple[list[Secret], SessionCA | None, ssl.SSLContext | None]:
    """The secrets the parent wrote on stdin (never on the command line, which others can read)."""
    if not line.strip():
        return [], None, None
    data = json.loads(line)
    secrets = [Secret(**item) for item in data["secrets"]]
    return secrets, SessionCA(), upstream_context(data.get("upstream_ca"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie owner (killed, not yet reaped) is gone too
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().rsplit(")", 1)[-1].split()[0] != "Z"
    except OSError:
        return True


if __name__ == "__main__":
    sys.exit(main())
