"""The composition root's sessions outside a run: listing and removing them, `harness exec --session`
(each command a step), and the session an integration drives (`harness.integrations.box`).

The CLI and the integrations reach `sandbox.session` only through here (an import contract keeps it
so), so a session is made, opened and removed the same way whoever asks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.assembly import engine
from harness.errors import StateError

if TYPE_CHECKING:
    from harness.config import Devcontainer
    from sandbox.docker.containers import DockerSandbox
    from sandbox.envelope import Envelope
    from sandbox.network.secrets import Secret
    from sandbox.session.reading import Snapshots
    from sandbox.session.session import Session as Session
    from sandbox.session.session import SessionConfig as SessionConfig
    from sandbox.session.session import SessionInfo as SessionInfo
    from sandbox.settings import SessionSettings
    from sandbox.snapshot.shared import Collected
    from sandbox.spec import SandboxSpec

__all__ = [
    "ExecStep",
    "Session",
    "SessionConfig",
    "SessionInfo",
    "box_session",
    "collect_objects",
    "exec_step",
    "list_sessions",
]


def list_sessions(sessions: Path) -> list[SessionInfo]:
    """Every complete session of the state directory, oldest first."""
    from sandbox.session.records import list_sessions as listed

    return listed(sessions)


def open_snapshots(sessions: Path, session_id: str) -> Snapshots:
    """An existing session's step trees and their store, read without opening the session (diff,
    export): no model built, no workspace or engine touched."""
    from sandbox.session.reading import Snapshots

    return Snapshots.open(sessions, session_id)


def rolled_back(session: Session, to: int) -> bool:
    """After `harness rollback` of a session that had a run: the run goes on from the restored state
    (`harness resume SESSION --follow-up TEXT`: its state points at the new snapshot, so a resume
    restores that, not the run's last), its record says the workspace is no longer the run's result,
    and its patch is the restored state's (`export` and `apply` take it). False: no run (an exec's)."""
    from harness.agent.outcome import RunState
    from harness.trajectory import EventRecord, Trajectory, read_state, write_state
    from sandbox.durable import write_text_atomic
    from sandbox.layout import SessionFolder

    folder = SessionFolder(Path(session.dir))
    state = read_state(folder.root, RunState)
    if state is None:
        return False
    write_state(folder.root, state.model_copy(update={"snapshot_step": session.step}))
    ended = f" after it ended {state.result.outcome}" if state.finished and state.result is not None else ""
    trajectory = Trajectory(folder.root)
    trajectory.append(
        EventRecord(
            event="rolled_back",
            detail=f"restored the state after step {to}{ended}: the workspace, diff, export and apply are that "
            "state's; `harness resume --follow-up TEXT` goes on from there",
        ),
        durable=True,
    )
    trajectory.close()
    write_text_atomic(folder.patch, session.export_patch())
    return True


def open_session(sessions: Path, session_id: str) -> Session:
    """An existing session at its last complete step, without engine operations (show, diff, export)."""
    from sandbox.session.session import Session

    return Session.open(sessions, session_id)


@dataclass
class Removed:
    """What `session rm` removed besides the session's folder, and what it could not."""

    branches: list[str] = field(default_factory=list)
    """Its sub-agents' sessions (their branches of its snapshots), deepest first."""
    containers: int = 0
    """Containers a controller of it, now gone, had left (its pre-started calls, its holders)."""
    warning: str | None = None


def remove_session(session: Session, docker_host: str | None) -> Removed:
    """Delete a session: its folder, the images its steps committed, its sub-agents' sessions (a branch
    is part of its run), and what a controller of it that is gone left on the engine. When no engine
    answers the folders still go; the warning says the images are left for `harness sandbox prune`."""
    from sandbox.errors import EngineUnavailable, SandboxError
    from sandbox.session.session import Session as Sessions

    removed = Removed()
    images = None
    try:
        images = engine.engine_step_images(docker_host)
        removed.containers = engine.prune_crashed(docker_host, session.dir.parent, session.id)
    except EngineUnavailable as error:
        removed.warning = f"images not removed ({error}); `harness sandbox prune` finds them later"
    for branch in branches(session.dir):
        try:
            child = Sessions.open(branch.parent, branch.name, images=images)
        except SandboxError:
            continue
        with child:
            child.delete()
        removed.branches.append(branch.name)
    session.step_images = images
    session.delete()
    return removed


