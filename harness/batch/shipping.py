"""Repositories for workers that do not see them, and sessions back from those workers.

A worker that sees the batch directory (the probe file the client writes there holds the batch's
token) shares the client's filesystem: it uses each repository in place and writes sessions into
the batch directory. One that does not (another machine, no shared filesystem) works from its
*store* (`harness worker --store DIR`): the client packs each repository once (a deterministic tar,
named by its SHA-256) and scatters it to the cluster; a worker fetches it the first time one of its
task-runs needs it, unpacks it into `repos/<digest>/` under a lock, and every later task-run on that
machine uses the copy, so 500 tasks on one repository ship it once per machine. Its sessions live in
`sessions/<batch>/` of the store (a rerun that lands on the same machine resumes them), and what a
report needs of each (trajectory, state, patch, step log; not the workspace or snapshot objects,
which stay on the worker) comes back with the record.

Archives are made and opened by harness.batch.archive, which trusts nothing in them.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import platformdirs

from harness.batch.archive import digest, pack, unpack_into
from harness.errors import ConfigError
from sandbox.layout import objects_dir

STORE: Path = platformdirs.user_cache_path("harness") / "worker"
"""This worker's store; `harness worker --store DIR` sets it at start (see harness.batch.preload)."""
LEFT_BEHIND = frozenset({"workspace", "store", "lock"})
"""What of a session folder stays on the worker (large, and only needed to resume or roll back there)."""
FETCH_TIMEOUT_S = 600.0

Source = Literal["in_place", "fetched", "cached"]
"""Where a task-run's repository came from: used where it is, brought by this task-run, or the copy
an earlier task-run brought to this machine."""


class ShipmentLost(Exception):
    """The scattered repository is gone from the cluster (the worker holding it died)."""


class Shipped:
    """A packed repository on the cluster: its digest and the Dask key of its bytes (the client holds
    the future, which keeps them there). A plain object, so Dask hands it to the task as it is
    instead of moving the bytes before every task-run; the worker fetches them only when its store
    lacks the digest."""

    __slots__ = ("digest", "key")

    def __init__(self, digest: str, key: str) -> None:
        self.digest, self.key = digest, key

    def data(self, timeout: float) -> bytes:
        """The bytes, from whichever worker holds them (called inside a task)."""
        from distributed import Future, get_client

        # state="memory": the key is already held by the cluster, so the future resolves at once (a bare
        # Future(key) waits for an update the scheduler never sends this client). The handler table
        # Future looks it up in is keyed by these names; its annotation says FutureState.
        future: Future[bytes] = Future(self.key, client=get_client(), state="memory")  # type: ignore[arg-type]
        return bytes(future.result(timeout=timeout))


def use_store(path: Path) -> None:
    """Make path this worker process's store (called once, when the worker starts)."""
    global STORE
    STORE = Path(path).expanduser().resolve()
    STORE.mkdir(parents=True, exist_ok=True)


# --- the client side ----------------------------------------------------------------------------


class Shipper:
    """The client's side: each repository packed and scattered once (content addressed: two paths
    with the same tree share one shipment), each model or reference file read once."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._by_path: dict[Path, Shipped] = {}
        self._by_digest: dict[str, Shipped] = {}
        self._futures: dict[str, Any] = {}
        """By digest: held while the batch runs, so the cluster keeps the bytes."""
        self._files: dict[str, bytes] = {}

    def repo(self, path: Path) -> Shipped:
        if path not in self._by_path:
            if not path.is_dir():
                raise ConfigError(f"repository path is not a directory: {path}")
            try:
                data = pack(path)
            except OSError as error:  # an unreadable file, a file that changed while packed
                raise ConfigError(f"cannot pack {path} to ship it to the workers: {error}") from None
            name = digest(data)
            if name not in self._by_digest:
                self._futures[name] = self._client.scatter(data, hash=False)
                self._by_digest[name] = Shipped(name, self._futures[name].key)
            self._by_path[path] = self._by_digest[name]
        return self._by_path[path]

    def files(self, paths: list[Path]) -> dict[str, bytes]:
        """Contents of the files that exist among paths, by path."""
        for path in paths:
            if str(path) not in self._files and path.is_file():
                try:
                    self._files[str(path)] = path.read_bytes()
                except OSError as error:
                    raise ConfigError(f"cannot read {path} to ship it to the workers: {error}") from None
        return {str(path): self._files[str(path)] for path in paths if str(path) in self._files}

    def lost(self, path: Path) -> None:
        """The shipment of path is gone with a dead worker: the next `repo(path)` ships it again."""
        shipped = self._by_path.pop(path, None)
        if shipped is not None:
            self._by_digest.pop(shipped.digest, None)
            self._futures.pop(shipped.digest, None)
            self._by_path = {p: s for p, s in self._by_path.items() if s.digest != shipped.digest}


# --- the worker side ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Place:
    """Where one task-run works: its sessions folder and its repository."""

    sessions: Path
    repo: Path
    source: Source
    shared: bool
    """The worker sees the batch directory (nothing is shipped back)."""


def shares_batch_dir(probe: Path | None, token: str) -> bool:
    """Whether this process sees the client's batch directory (its probe file holds the token)."""
    if probe is None:
        return True  # a client that wrote no probe runs its workers on its own machine
    try:
        return probe.read_text(encoding="utf-8").strip() == token
    except OSError:
        return False


