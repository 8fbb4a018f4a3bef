"""Find and remove what runs and sessions leave behind on the engine and in the state directory.

Every container we create carries `harness.run` and `harness.pid` (the controller's pid). By
default only containers whose controller is gone are removed, so a prune never pulls the rug from a
live run; `everything=True` removes all containers labelled `harness.run`.

Session images carry `harness.session` and `harness.state` (the state directory: session ids are
unique only within one directory, so a prune or an `rm` in one directory never touches another's
images). A session image whose state directory was a temporary folder of this machine that is gone
now is a leftover of every prune, once its maker is provably gone; one whose state directory is gone
from anywhere else is only named (a folder on a drive not mounted now looks gone too). Setup images
(`harness.kind=setup`) and a devcontainer's images are caches shared by sessions: `prune_cache`
removes those no session names and no container uses (`harness images prune`). Folders of creates
that never finished (no session.json) are leftovers too.
"""

from __future__ import annotations

import collections
import contextlib
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import docker
import requests
from docker.models.containers import Container
from docker.models.images import Image
from pydantic import BaseModel, Field

from sandbox import labels
from sandbox.docker.engine import translate
from sandbox.docker.ids import (
    image_summaries,
    labelled,
    listed_containers,
    object_id,
    present_containers,
    present_images,
    remove_container,
    said_removed,
    unqualified,
)
from sandbox.layout import SessionFolder
from sandbox.tree import remove_tree

PRUNE_PASSES, PRUNE_AGAIN_S = 4, 0.5
"""A prune lists and removes at most this many times, this far apart, until a listing finds nothing."""
UNFINISHED_AFTER_S = 3600.0
"""A session folder without session.json this old is a crashed create, not one in progress."""


def find_containers(client: docker.DockerClient, wanted: Mapping[str, str | None]) -> list[Container]:
    """Containers (running or not) carrying every label; a None value matches any value."""
    filters = [k if v is None else f"{k}={v}" for k, v in wanted.items()]
    with translate("listing containers"):
        return present_containers(client, filters={"label": filters})


def remove_containers(client: docker.DockerClient, containers: list[Container]) -> int:
    """Kill and remove each container; those already gone are not counted."""
    removed = 0
    for container in containers:
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError, requests.exceptions.RequestException):
            remove_container(client.api, object_id(container))
            removed += 1
    return removed


def orphaned(container: Container) -> bool:
    """True when the controller process that labelled this container is no longer alive (a zombie
    counts as gone: a killed detached process whose new parent does not reap it stays one)."""
    return orphaned_labels(container.labels)


def orphaned_labels(marks: dict[str, str]) -> bool:
    """orphaned() on an object's labels (a network's, a volume's, an image's): its maker is provably
    gone (sandbox.process: the pid and its identity; another machine's object never is)."""
    from sandbox.process import gone

    marks = marks or {}
    return gone(marks.get(labels.PID, ""), marks.get(labels.OWNER))


def prune(
    client: docker.DockerClient,
    *,
    everything: bool = False,
    run_id: str | None = None,
    extra: Mapping[str, str] | None = None,
) -> int:
    """Remove leftover harness containers: orphaned ones, or with everything=True all of them;
    with run_id only those of that run, with extra labels only those carrying them too."""
    removed = 0
    # Listed again after each pass that found some: a request a dead controller sent just before its
    # end (a create, over TCP through a relay) can still make a container after a listing, and one the
    # engine was already removing is still listed a moment.
    for again in range(PRUNE_PASSES):
        if again:
            time.sleep(PRUNE_AGAIN_S)
        found = find_containers(client, {labels.RUN: run_id, **(extra or {})})
        doomed = found if everything else [c for c in found if orphaned(c)]
        if not doomed:
            break
        # network-namespace holders last: Podman refuses to remove one that containers still join
        doomed.sort(key=lambda c: (c.labels or {}).get(labels.KIND) == "netns")
        removed += remove_containers(client, doomed)
    remove_volumes(client, {labels.RUN: run_id, **(extra or {})}, everything)
    if not extra:
        remove_task_images(client, run_id, everything)
        remove_service_networks(client, run_id, everything)
    return removed


class Swept(BaseModel):
    """What one sweep found of makers provably gone (sandbox.process), and removed."""

    containers: int = 0
    volumes: int = 0
    networks: int = 0

    @property
    def total(self) -> int:
        return self.containers + self.volumes + self.networks


