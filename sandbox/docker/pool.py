"""Warm pool of pre-started, single-use containers.

A container handed out by `acquire` is never handed out again: after its one call it goes to
`release`, which kills and removes it in the background. The caller then calls `prewarm` to start a
replacement in the background — after its call, so the start does not compete with the call for
the engine — and the next call finds a running container and pays roughly one `exec`. A key keeps
`initial` containers ready at first and one more (up to `size`) each time a call found none ready:
a model that thinks between calls needs one, a turn of concurrent calls or a script that calls back
to back grows the pool, and a session that starts small pays for few containers it never uses (each
costs the engine a start and a removal, the limit of a batch on a small host). Containers are
keyed by their full engine config (image id, limits, workspace, mounts); the least recently used
keys beyond `max_keys`, and keys of the same family (image name) with an older image id, are
discarded. Everything the pool starts is labelled by the caller, so a crash leaves nothing that
`harness sandbox prune` cannot find.
"""

from __future__ import annotations

import collections
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

Start = Callable[[dict[str, Any], str], str]
"""start(config, kind) -> container id of a running container."""
Remove = Callable[[str], None]
"""remove(container id): kill and remove, ignoring containers already gone."""
Fill = Callable[[str, str], None]
"""fill(key, container id): make a container started in the background ready for its key's calls
(its volumes filled, on an engine that takes archives); one it fails for is removed."""


STARTERS = min(8, max(2, os.cpu_count() or 2))
"""Containers started at once in the background: one per core, 2 to 8. `harness bench sandbox
--create-rate` finds where the engine's own create rate stops growing: at 2 at once on a 2-core
machine (docs/benchmarks.md); more at once there only makes each start wait longer."""


class PoolConfig(BaseModel):
    """Sizing of the warm pool."""

    model_config = ConfigDict(extra="forbid")

    size: int = Field(2, ge=0, le=32)
    """The most running containers kept ready per key (0 disables pre-starting)."""
    initial: int = Field(2, ge=0, le=32)
    """Containers kept ready per key at first (at most size); one more each time a call found none."""
    max_keys: int = Field(2, ge=1, le=16)
    """Distinct container configs kept warm at once; older ones are discarded."""
    join_start_s: float = Field(5.0, ge=0, le=60)
    """How long `acquire` waits for a background start already under way before starting its own."""


