"""Images built side by side (`sandbox.docker.images.at_once`, the build locks): results in order, every
build run to its end before the first failure is raised, and a lock per scope, so another release's
environment or another agent's image builds beside the default images while the same scope waits."""

from __future__ import annotations

import threading
import time

import pytest

from sandbox.docker import images
from sandbox.errors import ImageBuildError


def test_builds_run_at_once_and_give_their_results_in_order() -> None:
    running, most = [0], [0]
    lock = threading.Lock()

    def build(n: int) -> int:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.2)
        with lock:
            running[0] -= 1
        return n * 10

    started = time.monotonic()
    assert images.at_once([lambda n=n: build(n) for n in range(6)], workers=3) == [0, 10, 20, 30, 40, 50]
    assert most[0] == 3 and time.monotonic() - started < 1.0, "three at a time, six in two rounds"


def test_a_failed_build_is_raised_once_every_build_has_ended() -> None:
    ended: list[str] = []

    def fails() -> None:
        raise ImageBuildError("building harness/go failed")

    def slow() -> None:
        time.sleep(0.3)
        ended.append("rust")

    with pytest.raises(ImageBuildError, match="harness/go"):
        images.at_once([fails, slow])
    assert ended == ["rust"], "the other build was not left running behind the error"


def test_one_build_per_scope_at_a_time_and_other_scopes_beside_it() -> None:
    said: list[str] = []
    order: list[str] = []
    with images._build_lock(said.append, "agent-test-scope"):

        def same() -> None:
            with images._build_lock(said.append, "agent-test-scope"):
                order.append("same scope")

        def other() -> None:
            with images._build_lock(said.append, "agent-test-other"):
                order.append("other scope")

        threads = [threading.Thread(target=same), threading.Thread(target=other)]
        for thread in threads:
            thread.start()
        time.sleep(0.3)
        assert order == ["other scope"], "another scope is not held up"
        order.append("first done")
    for thread in threads:
        thread.join(5)
    assert order == ["other scope", "first done", "same scope"]
    assert said == ["another build of agent-test-scope's images is running; waiting for it"]