def sweep(client: docker.DockerClient, *, remove: bool = True) -> Swept:
    """One pass over the containers, volumes and networks that name their maker's identity: those
    whose maker is provably gone are removed (or only counted, remove=False). Objects without an
    identity (an older harness's, a test's own) are `harness sandbox prune`'s: a sweep any start makes
    never guesses."""
    wanted = {labels.OWNER: None}
    doomed = [c for c in find_containers(client, wanted) if _provably_gone(c.labels)]
    doomed.sort(key=lambda c: (c.labels or {}).get(labels.KIND) == "netns")  # holders last (Podman)
    swept = Swept(containers=remove_containers(client, doomed) if remove else len(doomed))
    with translate("listing volumes"):
        volumes = [v for v in client.volumes.list(filters={"label": labels.OWNER}) if _provably_gone(_marks(v))]
    with translate("listing networks"):
        networks = [n for n in client.networks.list(filters={"label": labels.OWNER}) if _provably_gone(_marks(n))]
    if not remove:
        return swept.model_copy(update={"volumes": len(volumes), "networks": len(networks)})
    swept.volumes = _removed([v.remove for v in volumes])  # refused while a container uses one
    swept.networks = _removed([n.remove for n in networks])
    return swept


def left_by_run(client: docker.DockerClient, run_id: str) -> Swept:
    """The containers, volumes and networks of run_id still on the engine whose maker is gone: what a
    run (a batch's processes) that ended left behind. A live process's are not counted (a run id can
    be shared: tests give one to many runs)."""
    label = f"{labels.RUN}={run_id}"
    with translate("listing what the run left"):
        return Swept(
            containers=sum(orphaned_labels(c.labels) for c in find_containers(client, {labels.RUN: run_id})),
            volumes=sum(orphaned_labels(_marks(v)) for v in client.volumes.list(filters={"label": label})),
            networks=sum(orphaned_labels(_marks(n)) for n in client.networks.list(filters={"label": label})),
        )


def left_unowned(client: docker.DockerClient) -> int:
    """Containers of a controller that is gone which name no identity (an older harness's): `harness
    sandbox prune` removes them."""
    return sum(1 for c in find_containers(client, {labels.RUN: None}) if labels.OWNER not in c.labels and orphaned(c))


def _marks(found: Any) -> dict[str, str]:
    return dict(found.attrs.get("Labels") or {})


def _provably_gone(marks: Mapping[str, str] | None) -> bool:
    from sandbox.process import gone

    marks = marks or {}
    return labels.OWNER in marks and gone(marks.get(labels.PID, ""), marks[labels.OWNER])


def remove_volumes(client: docker.DockerClient, wanted: Mapping[str, str | None], everything: bool) -> int:
    """Volumes carrying every label wanted (a None value: any) whose process is gone, or all of them
    with everything, that no container uses (an engine that takes archives gives each call's container
    volumes, removed with it: one whose removal failed midway leaves them); how many went. The first
    label is asked of the engine, the rest read here (as `present_images` does)."""
    first, *rest = [k if v is None else f"{k}={v}" for k, v in wanted.items()]
    with translate("listing volumes"):
        volumes = client.volumes.list(filters={"label": first})
    doomed: list[Callable[[], object]] = []
    for volume in volumes:
        marks = volume.attrs.get("Labels") or {}
        if all(labelled(marks, condition) for condition in rest) and (everything or orphaned_labels(marks)):
            doomed.append(volume.remove)  # refused while a container uses it
    return _removed(doomed)


def remove_service_networks(client: docker.DockerClient, run_id: str | None, everything: bool) -> int:
    """Services networks whose session's controller is gone (after their containers went); how many."""
    with translate("listing networks"):
        networks = client.networks.list(filters={"label": _kind_of_run("service", run_id)})
    doomed = [n for n in networks if everything or orphaned_labels(n.attrs.get("Labels") or {})]
    return _removed([n.remove for n in doomed])


def remove_task_images(client: docker.DockerClient, run_id: str | None, everything: bool) -> int:
    """Images built for another framework's task (a Harbor trial) whose builder is gone; how many.
    Never forced (`remove_image`): one a container still uses stays."""
    with translate("listing task images"):
        images = present_images(client, filters={"label": _kind_of_run("task", run_id)})
    return sum(remove_image(client, object_id(i)) for i in images if everything or orphaned_labels(i.labels))


def _kind_of_run(kind: str, run_id: str | None) -> list[str]:
    return [f"{labels.KIND}={kind}", *([f"{labels.RUN}={run_id}"] if run_id else [])]