class WarmPool:
    """Thread-safe pool of running containers; never reuses one."""

    def __init__(
        self, start: Start, remove: Remove, config: PoolConfig | None = None, fill: Fill | None = None
    ) -> None:
        self.config = config or PoolConfig()
        self._start, self._remove, self._fill = start, remove, fill
        self._lock = threading.Condition()
        self._idle: collections.OrderedDict[str, collections.deque[str]] = collections.OrderedDict()
        self._configs: dict[str, dict[str, Any]] = {}
        self._family: dict[str, tuple[str, str]] = {}
        self._pending: dict[str, int] = {}
        self._target: dict[str, int] = {}
        """Containers to keep ready per key: from `initial`, grown by the calls that found none."""
        self._served: set[str] = set()
        """Keys that handed out a container already (a key's first call never grows its target)."""
        self._unfilled: set[str] = set()
        """Keys whose last call asked for no replacement (its next miss is expected, not demand)."""
        self._borrowed: set[str] = set()
        """Keys holding adopted containers: no refill while more than one is left."""
        self._busy = 0
        self.failed: list[str] = []
        """Why each background start that failed did (the next acquire starts one itself): counted and
        said, never retried silently (`harness bench sandbox` and the tests read it)."""
        self._closed = False
        self._draining = False
        """No more background starts (`drain`); calls still start what they need."""
        self.starters = STARTERS
        self._starter = ThreadPoolExecutor(max_workers=self.starters, thread_name_prefix="harness-pool-start")
        self._reaper = ThreadPoolExecutor(max_workers=2, thread_name_prefix="harness-pool-remove")

    def acquire(self, key: str, config: dict[str, Any], family: str = "") -> str:
        """A running container for this config, used by the caller for exactly one call."""
        with self._lock:
            self._register(key, config, family)
            self._grow_if_short(key)
            # A start already under way for this key finishes sooner than a new one would.
            self._lock.wait_for(
                lambda: self._idle.get(key) or not self._pending.get(key) or self._closed,
                timeout=self.config.join_start_s,
            )
            ready = self._idle.get(key)
            cid = ready.popleft() if ready else None
        if cid is None:
            cid = self._start(config, "call")
        return cid

    def prewarm(self, key: str, config: dict[str, Any], family: str = "") -> None:
        """Start containers in the background until the key's target are ready or starting."""
        with self._lock:
            if self._closed or self._draining:
                return
            self._register(key, config, family)
            self._unfilled.discard(key)
            target = self._target.setdefault(key, self._initial)
            if key in self._borrowed:
                if len(self._idle[key]) > 1:
                    return
                self._borrowed.discard(key)
            missing = target - len(self._idle[key]) - self._pending.get(key, 0)
            for _ in range(max(0, missing)):
                self._pending[key] = self._pending.get(key, 0) + 1
                self._busy += 1
                self._starter.submit(self._start_one, key)

    def adopt(self, key: str, config: dict[str, Any], cids: list[str], family: str = "") -> None:
        """Take running containers another process started for this config as ready ones. No
        replacement starts until only one of them is left (a session borrowing enough for its
        first calls starts none while it has them)."""
        with self._lock:
            self._register(key, config, family)
            self._idle[key].extend(cids)
            self._target.setdefault(key, self._initial)
            self._served.add(key)
            self._borrowed.add(key)

    def skip_refill(self, key: str) -> None:
        """The call just made on key was likely the last (a final verification): no replacement is
        started, and if another call comes after all, its wait does not grow the key's target."""
        with self._lock:
            self._unfilled.add(key)

    def _grow_if_short(self, key: str) -> None:
        """One more container for key from now on if this call finds none ready (lock held)."""
        expected = key not in self._served or key in self._unfilled
        self._served.add(key)
        self._unfilled.discard(key)
        if not expected and not self._idle.get(key) and key in self._target:
            self._target[key] = min(self.config.size, self._target[key] + 1)

    def target(self, key: str) -> int:
        """Containers the pool now keeps ready for key."""
        with self._lock:
            return self._target.get(key, self._initial)

    @property
    def _initial(self) -> int:
        return min(self.config.initial, self.config.size)

    def release(self, cid: str) -> None:
        """Kill and remove a used container off the caller's critical path."""
        with self._lock:
            self._busy += 1
        try:
            self._reaper.submit(self._remove_one, cid)
        except RuntimeError:  # reaper already shut down (release after close): remove inline
            self._remove_one(cid)

    def wait_idle(self, timeout: float = 60.0) -> bool:
        """Block until no start or removal is in flight (benchmarks time calls outside this)."""
        with self._lock:
            return self._lock.wait_for(lambda: self._busy == 0, timeout)

    def drain(self, timeout_s: float = 60.0) -> None:
        """Start nothing more in the background and wait for the starts under way (what they start
        stays ready): before a folder the containers bind goes away, so that no late start has the
        engine make its path again (it creates a missing bind source as an empty directory)."""
        with self._lock:
            self._draining = True
            self._lock.wait_for(lambda: not any(self._pending.values()), timeout=timeout_s)

    def close(self) -> None:
        """Discard every idle container and wait for background work to finish."""
        with self._lock:
            self._closed = True
            doomed = [cid for ready in self._idle.values() for cid in ready]
            self._idle.clear()
        for cid in doomed:
            self.release(cid)
        self._starter.shutdown(wait=True)
        self._reaper.shutdown(wait=True)

    def _register(self, key: str, config: dict[str, Any], family: str) -> None:
        """Record key as most recently used; discard stale and least recently used keys (lock held)."""
        image = str(config.get("image"))
        for other, (fam, other_image) in list(self._family.items()):
            if other != key and family and fam == family and other_image != image:
                self._drop_key(other)
        if key not in self._idle:
            self._idle[key] = collections.deque()
        self._idle.move_to_end(key)
        self._configs[key] = config
        self._family[key] = (family, image)
        while len(self._idle) > self.config.max_keys:
            self._drop_key(next(iter(self._idle)))

    def _drop_key(self, key: str) -> None:
        for cid in self._idle.pop(key, ()):
            self._busy += 1
            self._reaper.submit(self._remove_one, cid)
        self._configs.pop(key, None)
        self._family.pop(key, None)
        self._target.pop(key, None)
        self._served.discard(key)
        self._unfilled.discard(key)
        self._borrowed.discard(key)

    def _start_one(self, key: str) -> None:
        cid = None
        try:
            with self._lock:
                config = self._configs.get(key)
            if config is not None and not self._closed:
                started = self._start(config, "pool")
                try:
                    if self._fill is not None:
                        self._fill(key, started)
                except Exception:
                    self.release(started)
                    raise
                cid = started
        except Exception as error:  # noqa: BLE001 - the next acquire starts one itself; the failure is kept
            cid = None
            with self._lock:
                self.failed.append(f"{type(error).__name__}: {error}"[:500])
        finally:
            with self._lock:
                self._pending[key] = self._pending.get(key, 1) - 1
                keep = cid is not None and not self._closed and key in self._idle
                if keep and cid is not None:
                    self._idle[key].append(cid)
                self._busy -= 1
                self._lock.notify_all()
        if cid is not None and not keep:
            self.release(cid)

    def _remove_one(self, cid: str) -> None:
        try:
            self._remove(cid)
        finally:
            with self._lock:
                self._busy -= 1
                self._lock.notify_all()
