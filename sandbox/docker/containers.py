"""DockerSandbox: every call in a fresh hardened container, pre-started by the warm pool.

A pre-started container's first process is the call stub (`stub.py`), attached before it started:
a call sends the command down that stream and reads framed output and the exit status back
(`stubcall.py`). Where the stub cannot run (an image without python3), the container runs KEEPALIVE
and the call execs `timeout -k 2 <T+1>s argv` into it instead; the envelope records which. Output
goes through `CappedOutput`; the host enforces the wall clock, the output ceiling and the end of the
call by killing the whole container, so background and daemonized children die with it.
The container is then removed off the critical path. A `network: none` call container joins its
session's empty network namespace (`sandbox.docker.netns`) instead of paying for a new one. Engine errors
are translated by `sandbox.docker.engine.translate`.

Longer than most modules because a call's life is one sequence that reads best in one place:
acquire a warm container, run the command (stub or exec) under the host-side watch, cap the output,
classify the exit (timeout, OOM, output limit), commit a writable root, release.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import docker
import requests

from sandbox import labels as labels_of
from sandbox import stopping
from sandbox.docker import hardening, netns, transfer, tunnel
from sandbox.docker.call import CallWatch, cgroup_oom_killed, exit_code_of, frames, read_ahead, send_stdin, shut
from sandbox.docker.commit import commit_root
from sandbox.docker.delta import AheadOfCalls, Stale
from sandbox.docker.engine import (
    PODMAN_NO_GVISOR,
    engine_kind,
    located,
    resolve_image_path,
    runtimes_of,
    streams_pass,
    translate,
    unenforced_limits,
)
from sandbox.docker.ids import remove_container, said_removed
from sandbox.docker.pool import PoolConfig, WarmPool
from sandbox.docker.stubcall import NODEV_ARGV, STUB_DIR, StubLost, StubStream
from sandbox.envelope import CallOutcome, Envelope, Status
from sandbox.errors import RuntimeUnavailable, SandboxError, SpecError, WorkspaceError
from sandbox.output import CappedOutput
from sandbox.owner import container_user
from sandbox.spec import Mount, SandboxSpec, posture

STUB_LOST = "\n[harness: the call ended without an exit status: the call stub was killed from inside the container]\n"
STUB_RUNTIMES = frozenset({"runc"})
"""Runtimes whose calls go through the stub. Under gVisor (runsc) a process may open a non-dumpable
process's descriptors through /proc, so a command could write into the stub's stream: its calls go
by `docker exec`."""
_ENDED_BY_WATCH: dict[str, tuple[int, Status]] = {
    "timeout": (124, "timeout"),
    "output_limit": (137, "output_limit"),
    "stopped": (137, "exit_nonzero"),  # its caller asked (sandbox.stopping): killed, as a SIGKILL would
}
"""How a call the host watch ended comes out, whichever way the command reached its container."""
IMAGE_CACHE_S = 5.0
"""How long a resolved image id is trusted before the engine is asked again (keeps calls lean)."""


class DockerSandbox:
    """Sandbox protocol on a Docker engine: one fresh hardened container per call, never reused.

    A call without network has an empty network namespace of its own (`hardening.own_namespace`);
    on an engine elsewhere the calls of a session share one (netns): there `share_netns=False` gives
    every call its own, right for one-call commands (`harness exec`, `harness tool`), where a holder
    would double the cost of the only start, and `first_apart=False` makes even the session's first
    container wait for the holder.
    `pool_initial` is how many warm containers a key starts with (default: pool_size; see pool).
    `transport="archive"` sends the workspace as archives even to an engine on this machine (as it
    must to one elsewhere: see `remote`).
    """

    def __init__(
        self,
        client: docker.DockerClient,
        *,
        run_id: str,
        pool_size: int = 2,
        pool_initial: int | None = None,
        session_id: str | None = None,
        share_netns: bool = True,
        first_apart: bool = True,
        call_path: Literal["auto", "exec"] = "auto",
        owns_client: bool = False,
        transport: Literal["auto", "archive"] = "auto",
        engine_removes: bool = False,
    ) -> None:
        self.client, self.run_id, self.session_id = client, run_id, session_id
        self._owns_client = owns_client
        """Close the client with the sandbox (it was connected for this sandbox alone)."""
        self.call_path = call_path
        self._streams: dict[str, StubStream] = {}
        """Pre-started stub containers' attached streams, by container id (taken by the call)."""
        self._answered: dict[str, StubStream] = {}
        """The streams of stubs whose call is over, closed once the working folder came back (or at
        the container's removal): a stub waits for the close, so its container runs until then (on
        Podman a stopping container's folder cannot be read back: `_bring_back`)."""
        self._no_stub: set[str] = set()
        """Images in which the stub cannot run (no python3, no prctl): calls by `docker exec`."""
        self._api = client.api
        self._holders = netns.NetnsHolders(self._api, translate, self._remove, first_apart) if share_netns else None
        self._lock = threading.Lock()
        self._owned: set[str] = set()
        self._keep_open: list[Any] = []
        self.adopted = 0
        """Containers taken from another process (a warm service's loan)."""
        self._images: dict[str, tuple[float, str, str | None]] = {}
        info, self.remote = located(client)
        """Why the engine cannot take this machine's folders as its calls' own (None: it can): on
        another machine, or rootless; then nothing is bind-mounted, and the workspace, the mounts and
        the stub travel as archives (sandbox.docker.transfer)."""
        if transport == "archive" and self.remote is None:
            self.remote = "archives asked for"
        self._engine_removes = engine_removes
        """Containers of a read-only root on this machine's engine are removed by the engine when
        they stop (auto_remove): no removal waits on the caller."""
        self._removed_by_engine: dict[str, bool] = {}
        """Started containers the engine removes when they stop, and whether each ends by itself
        when its stream closes (a stub waiting for its call, or done with it) or must be killed."""
        self._runtimes = runtimes_of(info)
        """The engine's runtimes and their arguments (read once, with where the engine is)."""
        self._info = info
        """The engine's /info answer (which limits it can enforce, among the rest)."""
        self._engine_product: str | None = None
        self._derived: dict[tuple[str, str, str], str] = {}
        """On an engine elsewhere: each (image, working folder, user)'s derived image."""
        self._ahead = AheadOfCalls(self._api, self._make_links)
        """On an engine that takes archives: pooled containers filled while they wait for their call."""
        initial = pool_size if pool_initial is None else pool_initial
        fill = self._ahead.fill if self.remote is not None else None
        self.pool = WarmPool(self._start, self._remove, PoolConfig(size=pool_size, initial=initial), fill=fill)
        self._joining: dict[str, list[Callable[[], None]]] = {}
        """What a call that joins a network runs first, by network (`before_calls_on`)."""
        self._settings: dict[str, dict[str, Any]] = {}
        """The host settings of a call that joins a network, by network (`settings_on`)."""

    def before_calls_on(self, network: str, hook: Callable[[], None]) -> Callable[[], None]:
        """Run hook before each call that joins network (a session's services on an engine elsewhere:
        their copies of the workspace brought up to date, as a bind mount would show them); what
        it returns removes the hook."""
        with self._lock:
            self._joining.setdefault(network, []).append(hook)

        def remove() -> None:
            with self._lock:
                hooks = self._joining.get(network, [])
                if hook in hooks:
                    hooks.remove(hook)

        return remove

    def settings_on(self, network: str, host_settings: dict[str, Any]) -> Callable[[], None]:
        """Give every call that joins network these host settings (a services network on Podman: no
        IPv6 on its interface, `servers.joining`); what it returns takes them away."""
        with self._lock:
            self._settings[network] = dict(host_settings)

        def remove() -> None:
            with self._lock:
                self._settings.pop(network, None)

        return remove

    # -- the Sandbox protocol -------------------------------------------------------------------
    def run(
        self,
        argv: Sequence[str],
        *,
        workspace: Path,
        spec: SandboxSpec,
        mounts: Sequence[Mount] = (),
        stdin: bytes | None = None,
        commit_changes: bool = False,
        refill: bool = True,
    ) -> Envelope:
        """Run argv in a fresh container; envelope for anything the command did."""
        if not argv:
            raise SpecError("nothing to run: the command is empty")
        with self._lock:
            hooks = list(self._joining.get(spec.network, ()))
        for hook in hooks:
            hook()
        key, config, image_id, user = self._prepare(workspace, spec, mounts)
        if stopping.why_stopped() is not None:  # its caller gave up on it while it waited to run
            return self._envelope(_stopped_before_start(spec), spec, image_id, user, None)
        committed = None
        for attempt in range(2):
            cid = self.pool.acquire(key, config, family=spec.image)
            try:
                try:
                    sent = self._send(cid, workspace, spec, mounts, user)
                except Stale:  # filled ahead with what a change here cannot reach: a fresh one instead
                    stale, cid = cid, ""
                    self.pool.release(stale)
                    cid = self._start(config, "call")
                    sent = self._send(cid, workspace, spec, mounts, user)
                with self._egress(cid, spec, user):
                    outcome = self._call_once(cid, argv, spec, stdin)
                self._bring_back(cid, workspace, spec, sent, user)
                if commit_changes and not spec.read_only_root:
                    committed = commit_root(self._api, cid, spec, mounts, self._step_labels())
                self._hang_up(cid)
                break
            except _ContainerGone:
                if stopping.why_stopped() is not None:  # killed before its command began, as its caller asked
                    outcome = _stopped_before_start(spec)
                    break
                if attempt:  # a warm container died before use (engine restart?): one fresh retry only
                    raise self._gone() from None
            finally:
                if cid:
                    self.pool.release(cid)
        if committed:  # the next call starts from the committed image: warm that one instead
            key, config, _, _ = self._prepare(workspace, spec.model_copy(update={"image": committed}), mounts)
        if refill:
            self.pool.prewarm(key, config, family=committed or spec.image)  # after the call: a start would slow it
        else:
            self.pool.skip_refill(key)
        return self._envelope(outcome, spec, image_id, user, committed)

    def call(
        self, cid: str, argv: Sequence[str], *, workspace: Path, spec: SandboxSpec, stdin: bytes | None = None
    ) -> Envelope:
        """Run argv in a container from `start_one` (same workspace and spec, no mounts), then remove
        it; if it died before the call, once more in a fresh one started now."""
        if not argv:
            raise SpecError("nothing to run: the command is empty")
        _, config, image_id, user = self._prepare(workspace, spec, ())
        for attempt in range(2):
            try:
                sent = self._send(cid, workspace, spec, (), user)
                with self._egress(cid, spec, user):
                    outcome = self._call_once(cid, argv, spec, stdin)
                self._bring_back(cid, workspace, spec, sent, user)
                self._hang_up(cid)
                break
            except _ContainerGone:
                if stopping.why_stopped() is not None:
                    outcome = _stopped_before_start(spec)
                    break
                if attempt:
                    raise self._gone() from None
            finally:
                self.pool.release(cid)
            cid = self._start(config, "call")
        return self._envelope(outcome, spec, image_id, user, None)

    def alive(self, cid: str) -> bool:
        """Whether a stub container from `start_one` still waits for its call, asked of its stream
        alone (no engine round trip): a waiting stub sends nothing, so a stream with anything to
        read has ended (the container was killed, the engine restarted)."""
        with self._lock:
            stream = self._streams.get(cid)
        if stream is None:
            return False
        try:
            readable, _, _ = select.select([stream.raw], [], [], 0)
        except (OSError, ValueError):
            return False
        return not readable

    @property
    def lends_streams(self) -> bool:
        """Whether a stub's attached stream can be handed to another process (`lend`): it is a plain
        socket to the engine (a Unix socket, or TCP without TLS), where another process reading and
        writing its descriptor speaks to the engine as this one would. An engine on another machine
        takes the call's workspace as archives whichever process sends them, so its containers are
        lent as well as a local engine's."""
        return streams_pass(str(self._api.base_url))

    def lend(self, cid: str) -> int:
        """The attached stream of a stub container from `start_one` as a new file descriptor (for
        another process to `adopt`); this sandbox forgets the container. SandboxError if it has none,
        or if its stream is not a plain socket (TLS or SSH: its bytes are not the engine's)."""
        with self._lock:
            stream = self._streams.get(cid)
            lendable = stream is not None and type(stream.raw) is socket.socket
            if lendable:
                del self._streams[cid]
                self._owned.discard(cid)
        if stream is None:
            raise SandboxError(f"container {cid[:12]} has no call stub to lend")
        if not lendable:
            raise SandboxError(f"container {cid[:12]}'s stream is not a plain socket: it cannot be lent")
        fd = os.dup(stream.raw.fileno())
        stream.close()  # this process's end only (no shutdown): the new descriptor keeps the stream
        return fd

    def adopt(
        self,
        containers: Sequence[tuple[str, int]],
        *,
        workspace: Path,
        spec: SandboxSpec,
        mounts: Sequence[Mount] = (),
        keep_open: Any = None,
    ) -> bool:
        """Take stub containers another process started (and `lend`-ed) as this sandbox's ready ones
        for these arguments: the caller vouches that they were made from the same config but for
        their labels. Each becomes this sandbox's to use once and remove; keep_open (the loan's
        connection) is closed at `close`, after them. False, taking nothing, when they are not on
        this sandbox's engine (a service of another engine's: its streams reach containers this
        sandbox would never send a workspace to, nor remove)."""
        key, config, _, _ = self._prepare(workspace, spec, mounts)
        if containers and not self._on_this_engine(containers[0][0]):
            return False
        with self._lock:
            self.adopted += len(containers)
            for cid, fd in containers:
                self._streams[cid] = StubStream(socket.socket(fileno=fd))
                self._owned.add(cid)
            if keep_open is not None:
                self._keep_open.append(keep_open)
        self.pool.adopt(key, config, [cid for cid, _ in containers], family=spec.image)
        return True

    def _on_this_engine(self, cid: str) -> bool:
        """Whether this sandbox's engine has a container of this id (ids are random: no other has)."""
        with translate("looking up a lent container"):
            try:
                self._api.inspect_container(cid)
            except docker.errors.NotFound:
                return False
        return True

    def remove(self, cid: str) -> None:
        """Kill and remove a container from `start_one` now (one already gone is not an error)."""
        self._remove(cid)

    def stop(self, cid: str) -> None:
        """Kill a container now (its call, if one runs, ends as killed); removal stays with its owner."""
        self._kill(cid)

    def image_id(self, name: str, *, fresh: bool = False) -> str:
        """The id the engine resolves an image name to (cached for IMAGE_CACHE_S unless fresh)."""
        return self._image(name, fresh=fresh)[0]

    def _call_once(self, cid: str, argv: Sequence[str], spec: SandboxSpec, stdin: bytes | None) -> CallOutcome:
        with self._lock:
            stream = self._streams.pop(cid, None)
        if stream is not None:
            return self._stub_call(cid, stream, list(argv), spec, stdin)
        return self._exec(cid, list(argv), spec, stdin)

    def _envelope(
        self, outcome: CallOutcome, spec: SandboxSpec, image_id: str, user: str, committed: str | None
    ) -> Envelope:
        unenforced = unenforced_limits((self._runtimes or {}).get(spec.runtime, []), spec.runtime, self._info)
        return Envelope.of(
            outcome,
            limits=posture(spec, user, unenforced),
            image_id=image_id,
            runtime=spec.runtime,
            committed_image=committed,
        )

    def prewarm(self, *, workspace: Path, spec: SandboxSpec, mounts: Sequence[Mount] = ()) -> None:
        """Start single-use containers for these arguments in the background."""
        key, config, _, _ = self._prepare(workspace, spec, mounts)
        self.pool.prewarm(key, config, family=spec.image)

    def start_one(
        self, *, workspace: Path, spec: SandboxSpec, mounts: Sequence[Mount] = (), kind: str = "bench"
    ) -> str:
        """Start one container exactly as the pool would, outside it (for `call`, or for measuring the
        engine's start rate); give it back with `call` or `discard`."""
        _, config, _, _ = self._prepare(workspace, spec, mounts)
        return self._start(config, kind)

    def discard(self, cid: str) -> None:
        """Remove a container from `start_one` off the caller's path."""
        self.pool.release(cid)

    def quiesce(self) -> None:
        """Start no more containers ahead of time and wait for those starting (see `WarmPool.drain`)."""
        self.pool.drain()

    def close(self) -> None:
        """Kill and remove every container this sandbox still owns."""
        self.pool.close()
        with self._lock:
            leftovers = list(self._owned)
        for cid in leftovers:
            self._remove(cid)
        if self._holders is not None:
            self._holders.close()  # last: the call containers above were still in its namespace
        for handle in self._keep_open:
            with contextlib.suppress(OSError):
                handle.close()
        if self._owns_client:
            self.client.close()

    def __enter__(self) -> DockerSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- containers ---------------------------------------------------------------------------------
    def _prepare(
        self, workspace: Path, spec: SandboxSpec, mounts: Sequence[Mount]
    ) -> tuple[str, dict[str, Any], str, str]:
        workspace = Path(workspace)
        if not workspace.is_dir():
            raise WorkspaceError(f"workspace is not a directory: {workspace}")
        for mount in mounts:
            if not Path(mount.source).exists():
                raise WorkspaceError(f"mount source does not exist: {mount.source}")
        self._check_runtime(spec.runtime)
        image_id, path = self._image(spec.image)
        user = spec.user or container_user()
        stub = self.call_path == "auto" and spec.runtime in STUB_RUNTIMES and image_id not in self._no_stub
        config = hardening.container_config(
            image_id,
            spec,
            workspace,
            mounts,
            user,
            self._labels(spec),
            stub=stub,
            path=path,
            tunnel=self._tunnels(spec),
        )
        with self._lock:
            joined = self._settings.get(spec.network)
        if joined:
            config = {**config, "host_config": {**config["host_config"], **joined}}
        if self.remote is not None:
            sent = self._sent(spec, mounts)
            config = self._without_binds(config, workspace, spec, sent, user)
            return (
                self._ahead.key(hardening.config_key(config), workspace, spec.workdir, sent, user),
                config,
                image_id,
                user,
            )
        config = hardening.own_namespace(config)  # (its hosts file is bound from here)
        if self._engine_removes and spec.read_only_root:  # (no commit, no archive needs it after its end)
            config["host_config"]["auto_remove"] = True
        return hardening.config_key(config), config, image_id, user

    # -- an engine on another machine (sandbox.docker.transfer) ------------------------------------
    def _without_binds(
        self, config: dict[str, Any], workspace: Path, spec: SandboxSpec, mounts: Sequence[Mount], user: str
    ) -> dict[str, Any]:
        """config with volumes where its binds were, from the image derived for its user."""
        stub = (STUB_DIR,) if hardening.is_stub(config) else ()
        config, _ = transfer.unbound(config, spec, workspace, mounts, also=stub)
        derived = (config["image"], spec.workdir, user)
        if derived not in self._derived:
            self._derived[derived] = self._derive(derived)
        return {**config, "image": self._derived[derived]}

    def _derive(self, derived: tuple[str, str, str]) -> str:
        """The image derived for (image, working folder, user): found by label, or made once."""
        with translate(f"preparing image {derived[0][:19]} for an engine on another machine"):
            labels = labels_of.of_process(self.run_id, "remote-image")  # its helper container's (prune finds it)
            return transfer.derived_image(self._api, *derived, labels)

    def _derived_again(self, image: str, error: docker.errors.APIError) -> str | None:
        """The image derived anew when the one derived for an engine elsewhere was removed meanwhile, else
        None. It is found by label and shared by every run that needs it, and another run's end or a
        prune removes it when no container uses it: this sandbox's next container would name it."""
        if self.remote is None or not said_removed(error):
            return None
        with self._lock:
            stale = [key for key, made in self._derived.items() if made == image and key[0] != image]
        if not stale:
            return None
        try:
            self._api.inspect_image(image)
            return None  # still there: the engine refused something else
        except docker.errors.APIError as gone:
            if not said_removed(gone):
                return None
        made = self._derive(stale[0])
        with self._lock:
            self._derived.update(dict.fromkeys(stale, made))
        return made if made != image else None

    def _send(
        self, cid: str, workspace: Path, spec: SandboxSpec, mounts: Sequence[Mount], user: str
    ) -> dict[str, list[transfer.Part]] | None:
        """The workspace and the mounts into a container's volumes, as they are now (to one filled
        ahead of its call, what changed since: Stale when that cannot be done); what went into each
        volume (None: nothing goes, the engine binds them)."""
        if self.remote is None:
            return None
        layout = transfer.volumes(spec.workdir, workspace, self._sent(spec, mounts))
        with translate("sending the workspace to the engine"):
            try:
                if self._ahead.send(cid, layout, spec.workdir, user):
                    return layout
                climbing = transfer.send(self._api, cid, layout, transfer.numeric_ids(user))
            except docker.errors.NotFound:  # the warm container died before its call
                raise _ContainerGone() from None
        if climbing:
            self._make_links(cid, climbing, user)
        return layout

    def _tunnels(self, spec: SandboxSpec) -> bool:
        """Whether a call of spec reaches its egress proxy through the engine (`sandbox.docker.tunnel`)."""
        return self.remote is not None and spec.egress is not None

    def _sent(self, spec: SandboxSpec, mounts: Sequence[Mount]) -> list[Mount]:
        """The mounts a call's container gets as archives: the call's, for egress through the engine
        the tunnel's container end and the session's CAs, and what its runtime needs (gVisor's nodev)."""
        egress = hardening.tunnel_mounts(str(spec.egress)) if self._tunnels(spec) else []
        return [*mounts, *egress, *transfer.runtime_mounts(spec)]

    def _egress(self, cid: str, spec: SandboxSpec, user: str) -> contextlib.AbstractContextManager[None]:
        """Around a call: its egress carried through the engine (listening in the container before
        the command starts) where the relay cannot reach the proxy's socket."""
        if not self._tunnels(spec):
            return contextlib.nullcontext()
        return tunnel.carried(self._api, cid, user, Path(str(spec.egress)))

    def _make_links(self, cid: str, links: Sequence[tuple[str, str]], user: str) -> None:
        """The symbolic links the engine would not unpack (they climb out of their volume), made in
        the container as the call's user; SandboxError if any cannot be (the call would miss it, and
        its removal would come back)."""
        with translate("making the workspace's links on the engine"):
            code, said = transfer.run_in(self._api, cid, transfer.link_script(links), user)
        if code != 0:
            raise SandboxError(f"could not make the workspace's symbolic links in the call's container: {said[:300]}")

    def _bring_back(
        self, cid: str, workspace: Path, spec: SandboxSpec, layout: dict[str, list[transfer.Part]] | None, user: str
    ) -> None:
        """This machine's workspace made the same as the container's working folder (but for what
        a read-only mount covered); layout: what `_send` sent (None: nothing to bring back)."""
        if layout is None:
            return
        covered = [part.rel for part in layout[spec.workdir] if part.rel]
        owner = transfer.numeric_ids(user) if os.geteuid() == 0 else None
        with translate("bringing the workspace back from the engine"):
            for attempt in range(2):
                try:
                    chunks, _ = self._api.get_archive(cid, spec.workdir)
                    transfer.sync(chunks, workspace, owner, covered)
                    return
                except (transfer.Empty, docker.errors.APIError) as error:
                    # Podman, asked while the container stops, sends nothing or fails to enter it:
                    # nothing was written yet, so once more when it has stopped
                    if attempt or isinstance(error, docker.errors.NotFound):
                        raise
                with contextlib.suppress(docker.errors.APIError, requests.exceptions.RequestException):
                    self._api.wait(cid, timeout=10)

    def _labels(self, spec: SandboxSpec) -> dict[str, str]:
        labels = {**spec.labels, **labels_of.of_run(self.run_id), **labels_of.owner()}
        if self.session_id:
            labels[labels_of.SESSION] = self.session_id
        return labels

    def _gone(self) -> SandboxError:
        """Why a call's container stopped before the command could start, twice: an engine that no
        longer answers is EngineUnavailable (raised by the ping: the class says it, not the words),
        anything else a SandboxError."""
        with translate("asking the engine after a container stopped"):
            self._api.ping()
        return SandboxError(
            "the sandbox container stopped before the command could start; check the engine with `harness doctor`"
        )

    def _step_labels(self) -> dict[str, str]:
        """The labels of an image a call's changes are committed as (a session's step image). A commit
        inherits the labels of the image the container ran: the setup cache key and a derived image's
        key are blanked so a step image (which holds the call's changes) is never mistaken for a cached
        setup, nor for the image derived for an engine elsewhere (another session would start from it)."""
        found = labels_of.of_run(self.run_id, "step", **{labels_of.SETUP_KEY: "", transfer.DERIVED_KEY: ""})
        if self.session_id:
            found[labels_of.SESSION] = self.session_id
        return found

    def _image(self, name: str, *, fresh: bool = False) -> tuple[str, str | None]:
        """(image id, the PATH it declares) for a name, cached for IMAGE_CACHE_S (asked anew if fresh)."""
        now = time.monotonic()
        with self._lock:
            hit = self._images.get(name)
        if hit and now - hit[0] < IMAGE_CACHE_S and not fresh:
            return hit[1], hit[2]
        image_id, path = resolve_image_path(self.client, name)
        with self._lock:
            self._images[name] = (now, image_id, path)
        return image_id, path

    def _check_runtime(self, runtime: str) -> None:
        if runtime not in self._runtimes:
            raise RuntimeUnavailable(
                f"runtime {runtime!r} is not registered with the engine (have: {', '.join(sorted(self._runtimes))}); "
                "install gVisor (apt-get install runsc) and add it to /etc/docker/daemon.json, or use --runtime runc"
            )
        if runtime == "runsc" and self._product() == "Podman":
            raise RuntimeUnavailable(
                f"runtime 'runsc' on Podman is not supported yet: {PODMAN_NO_GVISOR}; "
                "use --runtime runc there, or Docker for gVisor"
            )

    def _product(self) -> str:
        """The engine's product (Docker, Podman), asked once (its /version names it)."""
        if self._engine_product is None:
            with translate("reading the engine's version"):
                self._engine_product = engine_kind(self.client.version(), self._info)[0]
        return self._engine_product

    def _start(self, config: dict[str, Any], kind: str) -> str:
        """A pre-started container for config (the pool's start); where the stub cannot run in its
        image, the same container with KEEPALIVE instead, and that image's calls go by exec."""
        try:
            return self._start_config(config, kind)
        except _NoStub:
            self._no_stub.add(config["image"])
        return self._start_config(hardening.without_stub(config), kind)

    def _start_config(self, config: dict[str, Any], kind: str) -> str:
        if self._holders is None or not netns.shares(config):
            with translate("starting a sandbox container"):
                return self._create_and_start(config, kind)
        joined = self._holders.join_soon(config)
        if joined is None:  # the session's first container: its own namespace, the holder starting beside it
            with translate("starting a sandbox container"):
                return self._create_and_start(config, kind)
        try:
            with translate("starting a sandbox container"):
                return self._create_and_start(joined, kind, holder_may_be_gone=True)
        except _HolderGone:  # removed or stopped behind our back: one fresh holder, one more try
            self._holders.discard(joined["host_config"]["network_mode"].split(":", 1)[1])
        with translate("starting a sandbox container"):
            return self._create_and_start(self._holders.join(config), kind)

    def _create_and_start(self, config: dict[str, Any], kind: str, holder_may_be_gone: bool = False) -> str:
        host = self._api.create_host_config(**config["host_config"])
        labels = {**config["labels"], labels_of.KIND: kind}
        try:
            # not detached, a stub's container has StdinOnce: its stdin ends when its one attached
            # stream closes, and so does the stub, used or not (the SDK sets it only so)
            detach = not hardening.is_stub(config)
            cid = self._api.create_container(**{**config, "labels": labels, "host_config": host}, detach=detach)["Id"]
        except docker.errors.APIError as error:  # Podman refuses at create what Docker refuses at start
            if holder_may_be_gone and netns.holder_gone(error):
                raise _HolderGone() from None
            if (again := self._derived_again(config["image"], error)) is not None:
                return self._create_and_start({**config, "image": again}, kind, holder_may_be_gone)
            raise
        with self._lock:
            self._owned.add(cid)
        stream = None
        try:
            if self.remote is not None and hardening.is_stub(config):
                transfer.put_stub(self._api, cid)
            if hardening.is_stub(config):  # attached before the start: nothing the stub says is missed
                stream = StubStream(
                    self._api.attach_socket(cid, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
                )
            self._api.start(cid)
        except BaseException as error:
            if stream is not None:
                stream.close()
            self._remove(cid)
            if holder_may_be_gone and netns.holder_gone(error):
                raise _HolderGone() from None
            raise
        if stream is not None:
            if not stream.hello():
                stream.close()
                self._remove(cid)
                raise _NoStub()
            self._api._disable_socket_timeout(stream.sock)  # type: ignore[attr-defined]
            with self._lock:
                self._streams[cid] = stream
        if config["host_config"].get("auto_remove"):
            with self._lock:
                self._removed_by_engine[cid] = stream is not None
        return cid

    def _remove(self, cid: str) -> None:
        with self._lock:
            streams = [self._streams.pop(cid, None), self._answered.pop(cid, None)]
            by_engine = self._removed_by_engine.pop(cid, None)
        self._ahead.forget(cid)
        for stream in streams:
            if stream is not None:
                stream.close()
        # The engine removes a container of its own once it stops: a stub's that waits for its call or
        # is done with it stops as its stream closes, another is killed; one not running is removed.
        if by_engine is None or not (by_engine or self._kill(cid)):
            with contextlib.suppress(
                docker.errors.NotFound, docker.errors.APIError, requests.exceptions.RequestException
            ):
                remove_container(self._api, cid)
        with self._lock:
            self._owned.discard(cid)

    def _exec_exited(self, exec_id: str) -> bool:
        with contextlib.suppress(docker.errors.APIError, requests.exceptions.RequestException):
            state = self._api.exec_inspect(exec_id)
            # Before the engine marks a new exec Running it reports Running=false with no ExitCode.
            return not state.get("Running", True) and state.get("ExitCode") is not None
        return False

    def _ends_by_itself(self, cid: str, ends: bool) -> None:
        with self._lock:
            if cid in self._removed_by_engine:
                self._removed_by_engine[cid] = ends

    def _kill(self, cid: str) -> bool:
        """Kill a container; whether it was running (a stopped one, or one gone, answers an error)."""
        try:
            self._api.kill(cid)
            return True
        except (docker.errors.APIError, requests.exceptions.RequestException):
            return False

    # -- one call -----------------------------------------------------------------------------------
    def _exec(self, cid: str, argv: list[str], spec: SandboxSpec, stdin: bytes | None) -> CallOutcome:
        # `timeout` inside is the second line; the host kills the whole container at spec.timeout_s.
        command = ["timeout", "-k", "2", f"{spec.timeout_s + 1:g}s", *argv]
        if spec.runtime == "runsc":
            command = [*NODEV_ARGV, *command]  # gVisor gives an exec'd process no seccomp profile
        with translate("starting the command"):  # an engine gone away is EngineUnavailable, as anywhere
            try:
                exec_id = self._api.exec_create(cid, command, stdin=stdin is not None, stdout=True, stderr=True)["Id"]
            except docker.errors.APIError as error:
                if error.status_code in (404, 409):
                    raise _ContainerGone() from None
                raise
        with translate("starting the command"):
            started = time.monotonic()
            sock = self._api.exec_start(exec_id, socket=True)
            ahead = read_ahead(sock)
        watch = CallWatch(
            lambda: self.stop(cid), lambda: self._exec_exited(exec_id), spec.timeout_s, abort=lambda: shut(sock)
        )
        detach = stopping.on_stop(lambda: watch.cut("stopped"))
        out, err = CappedOutput(spec.stdout_cap), CappedOutput(spec.stderr_cap)
        try:
            # The SDK's own helper for attached streams (the stubs omit it): the call watch bounds the wait.
            self._api._disable_socket_timeout(sock)  # type: ignore[attr-defined]
            if stdin is not None:
                threading.Thread(target=send_stdin, args=(sock, stdin), daemon=True).start()
            for stream, data in frames(sock, ahead):
                (err if stream == 2 else out).feed(data)
                if out.total + err.total > spec.output_ceiling:
                    watch.stop("output_limit")
                    break
        except OSError:
            pass  # the container was killed under us: the watch reason says why
        finally:
            with contextlib.suppress(OSError):
                sock.close()
            watch.finish()
            detach()
        duration_ms = int((time.monotonic() - started) * 1000)
        exit_code, status = self._outcome(cid, exec_id, watch.reason, duration_ms >= spec.timeout_s * 1000)
        _say_stopped(watch.reason, err)
        return CallOutcome.captured(exit_code, status, duration_ms, out, err)

    def _stub_call(
        self, cid: str, stream: StubStream, argv: list[str], spec: SandboxSpec, stdin: bytes | None
    ) -> CallOutcome:
        """One call through the stub: the request down the attached stream, framed output and the
        exit status back. The host's watch still kills the whole container at the deadline or the
        output ceiling; a stream that ends without the exit frame means the stub was killed."""
        started = time.monotonic()
        self._ends_by_itself(cid, False)  # a call under way: ended by a kill if it must end early
        try:
            stream.request(argv, stdin)
        except OSError:
            stream.close()
            raise _ContainerGone() from None

        def end() -> None:  # our end of the stream first: an engine blocked writing to it would not stop the container
            shut(stream.sock)
            self._kill(cid)

        watch = CallWatch(end, lambda: False, spec.timeout_s, abort=lambda: shut(stream.sock))
        detach = stopping.on_stop(lambda: watch.cut("stopped"))
        out, err = CappedOutput(spec.stdout_cap), CappedOutput(spec.stderr_cap)
        code: int | None = None
        try:
            if next(stream.messages(), (b"", b""))[0] != b"A":
                raise StubLost()
        except (StubLost, OSError):
            stream.close()
            watch.finish()
            detach()
            raise _ContainerGone() from None  # it died before the call reached it: a fresh one is tried
        try:
            for kind, payload in stream.messages():
                if kind == b"X":
                    code = int(json.loads(payload)["exit"])
                    break
                (err if kind == b"E" else out).feed(payload)
                if out.total + err.total > spec.output_ceiling:
                    watch.stop("output_limit")
                    break
        except (StubLost, OSError, ValueError, KeyError, TypeError):
            pass  # killed under us (the watch reason says why), or the stub itself was killed
        finally:
            watch.finish()
            detach()
        _say_stopped(watch.reason, err)
        duration_ms = int((time.monotonic() - started) * 1000)
        status: Status
        try:  # the stream closed last: the stub, and so the container and its cgroup, wait for it
            ended = _ENDED_BY_WATCH.get(watch.reason or "")
            if ended is not None:
                code, status = ended
            else:
                lost = code is None
                code, status = self._by_code(cid, 137 if code is None else code)
                if lost and status != "oom_killed":  # no exit frame and no OOM: the stub was killed
                    err.feed(STUB_LOST.encode())
                else:
                    self._ends_by_itself(cid, True)  # its stub said the end and waits for the close
        finally:
            with self._lock:
                self._answered[cid] = stream
        return CallOutcome.captured(code, status, duration_ms, out, err, call_path="stub")

    def _hang_up(self, cid: str) -> None:
        """Close the stream of a stub whose call is over and whose working folder came back: the stub
        ends, and its container stops by itself before its removal kills it."""
        with self._lock:
            stream = self._answered.pop(cid, None)
        if stream is not None:
            stream.close()

    def _oom_killed(self, cid: str) -> bool:
        with contextlib.suppress(docker.errors.APIError, requests.exceptions.RequestException):
            if self._api.inspect_container(cid)["State"].get("OOMKilled"):
                return True
        return cgroup_oom_killed(cid)

    def _by_code(self, cid: str, code: int) -> tuple[int, Status]:
        """The status of a command that exited with code (137: the OOM killer, if the cgroup says so)."""
        if code == 137 and self._oom_killed(cid):
            return 137, "oom_killed"
        return code, "ok" if code == 0 else "exit_nonzero"

    def _outcome(self, cid: str, exec_id: str, reason: str | None, past_deadline: bool) -> tuple[int, Status]:
        ended = _ENDED_BY_WATCH.get(reason or "")
        if ended is not None:
            return ended
        code = None
        with contextlib.suppress(docker.errors.APIError, requests.exceptions.RequestException):
            code = exit_code_of(self._api, exec_id, wait_s=1.0)
        if code is None:
            return 137, "exit_nonzero"
        if code in (124, 137) and past_deadline:
            # The inner `timeout` fired first (TERM, or KILL after a trapped TERM): it is the deadline.
            return 124, "timeout"
        return self._by_code(cid, code)


def _say_stopped(reason: str | None, err: CappedOutput) -> None:
    """A call its caller stopped says so at the end of its stderr (sandbox.stopping)."""
    if reason == "stopped":
        err.feed(stopping.said().encode())


def _stopped_before_start(spec: SandboxSpec) -> CallOutcome:
    """The outcome of a call whose caller stopped it before its command began."""
    out, err = CappedOutput(spec.stdout_cap), CappedOutput(spec.stderr_cap)
    _say_stopped("stopped", err)
    return CallOutcome.captured(137, "exit_nonzero", 0, out, err)


class _NoStub(Exception):
    """The stub did not say hello in a new container (its image has no usable python3)."""


class _ContainerGone(Exception):
    """A pre-started container was no longer running when its call began."""


class _HolderGone(Exception):
    """The network-namespace holder a container was to join is no longer running."""
