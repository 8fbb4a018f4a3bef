"""The warm service: hardened single-use containers started before a one-shot command needs them.

A one-shot `harness exec PATH -- CMD` pays an interpreter, a container start and a removal; the
engine's start alone costs what a bare `docker run` does. The service takes the start off the
command's path: it keeps, for each spec it serves, a few *slots* ready, each an empty directory of
its own and one container started on it (the workspace bound to that directory, the call stub
attached and waiting). A request copies the repository into a ready slot's directory (the
container sees it at once: the bind mount is the directory), runs the command through the stub,
replies with the envelope, and removes the container and the directory off the reply's path while
a replacement starts. A slot is used once, like every container harness starts.

The same containers as the cold path: same hardening, limits, posture and envelope, the host's
watch killing the whole container at its deadline. A slot whose image the engine now resolves to
another id is discarded, never used. The service serves one user (its socket is 0600 in a 0700
folder, and a peer of another uid is refused) and one engine; it exits after `idle_s` without a
request, removing what it started; containers of a service that was killed carry its pid, and the
next service (or `harness sandbox prune`) removes them. Run slots for new sessions to borrow are
`loans`; the process and its socket are `daemon`.
"""

from __future__ import annotations

import collections
import contextlib
import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sandbox.errors import SandboxError
from sandbox.exit_code import ExitCode
from sandbox.spec import SandboxSpec
from sandbox.tree import copy_tree, remove_tree
from sandbox.warm import protocol
from sandbox.warm.loans import KIND, Loans, close_fds
from sandbox.warm.messages import (
    ErrorReply,
    ExecReply,
    ExecRequest,
    LendRequest,
    LoanReply,
    Refused,
    Reply,
    StatusReply,
    StatusRequest,
    StopReply,
    StopRequest,
)

if TYPE_CHECKING:
    from sandbox.docker.containers import DockerSandbox

MAX_SPECS = 4
"""Distinct specs kept warm at once (the configured images' defaults first, then the latest asked)."""