def branches(folder: Path) -> list[Path]:
    """The sub-agents' sessions of the session at folder (and theirs), deepest first: sessions of the
    same state directory whose record names folder as the parent they branched from for a sub-agent."""
    from sandbox import durable
    from sandbox.layout import SessionFolder

    folder = Path(folder).resolve()
    children: dict[Path, list[Path]] = {}
    for candidate in sorted(folder.parent.iterdir()):
        if candidate.name.startswith(".") or not candidate.is_dir() or candidate.is_symlink():
            continue
        try:
            parent = (durable.read_json(SessionFolder(candidate).info) or {}).get("parent") or {}
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(parent, dict) and parent.get("agent") and parent.get("folder"):
            children.setdefault(Path(str(parent["folder"])).resolve(), []).append(candidate)
    found: list[Path] = []

    def below(node: Path) -> None:
        for child in children.get(node, []):
            below(child.resolve())
            found.append(child)

    below(folder)
    return found


def remove_cut_short(sessions: Path, session_id: str) -> bool:
    """Remove the folder of a session whose create a crash cut short (no session.json, its maker
    provably gone); False when there is no such folder. StateError when a live process is still
    making it."""
    from sandbox import durable
    from sandbox.docker.prune import cut_short
    from sandbox.layout import SessionFolder, objects_dir
    from sandbox.snapshot.shared import SharedObjects
    from sandbox.tree import remove_tree

    folder = SessionFolder(Path(sessions) / session_id)
    if "/" in session_id or session_id.startswith(".") or not folder.root.is_dir() or folder.info.exists():
        return False
    if not cut_short(folder):
        try:
            maker = durable.read_json(folder.creating).get("harness.pid", "?")
        except (OSError, ValueError, AttributeError):
            maker = "?"
        raise StateError(f"session {session_id} is being created by process {maker}: it is no leftover yet")
    remove_tree(folder.root, ignore_errors=True)
    SharedObjects(objects_dir(Path(sessions))).remove_ref(folder.root)
    return True


def collect_objects(sessions: Path) -> Collected | None:
    """Collect the state directory's shared object store: what no session references goes (the
    removed sessions' snapshots). None when writers kept it busy (the next prune tries again)."""
    from sandbox.layout import objects_dir
    from sandbox.snapshot.shared import collect
    from sandbox.tree import remove_tree

    for stale in Path(sessions).glob("*/workspace.retired-*"):  # a retire a crash cut short
        remove_tree(stale, ignore_errors=True)
    return collect(objects_dir(sessions))


@dataclass(frozen=True)
class Relative:
    """One session of a family of forks (see `family`)."""

    session_id: str
    folder: Path
    at: int | None
    """The parent's step it parted at (None: the family's root)."""
    outcome: str
    """Its run's outcome, `running or unfinished` while it has none."""
    depth: int


def family(folder: Path) -> list[Relative]:
    """The tree of forks folder belongs to, root first, each child after its parent (depth first):
    every session of its shared store that descends from the same root. Just itself when it has no
    fork and is none."""
    from sandbox import durable
    from sandbox.layout import SessionFolder
    from sandbox.session.session import SessionInfo
    from sandbox.snapshot.shared import SharedObjects

    def read(where: Path) -> SessionInfo | None:
        try:
            return SessionInfo.model_validate(durable.read_json(SessionFolder(where).info))
        except (OSError, ValueError):
            return None

    folder = Path(folder).resolve()
    known = {folder: read(folder)}
    mine = known[folder]
    if mine is not None and mine.objects:
        for other in SharedObjects(Path(mine.objects)).referrers():
            known.setdefault(other.resolve(), read(other))
    infos = {where: info for where, info in known.items() if info is not None}
    parent_of = {where: Path(info.parent.folder) for where, info in infos.items() if info.parent is not None}
    root = folder
    while root in parent_of and parent_of[root] in infos:
        root = parent_of[root]
    children: dict[Path, list[Path]] = {}
    for child, parent in sorted(parent_of.items(), key=lambda item: infos[item[0]].created):
        children.setdefault(parent, []).append(child)
    out: list[Relative] = []
    work = [(root, 0)]
    while work:
        where, depth = work.pop()
        info = infos.get(where)
        at = info.parent.step if info is not None and info.parent is not None else None
        name = info.id if info is not None else where.name
        out.append(Relative(name, where, at, _outcome_of(where), depth))
        work.extend((child, depth + 1) for child in reversed(children.get(where, [])))
    return out