def _removed(removals: list[Callable[[], object]]) -> int:
    """Run each removal; those the engine refuses or finds gone are not counted."""
    removed = 0
    for remove in removals:
        with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
            remove()
            removed += 1
    return removed


def prune_session(client: docker.DockerClient, session_id: str, state_dir: Path) -> int:
    """Remove what a crashed controller of this session left running (warm containers, its network
    namespace holder); containers of a live controller are never touched."""
    return prune(client, extra=labels.of_session(session_id, str(Path(state_dir).resolve())))


class SessionLeftovers(BaseModel):
    """What a prune would remove."""

    images: list[str] = Field(default_factory=list)
    """Image ids labelled with a session id that no longer exists, or with a temporary state directory
    of this machine that no longer exists."""
    folders: list[Path] = Field(default_factory=list)
    """Session folders whose create never finished."""
    gone_states: dict[str, int] = Field(default_factory=dict)
    """State directories of this machine, not temporary ones, that images name and that are not there
    now (deleted, or on a drive not mounted): how many images each holds. Named, never removed: a
    prune given that state directory removes them."""


def session_images(
    client: docker.DockerClient, session_id: str | None = None, state_dir: Path | None = None
) -> list[Image]:
    """Images labelled harness.session (=session_id when given); with state_dir, only those of that
    directory (images made before the state label existed have none and still match)."""
    label = labels.SESSION if session_id is None else f"{labels.SESSION}={session_id}"
    with translate("listing session images"):
        found: list[Image] = present_images(client, all=True, filters={"label": label})
    if state_dir is None:
        return found
    where = str(Path(state_dir).resolve())
    return [image for image in found if image.labels.get(labels.STATE, where) == where]


def cut_short(folder: SessionFolder) -> bool:
    """A session folder whose create never finished and never will: no session.json, and its maker
    (creating.json) provably gone; a folder from before that record, once it is UNFINISHED_AFTER_S old."""
    from sandbox import durable
    from sandbox.process import gone

    if folder.info.exists():
        return False
    try:
        maker = durable.read_json(folder.creating)
    except FileNotFoundError:
        try:
            return time.time() - folder.root.stat().st_mtime > UNFINISHED_AFTER_S
        except FileNotFoundError:
            return False
    except ValueError:
        return True  # torn by the crash that cut the create short
    if not isinstance(maker, dict):
        return True
    return gone(str(maker.get(labels.PID, "")), maker.get(labels.OWNER))


def find_session_leftovers(client: docker.DockerClient | None, state_dir: Path) -> SessionLeftovers:
    """Images of sessions of state_dir whose folder is gone, and folders of creates that never finished.

    Only images labelled with this state directory count: an image of another directory's session
    (or one without the label) is never called a leftover here."""
    state_dir = Path(state_dir)
    leftovers = SessionLeftovers()
    # a session id never starts with a dot: dot-folders are the state directory's own (shared caches)
    folders = (
        [SessionFolder(p) for p in sorted(state_dir.iterdir()) if p.is_dir() and not p.name.startswith(".")]
        if state_dir.is_dir()
        else []
    )
    for folder in folders:
        if cut_short(folder):
            leftovers.folders.append(folder.root)
    if client is not None:
        live = {folder.root.name for folder in folders if folder.info.exists()}
        where = str(state_dir.resolve())
        found: dict[str, bool] = {}
        for image in session_images(client):
            marks = image.labels or {}
            if _held_by_others(image, None):
                continue
            if marks.get(labels.STATE) == where and marks.get(labels.SESSION) not in live:
                leftovers.images.append(object_id(image))
            elif (state := _stranded(marks, found)) is not None:
                if _temporary(state):
                    leftovers.images.append(object_id(image))
                else:
                    leftovers.gone_states[state] = leftovers.gone_states.get(state, 0) + 1
    return leftovers


def _stranded(marks: Mapping[str, str], found: dict[str, bool]) -> str | None:
    """The state directory of a session image whose state directory is gone (None: it is not): made on
    this machine (its maker's identity names this machine and pid namespace, so the label's path is
    one of this machine's), by a maker provably gone, for a state directory not there now (no session
    of it can resume, and no prune given another state directory names it). Another machine's image
    on a shared engine, or one without an identity, never is. found: each state directory's answer,
    asked once per prune."""
    from sandbox.process import machine

    state, ident = marks.get(labels.STATE), marks.get(labels.OWNER)
    if not state or not ident or not Path(state).is_absolute() or ident.split("@", 2)[-1] != machine():
        return None
    if state not in found:
        found[state] = _absent(state)
    return state if found[state] and orphaned_labels(dict(marks)) else None


