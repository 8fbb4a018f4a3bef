"""CallWatch ends a call from the host even when killing the container does not end its stream."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from sandbox.docker.call import CallWatch, shut

pytestmark = pytest.mark.timeout(30)


def test_a_stream_that_outlives_the_kill_is_closed_from_the_host() -> None:
    reader, writer = socket.socketpair()
    kills: list[float] = []
    started = time.monotonic()
    watch = CallWatch(
        kill=lambda: kills.append(time.monotonic()), exited=lambda: False, timeout_s=0.3, abort=lambda: shut(reader)
    )
    assert reader.recv(1) == b""  # blocks until the watch gives up on the stream: EOF, not a hang
    watch.finish()
    elapsed = time.monotonic() - started
    assert watch.reason == "timeout" and len(kills) == 1
    assert 0.3 + CallWatch.ABORT_AFTER_S - 0.2 < elapsed < 0.3 + CallWatch.ABORT_AFTER_S + 2
    writer.close()
    reader.close()


def test_a_stream_that_ends_with_the_kill_is_not_aborted() -> None:
    aborted: list[bool] = []
    watch = CallWatch(kill=lambda: None, exited=lambda: False, timeout_s=0.2, abort=lambda: aborted.append(True))
    time.sleep(0.4)
    watch.finish()  # the reader saw the stream end right after the kill
    assert watch.reason == "timeout" and aborted == []


def test_a_call_cut_from_another_thread_is_killed_and_its_stream_closed_if_it_outlives_the_kill() -> None:
    reader, writer = socket.socketpair()
    kills: list[float] = []
    watch = CallWatch(
        kill=lambda: kills.append(time.monotonic()), exited=lambda: False, timeout_s=60, abort=lambda: shut(reader)
    )
    started = time.monotonic()
    threading.Thread(target=watch.cut, args=("stopped",), daemon=True).start()
    assert reader.recv(1) == b""  # the kill left the stream open: the cut closes it, the call does not hang
    watch.finish()
    assert watch.reason == "stopped" and len(kills) == 1
    assert time.monotonic() - started < CallWatch.ABORT_AFTER_S + 2, "not the call's own minute"
    writer.close()
    reader.close()
