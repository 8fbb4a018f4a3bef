"""A session: a private workspace copied from the user's repository, its snapshots, and steps.

Layout of `<state_dir>/<session id>/`: `session.json` (written atomically, last, by `create`: a
folder without it is an unfinished create), `steps.jsonl` (append-only; step N = workspace tree
id + image), `workspace/` (what containers see; given back when the session ends and made again from
the snapshots when needed), `store/` (the stat index and pinned trees). The objects are in the state
directory's shared store (`sandbox.snapshot.shared`), which sessions of one repository and forks of
a session share. The user's repository is read once, by `create`, and never written. Rollback appends
a step that repeats an earlier one, so history is never lost and the next step continues from the
restored state. (The file names come from `sandbox.layout`; the records are `sandbox.session.records`.)

About 600 lines: the one `Session` class is a session's whole lifecycle (create, fork, open, commit,
rollback, retire, diff, export), each method short; splitting it would scatter the step-log and
shared-store locking.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from sandbox import durable, labels
from sandbox.errors import SessionNotFound, SetupError, SnapshotError, StepOutOfRange, WorkspaceError
from sandbox.layout import SessionFolder, objects_dir
from sandbox.network.egress import Egress, pem_bundle
from sandbox.network.secrets import Secret
from sandbox.owner import hand_over
from sandbox.session import quota, reading
from sandbox.session.origin import head_commit
from sandbox.session.records import (
    ForkPoint,
    Prepare,
    Ready,
    SessionConfig,
    SessionInfo,
    SetupRecord,
    StepImages,
    StepRecord,
    list_sessions,
)
from sandbox.session.workspace import copy_repository
from sandbox.settings import StartedFrom
from sandbox.snapshot import diff as snapdiff
from sandbox.snapshot import edit
from sandbox.snapshot.diff import SnapshotDiff
from sandbox.snapshot.objects import LARGE, ObjectStore
from sandbox.snapshot.shared import SharedObjects, pin
from sandbox.snapshot.store import SnapshotStore
from sandbox.spec import SandboxSpec
from sandbox.tree import remove_tree

__all__ = [
    "Prepare",
    "Ready",
    "Session",
    "SessionConfig",
    "SessionInfo",
    "SetupRecord",
    "StepImages",
    "StepRecord",
    "list_sessions",
]


def _refusals(log: Path) -> str:
    """The distinct requests a session's egress proxy refused, with why (what a failed setup needed and
    could not reach: a registry resolving into a reserved range, a host not listed)."""
    from sandbox.network.netlog import read_log

    seen: dict[str, str] = {}
    for request in read_log(log):
        if not request.get("allowed"):
            seen.setdefault(f"{request.get('host')}:{request.get('port')}", str(request.get("reason", "")))
    return "; ".join(f"{target} ({why})" for target, why in list(seen.items())[:3])


class Session:
    """One session folder. Use `create` or `open`; `close` persists the snapshot index.

    With `images` given, committed step images are kept (tagged), rollback refuses a step whose
    image is gone before touching the workspace, and `delete` removes the session's images."""

    def __init__(self, folder: Path, info: SessionInfo, images: StepImages | None = None) -> None:
        self.dir = Path(folder)
        self.paths = SessionFolder(self.dir)
        self.info = info
        self.step_images = images
        self.shared = SharedObjects(Path(info.objects)) if info.objects else None
        """The state directory's object store this session's snapshots are in (None: its own)."""
        self._store: SnapshotStore | None = None
        self._holding = False
        self.unrecorded: list[str] = []
        """What a refused `retire` found in the workspace that no step holds (`added path`, ...)."""
        self.records = self._read_steps()
        if not self.records:
            raise SessionNotFound(f"session {info.id} has no committed step; remove it: harness session rm {info.id}")
        self._owns_mount = bool(info.config.workspace_quota) and quota.mount(self.paths.workspace)
        self.egress: Egress | None = None
        """The session's egress proxy while it serves (`connect_network`); its tool calls reach the
        allowed hosts only with `allow_net_tools`."""
        self.service_network: str | None = None
        """The session's services network while they run: every call joins it (no route out)."""

    # --- lifecycle ------------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        repo: Path,
        state_dir: Path,
        *,
        spec: SandboxSpec,
        session_id: str | None = None,
        config: SessionConfig | None = None,
        prepare: Prepare | None = None,
        ready: Ready | None = None,
        images: StepImages | None = None,
        workspace_from: Path | None = None,
        secrets: Sequence[Secret] = (),
        started_from: StartedFrom | None = None,
    ) -> Session:
        """Copy repo into a new session, run environment preparation if given, record step 0.
        secrets: the values of the settings' `--secret` bindings (their proxy alone holds them).
        started_from: the commit repo's files came from, when repo is no git repository itself (a
        mined task's start state), for `harness apply`.

        workspace_from: a directory (on the same filesystem, holding only empty directories) renamed
        to be the workspace before the copy, such as a borrowed slot whose containers bind it."""
        sid = session_id or uuid.uuid4().hex[:12]
        if not sid.replace("-", "").replace("_", "").isalnum():
            raise WorkspaceError(f"invalid session id {sid!r}: use letters, digits, - and _")
        folder = Path(state_dir) / sid
        paths = SessionFolder(folder)
        if folder.exists():
            raise WorkspaceError(f"session {sid} already exists in {state_dir}")
        config = config or SessionConfig()
        if config.workspace_quota:
            quota.check_possible(config.workspace_quota)
        for bundle, flag in config.named_bundles():  # each read now, whatever uses it later (or nothing)
            pem_bundle(bundle, flag)
        egress: Egress | None = None
        shared = SharedObjects(objects_dir(Path(state_dir))).init()
        try:
            folder.mkdir(parents=True)
        except FileExistsError:
            raise WorkspaceError(f"session {sid} already exists in {state_dir}") from None
        try:
            left_out: list[str] = []
            durable.write_json(paths.creating, labels.owner())
            if config.workspace_quota:
                quota.create(paths.workspace, config.workspace_quota)
            elif workspace_from is not None:
                os.rename(workspace_from, paths.workspace)
            try:
                copy_repository(Path(repo), paths.workspace, max_file_bytes=config.max_file_bytes, left_out=left_out)
            except OSError as error:
                if config.workspace_quota and error.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise WorkspaceError(
                        f"the repository does not fit in the workspace quota of {config.workspace_quota} bytes"
                    ) from None
                raise
            if config.network_hosts and (prepare is not None or config.allow_net_tools):  # someone will use it
                folder.mkdir(parents=True, exist_ok=True)
                egress = Egress(
                    config.network_hosts, paths.network, sid, secrets, config.proxy_trust, config.ca_bundle
                ).start()
            try:
                setup = prepare(paths.workspace, egress.folder if egress else None) if prepare is not None else None
            except SetupError as error:
                refused = _refusals(paths.network) if egress is not None else ""
                if not refused:
                    raise
                raise SetupError(f"{error}; the egress proxy refused {refused}") from None
            finally:
                if egress is not None and not config.allow_net_tools:
                    egress.stop()  # setup was all that may reach the hosts
            image = setup.image if setup else spec.image
            info = SessionInfo(
                id=sid,
                repo=str(Path(repo).resolve()),
                created=time.time(),
                spec=spec.model_copy(
                    update={"labels": {**spec.labels, **labels.of_session(sid, str(Path(state_dir).resolve()))}}
                ),
                config=config,
                setup=setup,
                left_out=left_out,
                origin=started_from.commit if started_from is not None else head_commit(Path(repo)),
                started_from=started_from,
                objects=str(shared.root.resolve()),
            )
            if ready is not None:
                ready(paths.workspace, _call_spec(info, image, egress))
            shared.add_ref(folder)
            with shared.writing():
                store = SnapshotStore(paths.workspace, paths.store, config.snapshot, shared)
                tree = store.snapshot()
                store.close()
                record = StepRecord(
                    step=0,
                    tree=tree,
                    image=image,
                    time=time.time(),
                    note="import",
                    kind="import",
                    skipped=store.skipped(),
                )
                durable.append_line(paths.steps, record.model_dump())
            durable.write_json(paths.info, info.model_dump(mode="json"))
            paths.creating.unlink(missing_ok=True)
        except BaseException:
            if egress is not None:
                egress.stop()
            if config.workspace_quota:
                with contextlib.suppress(WorkspaceError):
                    quota.unmount(paths.workspace)
            remove_tree(folder, ignore_errors=True)
            shared.remove_ref(folder)
            raise
        session = cls(folder, info, images)
        session._owns_mount = bool(config.workspace_quota)  # mounted by this create: unmounted at close
        session.egress = egress if egress is not None and egress.running else None
        return session

    @classmethod
    def open(cls, state_dir: Path, session_id: str, images: StepImages | None = None) -> Session:
        """Open an existing session at its last complete step; SessionNotFound otherwise."""
        record = reading.session_record(state_dir, session_id)
        try:
            info = SessionInfo(**record)
        except (ValueError, TypeError) as error:
            raise SessionNotFound(f"session {session_id} is unreadable: {error}") from None
        return cls(Path(state_dir) / session_id, info, images)

    @classmethod
    def fork(
        cls,
        parent: Session,
        step: int,
        state_dir: Path,
        session_id: str | None = None,
        images: StepImages | None = None,
        run_step: int | None = None,
        agent: str | None = None,
    ) -> Session:
        """A new session in state_dir whose steps 0..step are parent's (same trees, images and
        numbers: its diff and patch still start at the import; run_step: the parent's run step that
        snapshot holds, for the record): nothing is copied, its objects are
        the parent's shared store's (referenced by the fork too) and its workspace is made from them
        when first needed; agent: the name of the sub-agent whose branch it is)."""
        if parent.shared is None:
            raise WorkspaceError(
                f"session {parent.id} keeps a store of its own (an older session): it cannot be forked"
            )
        parent.check_step(step)  # before anything is written: a damaged parent makes no half fork
        prefix = parent.records[: parent.record(step).step + 1]
        sid = session_id or uuid.uuid4().hex[:12]
        if not sid.replace("-", "").replace("_", "").isalnum():
            raise WorkspaceError(f"invalid session id {sid!r}: use letters, digits, - and _")
        folder = Path(state_dir) / sid
        paths = SessionFolder(folder)
        folder.mkdir(parents=True)  # FileExistsError when it exists: a fork never overwrites
        try:
            parent.shared.add_ref(folder)
            spec = parent.info.spec.model_copy(
                update={"labels": {**parent.info.spec.labels, **labels.of_session(sid, str(Path(state_dir).resolve()))}}
            )
            info = parent.info.model_copy(
                update={
                    "id": sid,
                    "created": time.time(),
                    "spec": spec,
                    "parent": ForkPoint(
                        session=parent.id,
                        step=step if run_step is None else run_step,
                        snapshot=step,
                        folder=str(parent.dir.resolve()),
                        agent=agent,
                    ),
                }
            )
            with parent.shared.writing():
                for record in prefix:
                    durable.append_line(paths.steps, record.model_dump())
            if images is not None:
                for record in prefix[1:]:
                    if record.image != prefix[0].image:
                        images.keep(sid, record.step, record.image)  # the parent's step images, the fork's too
            durable.write_json(paths.info, info.model_dump(mode="json"))
            paths.creating.unlink(missing_ok=True)
        except BaseException:
            remove_tree(folder, ignore_errors=True)
            parent.shared.remove_ref(folder)
            raise
        return cls(folder, info, images)

    def _read_steps(self) -> list[StepRecord]:
        try:
            return [StepRecord(**r) for r in reading.step_lines(self.paths, self.info.id)]
        except (ValueError, TypeError) as error:
            raise SnapshotError(f"session {self.info.id}: its step log is damaged: {error}".splitlines()[0]) from None

    @property
    def store(self) -> SnapshotStore:
        """The snapshot store, opened on first use (show/diff never load the stat index)."""
        if self._store is None:
            self._store = SnapshotStore(self.workspace, self.paths.store, self.info.config.snapshot, self.shared)
        return self._store

    def check_step(self, step: int) -> None:
        """SnapshotError naming what is wrong when step's tree cannot be read whole: every tree and every
        file's object is read, each checked against its hash (StoreAltered: altered on disk); large
        files and submodules are kept elsewhere."""
        objects = self._objects()
        pending = [self.record(step).tree]
        while pending:
            try:
                entries = objects.tree(pending.pop())
            except SnapshotError as error:
                raise type(error)(f"session {self.id}'s step {step} cannot be read: {error}") from None
            for entry in entries:
                kind = entry.mode & 0o170000
                if kind == 0o040000:
                    pending.append(entry.oid)
                elif not (entry.mode & LARGE or kind == 0o160000):
                    name = entry.name.decode("utf-8", "replace")
                    if not objects.has(entry.oid):
                        raise SnapshotError(
                            f"session {self.id}'s step {step} cannot be read: the object of {name} is missing"
                        )
                    try:
                        objects.read(entry.oid)
                    except SnapshotError as error:
                        raise type(error)(f"session {self.id}'s step {step} cannot be read: {error}") from None

    def _objects(self) -> ObjectStore:
        if self._store is not None:
            return self._store.objects
        return ObjectStore(reading.object_dir(self.paths, self.info.objects))

    def _writing(self) -> contextlib.AbstractContextManager[None]:
        """No collection of the shared store while held (objects written until their tree is recorded)."""
        return self.shared.writing() if self.shared is not None else contextlib.nullcontext()

    # --- the workspace of an ended session: given back, made again when needed -------------------

    def retire(self) -> bool:
        """An ended session keeps its snapshots, not a workspace copy: remove the workspace (and the
        stat index) when it equals the last step; `workspace` makes it again from the store when
        something needs it. False when kept: its own store, a quota mount, or uncommitted changes."""
        if self.shared is None or self.info.config.workspace_quota or not self.paths.workspace.is_dir():
            return False
        gone = self.dir / f"workspace.retired-{os.getpid()}"
        with self._locked():
            now = self.store.snapshot()
            if now != self.last_tree:  # never lose what no step holds
                changes = snapdiff.diff(self._objects(), self.last_tree, now).changes
                self.unrecorded = [f"{change.kind} {change.path}" for change in changes]
                return False
            self.close()
            os.rename(self.paths.workspace, gone)
            (self.paths.store / "index.pickle").unlink(missing_ok=True)
        self._store = None
        remove_tree(gone, ignore_errors=True)
        return True

    @property
    def retired(self) -> bool:
        """The workspace is not on disk (an ended session): made again from the store when needed."""
        return self.shared is not None and not self.paths.workspace.is_dir()

    def _rebuild(self) -> None:
        """Make the workspace again from the last step's tree (in a side folder, renamed into place)."""
        with contextlib.nullcontext() if self._holding else self._locked():
            if self.paths.workspace.is_dir():
                return
            for stale in self.dir.glob("workspace.*"):
                remove_tree(stale, ignore_errors=True)  # a rebuild or retire a crash cut short
            building = self.dir / f"workspace.building-{os.getpid()}"
            building.mkdir(mode=0o755)
            hand_over(building)
            store = SnapshotStore(building, self.paths.store, self.info.config.snapshot, self.shared)
            try:
                store.restore(self.records[-1].tree)
            finally:
                store.close()
            os.rename(building, self.paths.workspace)

    def connect_network(
        self, allow: list[str] | None = None, tools: bool | None = None, secrets: Sequence[Secret] = ()
    ) -> None:
        """Start the session's egress proxy for its tool calls (a resumed run), when its settings (or
        the resume's: allow, tools) let tool calls reach allowed hosts; a no-op otherwise."""
        config = self.info.config
        if allow is not None or tools is not None:
            update = {"allow_net": list(config.allow_net if allow is None else allow)}
            update["allow_net_tools"] = config.allow_net_tools if tools is None else tools  # type: ignore[assignment]
            config = config.model_copy(update=update)
            self.info = self.info.model_copy(update={"config": config})
        hosts = [*config.network_hosts, *(s.host for s in secrets if s.host not in config.network_hosts)]
        if self.egress is None and config.allow_net_tools and hosts:
            self.egress = Egress(
                hosts, self.paths.network, self.id, secrets, config.proxy_trust, config.ca_bundle
            ).start()

    def close(self) -> None:
        if self.egress is not None:
            self.egress.stop()
            self.egress = None
        if self._store is not None and self.dir.exists():
            self._store.close()
        if self._owns_mount:
            self._owns_mount = False
            quota.unmount(self.paths.workspace)

    def workspace_full(self) -> int | None:
        """The workspace quota (bytes) when it is (nearly) used up; None with room left or no quota."""
        limit = self.info.config.workspace_quota
        return limit if limit and quota.is_full(self.paths.workspace) else None

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- properties -----------------------------------------------------------------------------

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def repo(self) -> Path:
        return Path(self.info.repo)

    @property
    def workspace(self) -> Path:
        """What containers see; an ended session's is made again from the store on first use."""
        if not self.paths.workspace.is_dir() and self.shared is not None:
            self._rebuild()
        return self.paths.workspace

    @property
    def config(self) -> SessionConfig:
        return self.info.config

    @property
    def step(self) -> int:
        return self.records[-1].step

    @property
    def image(self) -> str:
        return self.records[-1].image

    @property
    def spec(self) -> SandboxSpec:
        """The session's sandbox spec with its current image (writable root when asked for)."""
        return _call_spec(self.info, self.image, self.egress, self.service_network)

    def record(self, step: int) -> StepRecord:
        if not 0 <= step <= self.step:
            raise StepOutOfRange(f"session {self.id} has steps 0..{self.step}; there is no step {step}")
        return self.records[step]

    # --- steps ----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.paths.lock, "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                with self._writing():
                    self.records = self._read_steps()
                    self._holding = True
                    yield
            finally:
                self._holding = False
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _append(self, record: StepRecord) -> StepRecord:
        durable.append_line(self.paths.steps, record.model_dump())
        self.records.append(record)
        return record

    def commit_step(
        self, note: str = "", committed_image: str | None = None, *, skip_unchanged: bool = False
    ) -> StepRecord:
        """Snapshot the workspace as the next step; its image is committed_image or the current one.

        With skip_unchanged, a snapshot equal to the last step's (same tree, same image) appends
        nothing and returns the last step: the agent loop's `run_command` steps that wrote nothing."""
        with self._locked():
            tree = self.store.snapshot()
            last = self.records[-1]
            if skip_unchanged and tree == last.tree and (committed_image or self.image) == last.image:
                return last
            record = self._append(
                StepRecord(
                    step=self.step + 1,
                    tree=tree,
                    image=committed_image or self.image,
                    time=time.time(),
                    note=note,
                    skipped=self.store.skipped(),
                )
            )
        if committed_image and self.step_images is not None:
            self.step_images.keep(self.id, record.step, committed_image)
        return record

    def _check_image(self, image: str) -> None:
        if self.step_images is not None and image != self.image:
            self.step_images.check(image)

    def rollback(self, to: int, note: str | None = None) -> StepRecord:
        """Restore workspace and image of step `to` as a new step; on failure nothing changes. note:
        what the new step's record says (default: `rollback to step TO`)."""
        with self._locked():
            target = self.record(to)
            self._check_image(target.image)
            before = self.store.snapshot()
            try:
                self.store.restore(target.tree)
            except BaseException:
                with contextlib.suppress(SnapshotError):
                    self.store.restore(before)
                raise
            return self._append(
                StepRecord(
                    step=self.step + 1,
                    tree=target.tree,
                    image=target.image,
                    time=time.time(),
                    note=note or f"rollback to step {to}",
                    kind="rollback",
                    rolled_back_to=to,
                    skipped=target.skipped,
                )
            )

    def reset_workspace(self) -> None:
        """Throw away uncommitted workspace changes (e.g. after a crash mid-step)."""
        with self._locked():
            self.store.restore(self.records[-1].tree)

    # --- trees, for verification (nothing here appends a step) -----------------------------------

    @property
    def start_tree(self) -> str:
        """The workspace tree the session started from (after its setup): step 0."""
        return self.records[0].tree

    @property
    def last_tree(self) -> str:
        """The workspace tree of the last recorded step."""
        return self.records[-1].tree

    def tree_now(self) -> str:
        """The workspace's tree as it is now, stored but not recorded as a step (pinned: a collection
        keeps it for a later restore_tree)."""
        with self._locked():
            tree = self.store.snapshot()
            if self.shared is not None:
                pin(self.paths.store, tree)
            return tree

    def restore_tree(self, tree: str) -> None:
        """Make the workspace byte-identical to a stored tree (no step recorded: verification puts
        the workspace back where it found it)."""
        with self._locked():
            self.store.restore(tree)

    def changed_paths(self, a: str, b: str) -> list[str]:
        """Every path that differs between two stored trees (directories end in `/`)."""
        return [path for path, _old, _new in snapdiff.compare(self._objects(), a, b)]

    def read_file(self, tree: str, path: str) -> bytes | None:
        """A regular file's bytes in a stored tree; None when absent, a directory, a link or large."""
        entry = edit.entry_at(self._objects(), tree, path)
        if entry is None or entry.mode & 0o170000 != 0o100000 or entry.mode & LARGE:
            return None
        return self._objects().read(entry.oid, b"blob")

    def kind_of(self, tree: str, path: str) -> str | None:
        """What a path of a stored tree is (sandbox.snapshot.edit.kind_at): file, folder, link, large,
        other; None when absent."""
        return edit.kind_at(self._objects(), tree, path)

    def graft(self, tree: str, source: str, paths: list[str]) -> str:
        """A stored tree: tree with those paths as they are in source (see sandbox.snapshot.edit)."""
        return self._pinned(lambda objects: edit.graft(objects, tree, source, paths))

    def prune(self, tree: str) -> str:
        """A stored tree: tree without generated caches and bytecode."""
        return self._pinned(lambda objects: edit.prune(objects, tree))

    def _pinned(self, make: Callable[[ObjectStore], str]) -> str:
        with self._writing():
            objects = self._objects()
            tree = make(objects)
            objects.sync(self.info.config.snapshot.durable)
            if self.shared is not None:
                self.paths.store.mkdir(exist_ok=True)
                pin(self.paths.store, tree)
        return tree

    def diff(self, from_step: int = 0, to_step: int | None = None) -> SnapshotDiff:
        """Unified diff, binary and mode changes between two steps (default: import to latest)."""
        a = self.record(from_step).tree
        b = self.record(self.step if to_step is None else to_step).tree
        return snapdiff.diff(self._objects(), a, b)

    def diff_trees(self, a: str, b: str) -> SnapshotDiff:
        """Unified diff, binary and mode changes between two stored trees (a sub-agent's branch)."""
        return snapdiff.diff(self._objects(), a, b)

    def export_patch(self) -> str:
        """A patch from the imported repository to the latest step, for `git apply` on the original."""
        return snapdiff.export_patch(self._objects(), self.records[0].tree, self.records[-1].tree)

    def check_patch(self, patch: str) -> None:
        """Raise PatchConflict unless `git apply --check` accepts patch on the original repository."""
        snapdiff.check_patch(self._objects(), self.repo, patch)

    def images(self) -> list[str]:
        """Every distinct image the session's steps use (step 0's first)."""
        return list(dict.fromkeys(r.image for r in self.records))

    def delete(self) -> None:
        """Remove the session folder and (with step-image operations) the images labelled with its id."""
        self.close()
        if self.step_images is not None:
            self.step_images.remove(self.id, self.dir.parent)
        if self.info.config.workspace_quota:
            quota.unmount(self.paths.workspace)  # mounted by another holder of the session: gone with it
        remove_tree(self.dir)
        if self.shared is not None:
            self.shared.remove_ref(self.dir)  # its objects go at the next collection unless others hold them


def _call_spec(info: SessionInfo, image: str, egress: Egress | None = None, network: str | None = None) -> SandboxSpec:
    update: dict[str, object] = {"image": image}
    if network:
        update["network"] = network
    if egress is not None and egress.running and info.config.allow_net_tools:
        update["egress"] = str(egress.folder)
    if info.config.writable_root:
        update["read_only_root"] = False
        update["tmp_in_root"] = info.config.keep_tmp
    return info.spec.model_copy(update=update)
