"""Run slots: containers a new session borrows for its first calls, started before the session exists.

A session's containers bind its workspace, which does not exist until the session is made, so a
session waits for its first container to start. A run slot is an empty directory with the
session's read-only mount points made in it (`tests/`...), and a few stub containers started on
it with exactly the config a session's tool calls use, labels aside. A new session borrows a whole
slot: the service passes the containers' attached streams over its socket (SCM_RIGHTS), the
session renames the slot's directory to be its workspace (the containers' bind mounts follow the
directory, not its name) and copies the repository into it, and its pool takes the containers as
ready ones. The loan's connection stays open for the session's life: when it closes, the service
removes whatever of the slot is left, and only then starts a replacement, so a run's own calls
never share the engine with the service's starts.

On an engine that takes workspaces as archives (rootless, or on another machine) a slot's
containers bind nothing of the folder: they have volumes where the binds would be, the stub put in
before their start, and the borrower sends its workspace and mounts into them at each call, as it
does to the containers it starts itself. They are lent the same way, over the same socket: their
streams are plain sockets to the engine (Unix or TCP), which another process can read and write as
well as the service could. Over TLS or SSH they are not, and the service keeps no run slots.

The wire form of a run (`run_request`): the call spec without labels, and the mounts with sources
under the workspace given relative to it, so the same request names the same slot whatever the
session's path.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import tempfile
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandbox.spec import Mount, SandboxSpec
from sandbox.tree import remove_tree

if TYPE_CHECKING:
    from sandbox.docker.containers import DockerSandbox

KIND = "warm"
"""The kind label of every container the warm service starts (one-shot slots and run slots)."""
MAX_RUN_KEYS = 2
"""Distinct run configs kept warm at once (the configured ones first, then the latest asked)."""


def run_request(spec: SandboxSpec, mounts: Sequence[Mount], workspace: Path) -> dict[str, Any]:
    """The wire form of a run's call config (see the module docstring)."""
    wire = []
    top = Path(workspace)
    for mount in mounts:
        source = Path(mount.source)
        entry: dict[str, Any] = {"target": mount.target, "read_only": mount.read_only}
        if source == top or top in source.parents:
            entry["workspace"] = source.relative_to(top).as_posix()
        else:
            entry["source"] = str(source)
        wire.append(entry)
    return {"spec": spec.model_dump(mode="json", exclude={"labels"}), "mounts": wire}


def slot_mounts(request: dict[str, Any], folder: Path) -> list[Mount]:
    """The mounts of a run request for a slot folder, its mount points made (empty directories)."""
    mounts = []
    for entry in request["mounts"]:
        if "workspace" in entry:
            rel = Path(entry["workspace"])
            if rel.is_absolute() or ".." in rel.parts:
                raise ValueError(f"a workspace mount must stay inside the workspace: {rel}")
            source = folder / rel
            source.mkdir(parents=True, exist_ok=True)
        else:
            source = Path(entry["source"])
        mounts.append(Mount(source=source, target=entry["target"], read_only=bool(entry["read_only"])))
    return mounts


def run_key(request: dict[str, Any]) -> str:
    return json.dumps({"spec": request["spec"], "mounts": request["mounts"]}, sort_keys=True)


class RunSlot:
    def __init__(self, folder: Path, cids: list[str]) -> None:
        self.folder, self.cids = folder, cids
        self.inode = folder.stat().st_ino
        """The folder's inode: a borrower renames it away, and a later slot may reuse its name."""

    def still_here(self) -> bool:
        try:
            return self.folder.stat().st_ino == self.inode
        except OSError:
            return False