def place(sessions: Path, repo: Path, *, probe: Path | None, batch_id: str, shipped: Shipped | None) -> Place:
    """The batch directory and the repository where they are, or this worker's copies."""
    if shares_batch_dir(probe, batch_id):
        return Place(sessions, repo, "in_place", shared=True)
    if shipped is None:
        raise ConfigError(
            f"this worker does not see the batch directory (no {probe}) and the repository {repo} was not "
            "shipped: run the batch with --cluster, or give the workers the same filesystem"
        )
    copy, source = fetch(shipped)
    return Place(worker_sessions(batch_id), copy, source, shared=False)


def worker_sessions(batch_id: str) -> Path:
    """This worker's sessions folder of a batch; its object store is the worker store's, shared by
    every batch this machine serves (`.objects` links to `objects/` of the store)."""
    sessions = STORE / "sessions" / batch_id
    link = objects_dir(sessions)
    if not link.exists():
        (STORE / "objects").mkdir(parents=True, exist_ok=True)
        sessions.mkdir(parents=True, exist_ok=True)
        staging = sessions / f".objects.{uuid.uuid4().hex[:8]}"
        os.symlink(STORE / "objects", staging)
        os.replace(staging, link)  # several worker processes at once: the same link, whoever is last
    return sessions


def fetch(shipped: Shipped) -> tuple[Path, Source]:
    """The store's copy of a shipped repository, fetched and unpacked the first time it is needed on
    this machine (one fetch even when several worker processes ask at once)."""
    target = STORE / "repos" / shipped.digest
    if target.is_dir():
        return target, "cached"
    with locked(STORE / "repos" / f".{shipped.digest}.lock"):
        if target.is_dir():
            return target, "cached"
        try:
            data = shipped.data(FETCH_TIMEOUT_S)
        except Exception as error:  # noqa: BLE001 - lost with a dead worker, cancelled, timed out: all the same here
            raise ShipmentLost(f"{type(error).__name__}: {error}") from None
        if digest(data) != shipped.digest:
            raise ShipmentLost("the shipped repository does not match its digest")
        unpack_into(data, target)
    return target, "fetched"


def keep_file(content: bytes, original: str) -> Path:
    """A shipped single file (a scripted model, a reference) in the store, named by its digest."""
    folder = STORE / "files" / digest(content)
    path = folder / (Path(original).name or "file")
    if not path.is_file():
        folder.mkdir(parents=True, exist_ok=True)
        staging = folder / f".{uuid.uuid4().hex[:8]}"
        staging.write_bytes(content)
        os.replace(staging, path)
    return path


def session_files(folder: Path) -> bytes:
    """What of a session folder goes back to the client (see LEFT_BEHIND)."""
    return pack(folder, leave=LEFT_BEHIND)


def receive_session(data: bytes, folder: Path) -> None:
    """Put a session's returned files at folder, replacing what an earlier attempt returned."""
    unpack_into(data, folder)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Held by one process of the machine at a time (a fetch into the store, a parent's adoption)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