def _outcome_of(folder: Path) -> str:
    from harness.agent.outcome import RunState
    from harness.errors import SessionError
    from harness.trajectory import read_state

    try:
        state = read_state(folder, RunState)
    except SessionError:
        state = None
    if state is None:
        return "no run"
    return state.result.outcome if state.result is not None else "running or unfinished"


def session_config(settings: SessionSettings, **decided: Any) -> SessionConfig:
    """The config of a new session made with settings and what the caller decided (writable_root,
    keep_tmp)."""
    from sandbox.session.session import SessionConfig

    return SessionConfig.of(settings, **decided)


@dataclass(frozen=True)
class ExecStep:
    """What `harness exec --session` did: the command's envelope and the step it became."""

    envelope: Envelope
    session_id: str
    step: int
    image: str
    created_image: str | None
    """The image of step 0 when this command made the session (its setup ran, or came from the cache)."""
    settings_ignored: bool
    """The session existed, so the setup options and the writable root asked for did not apply."""


def exec_step(
    path: Path,
    command: list[str],
    spec: SandboxSpec,
    *,
    session_id: str,
    sessions: Path,
    config: SessionConfig,
    docker_host: str | None,
    run_id: str,
    secrets: Sequence[Secret] = (),
    devcontainer: Devcontainer | None = None,
) -> ExecStep:
    """`harness exec --session ID`: create the session from path (running its setup once, on the image
    its devcontainer describes, built now, when it has one) or continue it; run the command on its
    workspace and image; record the result as the next step (secrets: the values of the settings'
    `--secret` bindings)."""
    from sandbox.layout import session_folder
    from sandbox.session.session import Session
    from sandbox.session.setup import create_session

    client = engine.connect(docker_host)
    images = engine.engine_step_images(docker_host)
    with engine.sandbox_for(client, run_id, session_id, pool_size=0, share_netns=False, owns_client=True) as box:
        exists = session_folder(sessions, session_id).info.exists()
        if exists:
            session = Session.open(sessions, session_id, images=images)
        else:
            if devcontainer is not None:
                built = engine.devcontainer_image(
                    client, path, devcontainer, network=config.setup_network, pull_from=[], log=lambda line: None
                )
                spec = spec.model_copy(update={"image": str(built.built)})
            session = create_session(
                path,
                sessions,
                spec=spec,
                config=config,
                sandbox=box,
                session_id=session_id,
                images=images,
                secrets=secrets,
            )
        created_image = None if exists else session.image
        with session:
            session.connect_network(secrets=secrets)  # an existing session whose calls may reach its hosts
            envelope = box.run(
                command, workspace=session.workspace, spec=session.spec, commit_changes=session.config.writable_root
            )
            record = session.commit_step(f"exec {' '.join(command)}"[:200], committed_image=envelope.committed_image)
    return ExecStep(
        envelope=envelope,
        session_id=session.id,
        step=record.step,
        image=record.image,
        created_image=created_image,
        settings_ignored=exists and bool(config.setup or config.writable_root),
    )


def box_session(
    repo: Path,
    sessions: Path,
    *,
    spec: SandboxSpec,
    config: SessionConfig,
    docker_host: str | None,
    run_id: str,
    session_id: str,
    pool_size: int,
) -> tuple[DockerSandbox, Session]:
    """A session an outside agent loop drives one call at a time (the integrations' box): its
    sandbox (warm containers from the moment the workspace exists) and the session at step 0. The
    image is checked first, so a missing one says how to build it before anything is made."""
    from sandbox.session.setup import create_session

    client = engine.connect(docker_host)
    engine.image_ref(client, spec.image)
    box = engine.sandbox_for(client, run_id, session_id, pool_size=pool_size, owns_client=True)

    def ready(workspace: Path, call_spec: SandboxSpec) -> None:
        box.prewarm(workspace=workspace, spec=call_spec)

    try:
        session = create_session(
            repo,
            sessions,
            spec=spec,
            config=config,
            sandbox=box,
            session_id=session_id,
            images=engine.step_images(box),
            ready=ready,
        )
    except BaseException:
        box.close()
        raise
    return box, session