class ImageWatch:
    """Whether any image may have changed since a moment, from the engine's image events read in the
    background (a build, tag, untag, load, pull or removal each count): a request need not ask the
    engine which id its image names while nothing changed. `mark()` is None whenever the stream is not
    known to be open (starting, broken, closed): the caller asks the engine then, as without a watch."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._lock = threading.Lock()
        self._generation = 0
        self._live = False
        self._closed = False
        self._stream: Any = None
        threading.Thread(target=self._watch, name="harness-warm-images", daemon=True).start()

    def mark(self) -> int | None:
        """The count of changes seen so far, or None when changes may go unseen."""
        with self._lock:
            return self._generation if self._live else None

    def _watch(self) -> None:
        while True:
            try:
                stream = self._client.events(filters={"type": "image"}, decode=True)
            except Exception:  # noqa: BLE001 - the engine is away: requests ask it themselves meanwhile
                stream = None
            with self._lock:
                if self._closed:
                    if stream is not None:
                        stream.close()
                    return
                self._stream, self._live = stream, stream is not None
                self._generation += 1
            try:
                for _ in stream or ():
                    with self._lock:
                        self._generation += 1
            except Exception:  # noqa: BLE001 - a broken stream: not live until it is open again
                pass
            with self._lock:
                self._live = False
                self._generation += 1
                if self._closed:
                    return
            time.sleep(0.5)

    def close(self) -> None:
        with self._lock:
            self._closed, self._live, stream = True, False, self._stream
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.close()


class WarmConfig(BaseModel):
    """What the service keeps ready."""

    model_config = ConfigDict(extra="forbid")

    images: list[str] = Field(default_factory=lambda: ["py311"])
    """Images kept warm from the start, with the default limits."""
    per_spec: int = Field(2, ge=1, le=32)
    """Ready slots per spec (calls arriving faster than the engine starts containers wait for one)."""
    idle_s: float = Field(900.0, gt=0)
    """The service exits after this long without a request."""
    runs: list[dict[str, Any]] = Field(default_factory=list)
    """Run configs (`loans.run_request`) kept warm from the start for new sessions to borrow."""
    per_run: int = Field(6, ge=0, le=16)
    """Containers in a run slot (0: no run slots at all)."""


class Slot:
    """A directory and the container started on it, for exactly one call."""

    def __init__(self, folder: Path, cid: str, image_id: str) -> None:
        self.folder, self.cid, self.image_id = folder, cid, image_id


class WarmService:
    """Ready slots per spec, and the request handler of the service's socket."""

    def __init__(self, box: DockerSandbox, folder: Path, config: WarmConfig) -> None:
        self.box, self.folder, self.config = box, folder, config
        self.slots_dir = folder / protocol.SLOTS
        self._lock = threading.Condition()
        self._ready: dict[str, collections.deque[Slot]] = {}
        self._pending: dict[str, int] = {}
        self._specs: collections.OrderedDict[str, SandboxSpec] = collections.OrderedDict()
        self._pinned = {SandboxSpec(image=image).model_dump_json() for image in config.images}
        self._closed = False
        self._busy = 0
        self._last_request = time.monotonic()
        self._images = ImageWatch(box.client)
        self._image_ids: dict[str, tuple[int, str]] = {}
        """Image name: (the watch's mark when it was asked, the id the engine named)."""
        self._starter = ThreadPoolExecutor(max_workers=2, thread_name_prefix="harness-warm-start")
        self._cleaner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="harness-warm-clean")
        for image in config.images:
            self._keep(SandboxSpec(image=image))
        # a slot's streams go to its borrower over this socket: none where they are not plain sockets
        self.loans = Loans(box, self.slots_dir, config.per_run) if config.per_run and box.lends_streams else None
        if self.loans is not None:
            for request in config.runs:
                self.loans.keep(request)

    # -- slots --------------------------------------------------------------------------------------
    def _keep(self, spec: SandboxSpec) -> str:
        """Keep spec warm from now on (most recent last; the oldest unpinned beyond MAX_SPECS dropped)."""
        key = spec.model_dump_json()
        with self._lock:
            self._specs[key] = spec
            self._specs.move_to_end(key)
            self._ready.setdefault(key, collections.deque())
            for old in [k for k in self._specs if k not in self._pinned][: max(0, len(self._specs) - MAX_SPECS)]:
                del self._specs[old]
                for slot in self._ready.pop(old, ()):
                    self._clean(slot)
            self._fill(key)
        return key

    def _fill(self, key: str) -> None:
        """Start slots in the background until key has per_spec ready or starting (lock held)."""
        if self._closed or key not in self._specs:
            return
        missing = self.config.per_spec - len(self._ready[key]) - self._pending.get(key, 0)
        for _ in range(max(0, missing)):
            self._pending[key] = self._pending.get(key, 0) + 1
            self._starter.submit(self._start_background, key, self._specs[key])

    def _start_background(self, key: str, spec: SandboxSpec) -> None:
        slot = None
        try:
            slot = self._new_slot(spec)
        except Exception:  # noqa: BLE001 - a failed background start is retried by the next request
            slot = None
        finally:
            with self._lock:
                self._pending[key] -= 1
                keep = slot is not None and not self._closed and key in self._ready
                if keep and slot is not None:
                    self._ready[key].append(slot)
                self._lock.notify_all()
        if slot is not None and not keep:
            self._clean(slot)

    def _new_slot(self, spec: SandboxSpec) -> Slot:
        folder = Path(tempfile.mkdtemp(prefix="slot-", dir=self.slots_dir))
        try:
            image_id = self.box.image_id(spec.image)
            return Slot(folder, self.box.start_one(workspace=folder, spec=spec, kind=KIND), image_id)
        except BaseException:
            remove_tree(folder, ignore_errors=True)
            raise

    def take(self, spec: SandboxSpec, after: list[Callable[[], None]]) -> Slot:
        """A ready slot for spec (started now if none is ready or starting); the engine is asked
        which image id spec.image names now (unless its events say nothing changed), and slots of
        another id, or whose container died while waiting, are discarded. Its replacement's start
        goes to after (what runs once the reply is sent: a start beside the call would slow it)."""
        image_id = self._image_id(spec.image)
        key = self._keep(spec)
        with self._lock:
            while True:
                ready = self._ready.get(key, collections.deque())
                while ready and (ready[0].image_id != image_id or not self.box.alive(ready[0].cid)):
                    self._clean(ready.popleft())  # an older image, or a container that died waiting
                if ready or not self._pending.get(key):
                    break
                self._lock.wait(timeout=5.0)
            slot = ready.popleft() if ready else None
        after.append(lambda: self._refill(key))
        return slot if slot is not None else self._new_slot(spec)

    def _refill(self, key: str) -> None:
        with self._lock:
            self._fill(key)

    def _image_id(self, name: str) -> str:
        """The id name resolves to now (a rebuild a moment ago counts): the engine is asked unless its
        image events say nothing changed since it was last asked."""
        mark = self._images.mark()
        with self._lock:
            known = self._image_ids.get(name)
        if mark is not None and known is not None and known[0] == mark:
            return known[1]
        image_id = self.box.image_id(name, fresh=True)
        if mark is not None:
            with self._lock:
                self._image_ids[name] = (mark, image_id)
        return image_id

    def _clean(self, slot: Slot) -> None:
        """Remove a slot's container, then its directory, off the caller's path."""

        def clean() -> None:
            self.box.remove(slot.cid)
            remove_tree(slot.folder, ignore_errors=True)

        try:
            self._cleaner.submit(clean)
        except RuntimeError:  # shut down already: inline
            clean()

    def close(self) -> None:
        """Remove every slot; wait for starts and removals under way."""
        self._images.close()
        if self.loans is not None:
            self.loans.close()
        with self._lock:
            self._closed = True
            doomed = [slot for ready in self._ready.values() for slot in ready]
            self._ready.clear()
        self._starter.shutdown(wait=True)
        for slot in doomed:
            self._clean(slot)
        self._cleaner.shutdown(wait=True)

    # -- requests -----------------------------------------------------------------------------------
    @contextlib.contextmanager
    def serving(self) -> Iterator[list[Callable[[], None]]]:
        """Around one connection: the service is not idle while it is open, nor right after. Yields
        the list of what to do once the reply is sent (a used slot's removal, its replacement's start:
        work beside the call would slow it), done at the end, whatever happened."""
        after: list[Callable[[], None]] = []
        with self._lock:
            self._busy += 1
            self._last_request = time.monotonic()
        try:
            yield after
        finally:
            for then in after:
                then()
            with self._lock:
                self._busy -= 1
                self._last_request = time.monotonic()

    def idle_for(self, idle_s: float) -> bool:
        """No connection open, and none for idle_s."""
        with self._lock:
            return self._busy == 0 and time.monotonic() - self._last_request > idle_s

    def handle(
        self,
        request: ExecRequest | StatusRequest | StopRequest,
        gone: threading.Event,
        after: list[Callable[[], None]],
    ) -> Reply:
        """Answer one request; `gone` is set when the client hangs up (its call is then killed);
        what is left to do once the reply is sent goes to after (see `serving`)."""
        if isinstance(request, StatusRequest):
            runs = self.loans.counts() if self.loans is not None else {"ready": 0, "starting": 0, "out": 0}
            return StatusReply(pid=os.getpid(), ready=self.ready_counts(), images=list(self.config.images), runs=runs)
        if isinstance(request, StopRequest):
            return StopReply()
        try:
            return self._exec(request, gone, after)
        except SandboxError as error:
            return ErrorReply(str(error), error.exit_code)
        except OSError as error:
            return ErrorReply(f"{error.strerror or error}: {error.filename or ''}".rstrip(": "), ExitCode.INTERNAL)

    def _exec(
        self, request: ExecRequest, gone: threading.Event, after: list[Callable[[], None]]
    ) -> ExecReply | ErrorReply:
        argv, path, keep = request.argv, request.path, request.keep
        if not argv:
            return ErrorReply("the command must be a non-empty list of strings", ExitCode.USAGE)
        if not os.path.isabs(path):
            return ErrorReply("the repository path must be absolute", ExitCode.USAGE)
        if not os.path.isdir(path):
            return ErrorReply(f"repository path does not exist: {path}", ExitCode.NOT_FOUND)
        if keep is not None and os.path.lexists(keep):
            return ErrorReply(f"--keep target already exists: {keep}", ExitCode.USAGE)
        try:
            spec = SandboxSpec(**{**request.spec, "labels": {}})
        except (ValidationError, TypeError) as error:
            return ErrorReply(f"invalid sandbox spec: {error}", ExitCode.USAGE)
        from sandbox.session.workspace import copy_repository

        slot = self.take(spec, after)
        after.append(lambda: self._clean(slot))
        finished = threading.Event()
        try:
            copy_repository(Path(path), slot.folder)
            watcher = threading.Thread(target=self._kill_when, args=(gone, finished, slot.cid), daemon=True)
            watcher.start()
            envelope = self.box.call(slot.cid, argv, workspace=slot.folder, spec=spec)
            finished.set()
            if keep is not None:
                copy_tree(slot.folder, keep)
        finally:
            finished.set()
        return ExecReply(envelope=envelope.model_dump(mode="json"), headline=envelope.headline())

    def serve_loan(self, sock: socket.socket, request: LendRequest) -> None:
        """Lend a ready run slot (its streams passed with the reply) and take it back when the
        borrower hangs up; refuse if none is ready (the borrower starts its own containers)."""
        if self.loans is None:
            protocol.reply(sock, Refused("no run slots here"))
            return
        try:
            slot = self.loans.take(request.run)
        except (ValueError, TypeError, ValidationError) as error:
            protocol.reply(sock, Refused(f"invalid run request: {error}"))
            return
        if slot is None:
            protocol.reply(sock, Refused("no run slot ready"))
            return
        fds: list[int] = []
        try:
            fds = self.loans.lend(slot)
            protocol.reply(sock, LoanReply(slot=str(slot.folder), containers=list(slot.cids)), fds)
            close_fds(fds)
            fds = []
            with contextlib.suppress(OSError):
                while sock.recv(4096):  # until the borrower hangs up
                    pass
        finally:
            close_fds(fds)
            self.loans.returned(slot)

    def _kill_when(self, gone: threading.Event, finished: threading.Event, cid: str) -> None:
        """Kill the call's container if its client hangs up before the call is over."""
        if gone.wait(timeout=None) and not finished.is_set() and not self._closed:
            self.box.stop(cid)

    def ready_counts(self) -> dict[str, int]:
        with self._lock:
            return {self._specs[key].image: len(slots) for key, slots in self._ready.items() if key in self._specs}
