"""The egress proxy's process: `python -m sandbox.network.serve --socket PATH --log FILE --owner PID
--allow ENTRY...`. It serves until SIGTERM, or until its owner (the controller of the session) is
gone: a controller killed with SIGKILL leaves it for at most a second, and `harness sandbox prune`
finds any that remain by their command line (`MARKER`)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
from pathlib import Path

from sandbox.network.allow import Allowlist, parse
from sandbox.network.proxy import EgressProxy, RequestRecord, as_dict

MARKER = "sandbox.network.serve"
"""What a proxy's command line holds (prune looks for it)."""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {MARKER}")
    parser.add_argument("--socket", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--owner", type=int, required=True)
    parser.add_argument("--session", default="")
    parser.add_argument("--allow", action="append", default=[])
    args = parser.parse_args(argv)
    allowlist = Allowlist(parse(args.allow))
    log = open(args.log, "a", encoding="utf-8")  # noqa: SIM115 - held for the process's life

    def record(entry: RequestRecord) -> None:
        log.write(json.dumps(as_dict(entry), separators=(",", ":")) + "\n")
        log.flush()

    try:
        asyncio.run(_serve(EgressProxy(allowlist, record), args.socket, args.owner))
    finally:
        log.close()
        Path(args.socket).unlink(missing_ok=True)
    return 0


async def _serve(proxy: EgressProxy, path: str, owner: int) -> None:
    Path(path).unlink(missing_ok=True)
    server = await proxy.serve(path + ".new")
    os.chmod(path + ".new", 0o666)  # the containers' user is not this one
    os.rename(path + ".new", path)  # the socket appears only once it serves (the parent waits for it)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with server:
        while not stop.is_set() and _alive(owner):
            with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)


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