class Loans:
    """Ready run slots per run key; at most one slot per key, refilled only when no loan is out."""

    def __init__(self, box: DockerSandbox, slots_dir: Path, per_run: int) -> None:
        self.box, self.slots_dir, self.per_run = box, slots_dir, per_run
        self._lock = threading.Lock()
        self._requests: collections.OrderedDict[str, dict[str, Any]] = collections.OrderedDict()
        self._ready: dict[str, RunSlot] = {}
        self._starting: set[str] = set()
        self._out = 0
        self.lent = 0
        """Slots lent so far."""
        self._closed = False
        self._starter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="harness-warm-runs")

    def keep(self, request: dict[str, Any]) -> str:
        """Keep a slot ready for this run config from now on (the oldest beyond MAX_RUN_KEYS dropped)."""
        key = run_key(request)
        with self._lock:
            self._requests[key] = request
            self._requests.move_to_end(key)
            while len(self._requests) > MAX_RUN_KEYS:
                old, _ = self._requests.popitem(last=False)
                if old in self._ready:
                    self._discard(self._ready.pop(old))
            self._fill()
        return key

    def take(self, request: dict[str, Any]) -> RunSlot | None:
        """The ready slot for this config, lent out (None if none is ready: nothing starts now). A
        slot with a container that died waiting (an engine restart, a prune) is discarded, never lent."""
        key = self.keep(request)
        with self._lock:
            slot = self._ready.pop(key, None)
            if slot is not None and not all(self.box.alive(cid) for cid in slot.cids):
                self._discard(slot)
                self._fill()
                return None
            if slot is not None:
                self._out += 1
                self.lent += 1
        return slot

    def returned(self, slot: RunSlot) -> None:
        """A loan ended: remove what is left of its slot, then start replacements if no loan is out."""
        self._discard(slot)
        with self._lock:
            self._out -= 1
            self._fill()

    def counts(self) -> dict[str, int]:
        with self._lock:
            return {"ready": len(self._ready), "starting": len(self._starting), "out": self._out, "lent": self.lent}

    def _fill(self) -> None:
        """Start a slot for each kept key that has none (lock held), only while no loan is out."""
        if self._closed or self._out:
            return
        for key in self._requests:
            if key not in self._ready and key not in self._starting:
                self._starting.add(key)
                self._starter.submit(self._start, key)

    def _start(self, key: str) -> None:
        slot = None
        try:
            with self._lock:
                request = self._requests.get(key)
            if request is not None and not self._closed:
                slot = self._new_slot(request)
        except Exception:  # noqa: BLE001 - a failed start is tried again at the next fill
            slot = None
        with self._lock:
            self._starting.discard(key)
            keep = slot is not None and not self._closed and key in self._requests and key not in self._ready
            if keep and slot is not None:
                self._ready[key] = slot
        if slot is not None and not keep:
            self._discard(slot)

    def _new_slot(self, request: dict[str, Any]) -> RunSlot:
        folder = Path(tempfile.mkdtemp(prefix="run-", dir=self.slots_dir))
        slot = RunSlot(folder, [])
        try:
            spec = SandboxSpec(**request["spec"])
            mounts = slot_mounts(request, folder)
            for _ in range(self.per_run):
                slot.cids.append(self.box.start_one(workspace=folder, spec=spec, mounts=mounts, kind=KIND))
        except BaseException:
            self._discard(slot)
            raise
        return slot

    def lend(self, slot: RunSlot) -> list[int]:
        """The slot's containers' streams as new descriptors, in the order of slot.cids."""
        return [self.box.lend(cid) for cid in slot.cids]

    def _discard(self, slot: RunSlot) -> None:
        """Remove a slot's containers, and its folder unless a borrower took it as a workspace."""
        for cid in slot.cids:
            self.box.remove(cid)
        if slot.still_here():
            remove_tree(slot.folder, ignore_errors=True)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            doomed = list(self._ready.values())
            self._ready.clear()
        self._starter.shutdown(wait=True)
        for slot in doomed:
            self._discard(slot)


def close_fds(fds: Sequence[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            continue


class Loan:
    """A run slot lent to this process: its folder, its containers with their streams' descriptors,
    and the connection whose closing gives back whatever of it was not used."""

    def __init__(self, request: dict[str, Any], folder: Path, containers: list[tuple[str, int]], conn: Any) -> None:
        self.request, self.folder, self.containers, self.conn = request, folder, containers, conn

    def give_back(self) -> None:
        """Unused: close the descriptors and the connection (the service removes the containers)."""
        close_fds([fd for _, fd in self.containers])
        self.containers = []
        with contextlib.suppress(OSError):
            self.conn.close()


def borrow(warm: Path, request: dict[str, Any], sessions: Path) -> Loan | None:
    """A ready run slot of the warm service in folder warm for this run config, or None (no service,
    none ready, or a slot on another filesystem than the sessions, where it cannot be renamed)."""
    from sandbox.warm import protocol
    from sandbox.warm.messages import LendRequest

    try:
        reply, fds, conn = protocol.borrow(warm, LendRequest(run=request))
    except protocol.Unavailable:
        return None
    cids = reply.containers
    folder = Path(reply.slot)
    loan = Loan(request, folder, list(zip(cids, fds, strict=False)), conn)
    usable = (
        len(cids) == len(fds)
        and folder.is_dir()
        and not folder.is_symlink()
        and folder.stat().st_dev == sessions.stat().st_dev
    )
    if not usable:
        close_fds(fds[len(loan.containers) :])
        loan.give_back()
        return None
    return loan
