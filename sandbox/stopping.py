"""Stopping one call while it runs, from outside the thread running it.

A caller that named its call (an ACP agent's `terminal/kill` or `terminal/release` of a terminal whose
command is still running, an MCP client cancelling its `tools/call`) asks for that call to stop; the
sandbox running it kills the call's container, and the call comes back as a command killed: exit 137,
with STOPPED in its stderr so the record and the caller both say why. A call asked to stop before it
started (still waiting for the loop) stops as soon as its container starts.

The thread that runs a call marks it (`running`), the sandbox attaches its kill to the call of its
thread (`on_stop`), and anyone may `stop` it by id. Ids are the callers': one that is not unique in
the process stops every call running under it, so callers give unique ones.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Callable, Iterator

STOPPED = "harness: stopped by its caller before it ended ({why})"
"""The line a stopped call's stderr ends with."""
EARLY_KEPT = 256
"""How many stops asked of calls not (yet) running are remembered (oldest forgotten first)."""


class _Call:
    def __init__(self) -> None:
        self.reason: str | None = None
        self.kills: list[Callable[[], None]] = []


_lock = threading.Lock()
_running: dict[str, list[_Call]] = {}
_early: dict[str, str] = {}
_current: contextvars.ContextVar[_Call | None] = contextvars.ContextVar("harness_call", default=None)


@contextlib.contextmanager
def running(ident: str) -> Iterator[None]:
    """Mark the call this thread runs as ident while the block runs (an empty ident: nothing)."""
    if not ident:
        yield
        return
    call = _Call()
    with _lock:
        _running.setdefault(ident, []).append(call)
        call.reason = _early.pop(ident, None)
    token = _current.set(call)
    try:
        yield
    finally:
        _current.reset(token)
        with _lock:
            calls = _running.get(ident, [])
            if call in calls:
                calls.remove(call)
            if not calls:
                _running.pop(ident, None)


def stop(ident: str, why: str) -> bool:
    """Stop the call ident: its container is killed now if it runs (True), or as soon as it starts.
    Returns at once (an event loop may call it): the kills, an engine request each, run in a thread of
    their own."""
    with _lock:
        calls = list(_running.get(ident, ()))
        if not calls:
            _early[ident] = why
            while len(_early) > EARLY_KEPT:
                _early.pop(next(iter(_early)))
        kills = []
        for call in calls:
            if call.reason is None:
                call.reason = why
            kills += call.kills
    if kills:
        threading.Thread(target=_all, args=(kills,), name="harness-stop-call", daemon=True).start()
    return bool(calls)


def _all(kills: list[Callable[[], None]]) -> None:
    for kill in kills:
        kill()


def forget(ident: str) -> None:
    """A call that will never run (its caller gave up on it): its early stop is dropped."""
    with _lock:
        _early.pop(ident, None)


def on_stop(kill: Callable[[], None]) -> Callable[[], None]:
    """Attach kill to the call this thread runs; returns what detaches it. kill runs in a thread of its
    own (at once if the call was asked to stop already, else when it is: why_stopped() is the call's
    own thread's to ask). Outside a marked call: nothing to attach."""
    call = _current.get()
    if call is None:
        return lambda: None
    with _lock:
        call.kills.append(kill)
        asked = call.reason is not None
    if asked:
        threading.Thread(target=kill, name="harness-stop-call", daemon=True).start()

    def detach() -> None:
        with _lock:
            if kill in call.kills:
                call.kills.remove(kill)

    return detach


def why_stopped() -> str | None:
    """Why the call this thread runs was asked to stop (None: it was not, or no call is marked)."""
    call = _current.get()
    return None if call is None else call.reason


def said() -> str:
    """The lines a stopped call's stderr ends with: STOPPED, with why the call this thread runs was stopped."""
    return "\n" + STOPPED.format(why=why_stopped() or "asked") + "\n"
