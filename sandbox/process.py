"""Who made an engine object: a process named so that "its maker is gone" can be proved.

Every container, volume and network harness makes carries its maker's process id and an identity of
that process: its start time (clock ticks since boot, as the kernel counts them), the boot it ran
in, and the machine and process namespace its pid belongs to. A pid alone is not proof: pids are
reused, and another machine's (or another container's) pid 1234 is not this one's. An object's maker
is provably gone when its identity names this machine and this pid namespace and (the boot differs,
or no such pid lives, or it is a zombie, or the pid now belongs to a process that started at another
time). Anything else (another machine's object, an identity that cannot be read) is never called
gone: a prune leaves it, so nothing of a live controller is ever removed.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path


def start_ticks(pid: int) -> str | None:
    """The process's start time (clock ticks since boot: /proc/PID/stat field 22), or None when there
    is no such process (or it cannot be read)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0] in ("Z", "X")
    except (OSError, IndexError):
        return False


@functools.cache
def machine() -> str:
    """This machine and pid namespace: its machine id (or host name) and the namespace's inode."""
    ident = ""
    for source in ("/etc/machine-id", "/var/lib/dbus/machine-id"):
        try:
            ident = Path(source).read_text().strip()
            break
        except OSError:
            continue
    try:
        namespace = os.readlink("/proc/self/ns/pid").removeprefix("pid:").strip("[]")
    except OSError:
        namespace = "?"
    return f"{ident or os.uname().nodename}/{namespace}"


@functools.cache
def boot() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return "?"


def identity(pid: int | None = None) -> str:
    """The identity label of a process (default: this one): `START@BOOT@MACHINE/NAMESPACE`."""
    pid = os.getpid() if pid is None else pid
    return f"{start_ticks(pid) or '?'}@{boot()}@{machine()}"


def gone(pid_text: str, ident: str | None) -> bool:
    """Whether the process a pid label and an identity label name is provably gone (see the module).
    Without an identity (an object of an older harness), the pid alone decides on this machine, as it
    always did."""
    if not pid_text.isdigit():
        return ident is None  # no maker named: only an object of an older harness is taken as gone
    pid = int(pid_text)
    if ident is None:
        return start_ticks(pid) is None or is_zombie(pid)
    started, _, rest = ident.partition("@")
    booted, _, where = rest.partition("@")
    if where != machine() or "?" in (started, booted, boot()):
        return False  # another machine or namespace, or nothing to compare: never provably gone
    if booted != boot():
        return True
    now = start_ticks(pid)
    return now is None or now != started or is_zombie(pid)
