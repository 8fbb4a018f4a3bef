"""WarmPool bookkeeping with plain start/remove functions (the engine-backed behaviour is in test_isolation)."""

from __future__ import annotations

import itertools
import threading

from sandbox.docker.pool import PoolConfig, WarmPool


class Engine:
    """Counts what the pool starts and removes; ids are never repeated."""

    def __init__(self) -> None:
        self._ids = itertools.count(1)
        self.started: list[tuple[str, str]] = []
        self.removed: list[str] = []
        self.lock = threading.Lock()

    def start(self, config: dict, kind: str) -> str:
        with self.lock:
            cid = f"c{next(self._ids)}"
            self.started.append((cid, kind))
        return cid

    def remove(self, cid: str) -> None:
        with self.lock:
            self.removed.append(cid)

    @property
    def alive(self) -> set[str]:
        return {cid for cid, _ in self.started} - set(self.removed)


def test_acquired_containers_are_never_handed_out_twice() -> None:
    engine = Engine()
    pool = WarmPool(engine.start, engine.remove, PoolConfig(size=2))
    handed = []
    for _ in range(10):
        cid = pool.acquire("k", {"image": "i1"})
        handed.append(cid)
        pool.release(cid)
        pool.wait_idle()
    assert len(set(handed)) == 10
    assert set(handed) <= set(engine.removed)
    pool.close()
    assert engine.alive == set()


def test_prewarm_fills_to_size_and_acquire_uses_a_warm_one() -> None:
    engine = Engine()
    pool = WarmPool(engine.start, engine.remove, PoolConfig(size=3))
    pool.prewarm("k", {"image": "i1"})
    pool.wait_idle()
    assert [kind for _, kind in engine.started] == ["pool"] * 3
    pool.acquire("k", {"image": "i1"})
    pool.prewarm("k", {"image": "i1"})
    pool.wait_idle()
    assert [kind for _, kind in engine.started].count("call") == 0 and len(engine.started) == 4
    pool.close()


def test_stale_image_and_least_recently_used_keys_are_discarded() -> None:
    engine = Engine()
    pool = WarmPool(engine.start, engine.remove, PoolConfig(size=1, max_keys=2))
    pool.prewarm("old", {"image": "i1"}, family="py311")
    pool.wait_idle()
    pool.prewarm("new", {"image": "i2"}, family="py311")
    pool.wait_idle()
    assert "c1" in engine.removed  # the old image's warm container
    pool.prewarm("a", {"image": "x"}, family="other-a")
    pool.prewarm("b", {"image": "y"}, family="other-b")
    pool.wait_idle()
    assert len(engine.alive) == 2  # only max_keys keys stay warm
    pool.close()
    assert engine.alive == set()


def test_size_zero_starts_on_demand_only() -> None:
    engine = Engine()
    pool = WarmPool(engine.start, engine.remove, PoolConfig(size=0))
    cid = pool.acquire("k", {"image": "i1"})
    pool.release(cid)
    pool.close()
    assert engine.started == [(cid, "call")] and engine.alive == set()


def test_acquire_joins_a_start_already_under_way_instead_of_starting_another() -> None:
    engine = Engine()
    gate = threading.Event()

    def slow_start(config: dict, kind: str) -> str:
        if kind == "pool":
            gate.wait(5)
        return engine.start(config, kind)

    pool = WarmPool(slow_start, engine.remove, PoolConfig(size=1))
    pool.prewarm("k", {"image": "i1"})
    threading.Timer(0.2, gate.set).start()
    cid = pool.acquire("k", {"image": "i1"})
    assert engine.started == [(cid, "pool")], "the call took the container whose start was in flight"
    pool.release(cid)
    pool.close()
    assert engine.alive == set()