def _temporary(state: str) -> bool:
    """The state directory was in one of this machine's temporary folders (a test's, a trial's, a
    scratch batch's): gone from there, it was deleted, not unmounted."""
    import tempfile

    roots = {Path(tempfile.gettempdir()), Path("/tmp"), Path("/var/tmp")}
    return any(Path(state).is_relative_to(root.resolve()) or Path(state).is_relative_to(root) for root in roots)


def _absent(path: str) -> bool:
    """The path provably does not exist (a folder on the way that this user may not search hides it:
    not provably absent)."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return False


def remove_image(client: docker.DockerClient, image_id: str) -> bool:
    """Remove an image with all its tags; False when it is gone or still used by a container. Never
    forced: Podman's force removes every container using the image, or using an untagged parent it
    removes with it (the image derived for the engine, which other sessions' running containers use)."""
    try:
        tags = client.api.inspect_image(image_id).get("RepoTags") or []
    except (docker.errors.APIError, requests.exceptions.RequestException):
        return False
    return _remove_cached(client, image_id, tags) and not _still_there(client, image_id)


def _still_there(client: docker.DockerClient, image_id: str) -> bool:
    try:
        client.api.inspect_image(image_id)
    except docker.errors.APIError as error:
        return not said_removed(error)
    except requests.exceptions.RequestException:
        return True
    return True


def remove_session_images(client: docker.DockerClient, session_id: str, state_dir: Path | None = None) -> int:
    """Remove every image of this session (newest first, so parents go last); an image a fork of it
    also holds (tagged for the fork) only loses this session's tags."""
    with translate("listing session images"):
        tagged: list[Image] = present_images(client, name=f"harness-session/{session_id.lower()}")
    unique = {object_id(image): image for image in [*session_images(client, session_id, state_dir), *tagged]}
    found = sorted(unique.values(), key=lambda i: i.attrs.get("Created", ""), reverse=True)
    removed = 0
    for image in found:
        if _held_by_others(image, session_id):
            for tag in _tags_of(image, session_id):
                with contextlib.suppress(docker.errors.APIError, requests.exceptions.RequestException):
                    client.api.remove_image(tag, noprune=True)
        else:
            removed += remove_image(client, object_id(image))
    return removed


def _tags_of(image: Image, session_id: str | None) -> list[str]:
    """The image's `harness-session/<id>:step-N` tags (of session_id, or of any session), as the engine
    spells them: Podman qualifies a name it was given (`docker.io/harness-session/...`)."""
    prefix = "harness-session/" if session_id is None else f"harness-session/{session_id.lower()}:"
    return [tag for tag in image.tags if unqualified(tag).startswith(prefix)]


def _held_by_others(image: Image, session_id: str | None) -> bool:
    """The image is also a step image of another session than session_id (default: the one its
    labels name), such as a fork's or its parent's."""
    own = _tags_of(image, session_id or image.labels.get(labels.SESSION, ""))
    return len(_tags_of(image, None)) > len(own)


def remove_leftovers(client: docker.DockerClient | None, leftovers: SessionLeftovers) -> list[str]:
    """Remove what find_session_leftovers found; returns what was removed (folders, image ids)."""
    removed: list[str] = []
    for folder in leftovers.folders:
        remove_tree(folder, ignore_errors=True)
        removed.append(str(folder))
    if client is not None:
        # Newest first would need the dates; a parent that still has a child fails now and is
        # found again (childless) by the next prune.
        removed += [image_id for image_id in leftovers.images if remove_image(client, image_id)]
    return removed


CACHE_KINDS = ("devcontainer", "devcontainer-build", "devcontainer-features", "setup")
"""Images harness keeps as caches, by `harness.kind`: a devcontainer's image and its build stages,
a setup's result. A new session that needs one and finds none makes it again; a session that names
one needs that one to resume."""


class CachePrune(BaseModel):
    """What `prune_cache` removed (or would remove) and why it kept the rest."""

    removed: list[str] = Field(default_factory=list)
    """Each removed image, by its first tag or its short id."""
    freed_bytes: int = 0
    """What the engine's image layers shrank by (none for a dry run: layers shared with kept images stay)."""
    named: list[str] = Field(default_factory=list)
    """Kept: a session of the state directories names it (its image, its setup's image)."""
    in_use: list[str] = Field(default_factory=list)
    """Kept: a container uses it, or another image stands on it (the engine refused)."""


def names_in_sessions(state_dirs: list[Path]) -> set[str]:
    """Every string of every session's records (session.json, run.json) in these state directories:
    whatever image a session names (by reference or id, wherever its records keep it) is among them.
    A record that cannot be read raises UnreadableRecord: what it names is unknown, so nothing may go."""
    import json

    names: set[str] = set()

    def collect(value: object) -> None:
        if isinstance(value, str):
            names.add(value)
        elif isinstance(value, dict):
            for item in value.values():
                collect(item)
        elif isinstance(value, list):
            for item in value:
                collect(item)

    for state_dir in state_dirs:
        if not Path(state_dir).is_dir():
            continue
        for folder in sorted(Path(state_dir).iterdir()):
            if folder.name.startswith(".") or not folder.is_dir() or folder.is_symlink():
                continue
            for record in (folder / "session.json", folder / "run.json"):
                if record.is_file():
                    try:
                        collect(json.loads(record.read_bytes()))
                    except (OSError, ValueError) as error:
                        raise UnreadableRecord(record, error) from None
    return names


class UnreadableRecord(Exception):
    """A session's record that cannot be read: which images it names is unknown."""

    def __init__(self, path: Path, error: BaseException) -> None:
        super().__init__(f"{path}: {error}")
        self.path = path


def prune_cache(
    client: docker.DockerClient,
    named: set[str],
    *,
    run_id: str | None = None,
    created_since: float | None = None,
    dry_run: bool = False,
) -> CachePrune:
    """Remove the cache images (CACHE_KINDS) no name in `named` refers to (by a tag, the id or its
    short form) and no container uses, each tag untagged and the image removed without force: the
    engine refuses one a container or a child image still stands on, and that one is kept. With
    run_id, only those that run made (`harness.run`); with created_since, only those made at or
    after that time (a test suite's own)."""
    with translate("listing cached images"):
        summaries = image_summaries(client, all=True)
        used = {c.get("ImageID", "") for c in listed_containers(client.api, {})}
    children = collections.Counter(s.get("ParentId") or "" for s in summaries)
    result = CachePrune()
    waiting = []
    for summary in summaries:
        marks = summary.get("Labels") or {}
        if marks.get(labels.KIND) not in CACHE_KINDS or (run_id is not None and marks.get(labels.RUN) != run_id):
            continue
        if created_since is not None and summary.get("Created", 0) < int(created_since):
            continue
        image_id = summary["Id"]
        tags = [t for t in summary.get("RepoTags") or [] if t != "<none>:<none>"]
        short = image_id.removeprefix("sha256:")
        shown = unqualified(tags[0]) if tags else short[:12]  # as the user named it, not as Podman qualified it
        if {image_id, short, short[:12], *tags, *map(unqualified, tags)} & named:  # Podman's tags name a registry
            result.named.append(shown)
        elif image_id in used:
            result.in_use.append(shown)
        else:
            waiting.append((summary, tags, shown))
    layers = _layers_size(client) if waiting and not dry_run else None  # `docker system df` only when it may change
    while True:  # an image with children waits for them: removed on a later pass once they are gone
        free = [entry for entry in waiting if not children[entry[0]["Id"]]]
        if not free:
            break
        for summary, tags, shown in free:
            waiting.remove((summary, tags, shown))
            if dry_run or _remove_cached(client, summary["Id"], tags):
                result.removed.append(shown)
                children[summary.get("ParentId") or ""] -= 1
            else:
                result.in_use.append(shown)
    result.in_use += [shown for _, _, shown in waiting]  # another image (a session's step, one named) stands on it
    if layers is not None and result.removed:
        after = _layers_size(client)
        result.freed_bytes = max(0, layers - after) if after is not None else 0
    return result


def _layers_size(client: docker.DockerClient) -> int | None:
    """The bytes of the engine's image layers (`docker system df`), or None when it does not say."""
    try:
        return int(client.api.df().get("LayersSize") or 0)
    except (docker.errors.APIError, requests.exceptions.RequestException, ValueError, TypeError):
        return None


def _remove_cached(client: docker.DockerClient, image_id: str, tags: list[str]) -> bool:
    """Untag each tag, then remove the image (never forced); False when the engine keeps it."""
    try:
        for tag in tags[1:]:  # all but one: the last removal, by id, is the one the engine may refuse
            client.api.remove_image(tag, noprune=False)
        client.api.remove_image(image_id, noprune=False)
        return True
    except docker.errors.NotFound:
        return True  # gone meanwhile: removed as far as anyone can tell
    except (docker.errors.APIError, requests.exceptions.RequestException):
        return False
