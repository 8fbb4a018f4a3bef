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


def test_prewarm_fills_to_the_initial_target_and_acquire_uses_a_warm_one() -> None:
    engine = Engine()
    pool = WarmPool(engine.start, engine.remove, PoolConfig(size=3, initial=3))
    pool.prewarm("k", {"image": "i1"})
    pool.wait_idle()
    assert [kind for _, kind in engine.started] == ["pool"] * 3
    pool.acquire("k", {"image": "i1"})
    pool.prewarm("k", {"image": "i1"})
    pool.wait_idle()
    assert [kind for _, kind in engine.started].count("call") == 0 and len(engine.started) == 4
    pool.close()


def call(pool: WarmPool, engine: Engine, *, refill: bool = True) -> str:
    """One call as DockerSandbox makes it: acquire, release, then a replacement (or none)."""
    cid = pool.acquire("k", {"image": "i1"})
    pool.release(cid)
    if refill:
        pool.prewarm("k", {"image": "i1"})
    else:
        pool.skip_refill("k")
    pool.wait_idle()
    return cid


def test_a_pool_keeps_one_ready_while_calls_find_one_and_grows_when_a_call_finds_none() -> None:
    engine = Engine()
    pool = WarmPool(engine.start, engine.remove, PoolConfig(size=3, initial=1))
    pool.prewarm("k", {"image": "i1"})
    pool.wait_idle()
    for _ in range(4):  # a model that thinks between calls: the replacement is always ready in time
        call(pool, engine)
    assert pool.target("k") == 1 and len(engine.started) == 5
    assert [kind for _, kind in engine.started].count("call") == 0
    both = [pool.acquire("k", {"image": "i1"}) for _ in range(2)]  # a turn of two concurrent calls
    for cid in both:
        pool.release(cid)
    assert pool.target("k") == 2, "the second call found none ready: one more is kept from now on"
    pool.prewarm("k", {"image": "i1"})
    pool.wait_idle()
    assert len(pool._idle["k"]) == 2
    held = [pool.acquire("k", {"image": "i1"}) for _ in range(3)]
    assert pool.target("k") == 3, "grows one at a time, never past size"
    held.append(pool.acquire("k", {"image": "i1"}))
    assert pool.target("k") == 3
    for cid in held:
        pool.release(cid)
    pool.close()
    assert engine.alive == set()


def test_a_call_that_skips_its_refill_starts_nothing_and_a_later_call_does_not_grow_the_pool() -> None:
    engine = Engine()
    pool = WarmPool(engine.start, engine.remove, PoolConfig(size=3, initial=1))
    pool.prewarm("k", {"image": "i1"})
    pool.wait_idle()
    call(pool, engine)
    call(pool, engine, refill=False)  # the final verification
    assert len(engine.started) == 2 and engine.alive == set(), "nothing is left to discard at the end"
    call(pool, engine)  # verification failed after all: the agent goes on
    assert pool.target("k") == 1, "that call's wait was the skipped refill, not demand"
    assert [kind for _, kind in engine.started] == ["pool", "pool", "call", "pool"]
    pool.close()
    assert engine.alive == set()


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


def test_drain_waits_for_the_starts_under_way_and_starts_nothing_more_in_the_background() -> None:
    """Before a run's workspace goes: a start that finished after it would have the engine make the
    folder it binds again (an empty directory where the retired workspace was)."""
    engine = Engine()
    gate = threading.Event()
    finished: list[str] = []

    def slow_start(config: dict, kind: str) -> str:
        if kind == "pool":
            gate.wait(5)
        cid = engine.start(config, kind)
        finished.append(kind)
        return cid

    pool = WarmPool(slow_start, engine.remove, PoolConfig(size=2, initial=2))
    pool.prewarm("k", {"image": "i1"})
    threading.Timer(0.3, gate.set).start()
    pool.drain()
    assert finished == ["pool", "pool"], "drain returns only once the starts under way are done"
    pool.prewarm("k", {"image": "i1"})
    cid = pool.acquire("k", {"image": "i1"})  # a call still gets a container: a ready one
    pool.release(cid)
    pool.wait_idle()
    assert [kind for _, kind in engine.started] == ["pool", "pool"], "no refill after a drain"
    pool.close()
    assert engine.alive == set()


def test_a_background_start_is_filled_before_it_is_ready_and_one_whose_fill_fails_is_removed() -> None:
    engine = Engine()
    filled: list[tuple[str, str]] = []

    def fill(key: str, cid: str) -> None:
        if len(filled) == 0:
            filled.append((key, "failed"))
            raise OSError("the engine lost the upload")
        filled.append((key, cid))

    pool = WarmPool(engine.start, engine.remove, PoolConfig(size=1, initial=1), fill=fill)
    pool.prewarm("k", {"image": "i1"})
    pool.wait_idle()
    [(failed, _)] = engine.started
    assert engine.removed == [failed], "a container its fill failed for is never handed out"
    pool.prewarm("k", {"image": "i1"})
    pool.wait_idle()
    ready = pool.acquire("k", {"image": "i1"})
    assert filled == [("k", "failed"), ("k", ready)] and ready != failed
    cold = pool.acquire("k", {"image": "i1"})
    assert (cold, "call") in engine.started and ("k", cold) not in filled, "a start on the call's path is the caller's"
    pool.release(ready)
    pool.release(cold)
    pool.close()
    assert engine.alive == set()
