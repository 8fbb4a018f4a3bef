"""An engine on another machine: what a local engine sees through bind mounts travels as archives.

A local engine's call container binds this machine's workspace, the call stub and the mounts. An
engine on another machine (or any engine with `HARNESS_ENGINE_REMOTE=1`) would bind its own
machine's paths, which hold nothing of ours, so there nothing is bound:
- each call container gets an anonymous volume where a bind would be (`volumes`): its working
  folder, the stub's folder, and each mount's target (a mounted file: its folder, which must lie
  under /opt, harness's own, so no image folder is hidden);
- the stub is put into its volume between the container's create and its start (`put_stub`); the
  workspace and every mount at the call (`pack`), so the call sees them as they are then;
- after the call the working folder comes back (get_archive) and this machine's workspace is made
  the same (`sync`): the snapshot store then reads it as it reads a bind-mounted one;
- a volume takes its owner from the image's folder, and the working folder must be the call user's:
  each image gets a derived image, one layer holding the empty working folder owned by that user,
  made once and found again by its label (`derived_image`).

A mount's copy is root's with its write bits dropped: a call reads it and cannot change it (it may
rename one inside a folder it owns; the check after each step sees that as it sees any change to a
protected path). What comes back is hostile: member names are checked, nothing is written through a
link, only folders, regular files, symbolic links and hard links inside the workspace are made, and
modes lose their special bits.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import io
import os
import stat
import tarfile
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import docker

from sandbox import labels as labels_of
from sandbox.docker.call import exec_output, exit_code_of
from sandbox.docker.hardening import FUSE_DEVICE
from sandbox.docker.ids import image_id as spelled_id
from sandbox.docker.ids import listed_images
from sandbox.docker.stubcall import NODEV_TARGET, STUB_DIR, nodev_source, stub_source
from sandbox.errors import SandboxError, SpecError, WorkspaceError
from sandbox.spec import Mount, SandboxSpec
from sandbox.tree import remove_tree, walk

DERIVED_KEY = "harness.remote.of"
"""On a derived image: the digest of the image, working folder and user it was made for, and its form."""
DERIVED_FORM = "2"
"""How a derived image is made (2: it keeps its image's command; the first took its helper's `true`):
one made another way is never found again."""
READY = "harness.remote.ready"
"""On a derived image, and on every image committed from its containers (a step image): the working
folder and user it holds that folder for (`/workspace 10001:10001`)."""
SPOOL_BYTES = 8 * 1024 * 1024
"""An archive up to this size is kept in memory; a larger one goes to a temporary file."""
_CHUNK = 1024 * 1024
PUT_TRIES = 3
"""An archive upload the engine lost midway for its own reasons is asked again, this many times in all:
rootless Podman unpacks in a subprocess of its own, which under load can end before it has read the
archive (its 500 says "passing bulk input to subprocess: write |1: broken pipe")."""


@dataclass(frozen=True)
class Part:
    """What one volume holds at rel ('' for the volume itself): the tree or file at source."""

    rel: str
    source: Path
    owned: bool
    """The call user's (the workspace, modes kept) or a read-only copy (root's, no write bits)."""


def volumes(workdir: str, workspace: Path, mounts: Sequence[Mount]) -> dict[str, list[Part]]:
    """Each volume's target and what it holds: the working folder (the workspace), then each mount
    in the volume that contains it, or in one of its own; SpecError for a mounted file whose folder
    could hide the image's own files."""
    found: dict[str, list[Part]] = {workdir: [Part("", Path(workspace), True)]}
    for mount in sorted(mounts, key=lambda m: m.target.rstrip("/").count("/")):
        target = "/" + mount.target.strip("/")
        is_dir = Path(mount.source).is_dir()
        folder = target if is_dir else os.path.dirname(target)
        root = _containing(found, folder)
        if root is None:
            if not is_dir and not folder.startswith("/opt/"):
                raise SpecError(
                    f"on an engine on another machine a mounted file travels in a volume over its folder, and "
                    f"{folder} may hold the image's own files: mount {mount.source} as a folder, or under /opt"
                )
            root = folder
            found[root] = []
        found[root].append(Part(os.path.relpath(target, root) if target != root else "", Path(mount.source), False))
    return found


def _containing(found: dict[str, list[Part]], folder: str) -> str | None:
    for root in sorted(found, key=len, reverse=True):
        if folder == root or folder.startswith(root.rstrip("/") + "/"):
            return root
    return None


def unbound(
    config: dict[str, Any],
    spec: SandboxSpec,
    workspace: Path,
    mounts: Sequence[Mount],
    also: Iterable[str] = (),
) -> tuple[dict[str, Any], dict[str, list[Part]]]:
    """config with anonymous volumes where its binds were (and at also), and what goes into each
    (mounts, and what the runtime needs: `runtime_mounts`). Under gVisor the FUSE device it adds is
    hidden by the engine's own null device, bound read-only over it (every Linux host has one: nothing
    of this machine's). Egress is the caller's to carry through the engine (`sandbox.docker.tunnel`)."""
    layout = volumes(spec.workdir, workspace, [*mounts, *(m for m in runtime_mounts(spec) if m not in mounts)])
    targets = {*layout, *also}
    binds = {ENGINE_NULL: {"bind": FUSE_DEVICE, "mode": "ro"}} if spec.runtime == "runsc" else {}
    host = {**config["host_config"], "binds": binds, "mounts": volume_mounts(targets, config["labels"])}
    return {**config, "host_config": host}, layout


ENGINE_NULL = "/dev/null"
"""The engine host's null device: what hides gVisor's FUSE device there (an empty file of this
machine's does here)."""


def runtime_mounts(spec: SandboxSpec) -> list[Mount]:
    """What a call's container gets from this machine for its runtime: under gVisor the program an
    exec'd command starts through (it makes device nodes impossible: `sandbox.docker.nodev`)."""
    return [Mount(source=nodev_source(), target=NODEV_TARGET)] if spec.runtime == "runsc" else []


def volume_mounts(targets: Iterable[str], labels: dict[str, str]) -> list[dict[str, Any]]:
    """Anonymous volumes at targets (removed with their container), labelled for prune."""
    return [docker.types.Mount(target, None, type="volume", labels=dict(labels)) for target in sorted(targets)]


# -- to the container -----------------------------------------------------------------------------------


def pack(parts: Sequence[Part], user: tuple[int, int], out: IO[bytes]) -> list[tuple[str, str]]:
    """One volume's content as a tar into out (rewound), never following a link of this machine's;
    sockets, pipes and devices are left out. The engine refuses a relative symbolic link that climbs
    out of the folder it unpacks into (`up -> ..`): those of the workspace are left out of the tar
    and returned, (target, path in the volume), for the caller to make in the container (those of a
    read-only copy are left out)."""
    overlays = [part.rel for part in parts if part.rel]
    climbing: list[tuple[str, str]] = []
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT, dereference=False) as tar:
        made: set[str] = set()
        for part in parts:
            _folders_to(tar, part.rel, made)
            if part.rel:
                add_member(tar, str(part.source), part.rel, part.owned, user)
                made.add(part.rel)
            if part.source.is_dir() and not part.source.is_symlink():
                for folder, dirs, others in walk(part.source):
                    for name in [*dirs, *others]:
                        path = os.path.join(folder, name)
                        rel = _joined(part.rel, os.path.relpath(path, part.source))
                        if part.owned and _under_any(rel, overlays):
                            if name in dirs and rel in overlays:
                                dirs.remove(name)  # the overlay's own copy takes its place
                            continue
                        target = climbing_target(path, rel)
                        if target is not None:
                            if part.owned:
                                climbing.append((target, rel))
                            continue
                        add_member(tar, path, rel, part.owned, user)
                        made.add(rel)
    out.seek(0)
    return climbing


def pack_some(
    parts: Sequence[Part], rels: Sequence[str], source: dict[str, int], user: tuple[int, int], out: IO[bytes]
) -> list[tuple[str, str]]:
    """rels of one volume (parents first; each from the part `source` names: `delta.contents`) as a tar
    into out (rewound), a folder as itself and not its content, chosen and written as `pack` does; a
    path gone meanwhile is left out. Returns the workspace's climbing links, as `pack` does."""
    climbing: list[tuple[str, str]] = []
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT, dereference=False) as tar:
        for rel in rels:
            part = parts[source[rel]]
            path = str(part.source) if rel == part.rel else os.path.join(part.source, rel[len(part.rel) :].lstrip("/"))
            target = climbing_target(path, rel)
            if target is not None:
                if part.owned:
                    climbing.append((target, rel))
                continue
            with contextlib.suppress(FileNotFoundError):
                add_member(tar, path, rel, part.owned, user)
    out.seek(0)
    return climbing


def climbing_target(path: str, rel: str) -> str | None:
    """The target of a symbolic link at path whose relative target leaves the volume, else None."""
    if not os.path.islink(path):
        return None
    target = os.readlink(path)
    if os.path.isabs(target):
        return None
    resolved = os.path.normpath(os.path.join(os.path.dirname(rel), target))
    return target if resolved == ".." or resolved.startswith("../") else None


LINK_SCRIPT = 'while [ "$#" -gt 0 ]; do ln -s -- "$1" "$2" || exit 1; shift 2; done'
"""Makes each (target, path) pair given as arguments a symbolic link, as the call's user."""


def _joined(base: str, rel: str) -> str:
    return rel if not base else f"{base}/{rel}"


def _under_any(rel: str, overlays: Sequence[str]) -> bool:
    return any(rel == top or rel.startswith(top + "/") for top in overlays)


def _folders_to(tar: tarfile.TarFile, rel: str, made: set[str]) -> None:
    """Root-owned folders leading to rel inside a volume (those its own tree does not hold)."""
    parts = rel.split("/")[:-1] if rel else []
    for depth in range(1, len(parts) + 1):
        folder = "/".join(parts[:depth])
        if folder not in made:
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
            made.add(folder)


def add_member(tar: tarfile.TarFile, path: str, rel: str, owned: bool, user: tuple[int, int]) -> None:
    info = tar.gettarinfo(path, arcname=rel)
    if info is None or not (info.isreg() or info.isdir() or info.issym() or info.islnk()):
        return
    info.uid, info.gid = user if owned else (0, 0)
    info.uname = info.gname = ""
    info.mode = info.mode & 0o777 if owned else info.mode & 0o555
    if not info.isreg():
        tar.addfile(info)
        return
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(descriptor, "rb") as handle:
        tar.addfile(info, handle)


def send(
    api: docker.APIClient, cid: str, layout: dict[str, list[Part]], user: tuple[int, int]
) -> list[tuple[str, str]]:
    """Each volume's content into a container (created or running); the symbolic links the engine
    would not unpack (see pack), as (target, absolute path in the container)."""
    climbing: list[tuple[str, str]] = []
    for target, parts in layout.items():
        with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as archive:
            left = pack(parts, user, archive)
            put(api, cid, target, archive)
        climbing += [(link, f"{target.rstrip('/')}/{rel}") for link, rel in left]
    return climbing


def put(api: docker.APIClient, cid: str, target: str, archive: bytes | IO[bytes]) -> None:
    """api.put_archive, asked again when the engine lost the upload midway (see PUT_TRIES)."""
    for attempt in range(1, PUT_TRIES + 1):
        if not isinstance(archive, bytes):
            archive.seek(0)
        try:
            api.put_archive(cid, target, archive)
            return
        except docker.errors.APIError as error:
            lost = error.status_code == 500 and "broken pipe" in str(error.explanation or "").lower()
            if not lost or attempt == PUT_TRIES:
                raise
            time.sleep(0.2 * attempt)


def numeric_ids(user: str) -> tuple[int, int]:
    """uid and gid of a numeric user (what owns the files an engine elsewhere is sent)."""
    uid, _, gid = user.partition(":")
    if not (uid.isdigit() and (gid or uid).isdigit()):
        raise SpecError(f"on an engine on another machine the user must be numeric (uid:gid), not {user!r}")
    return int(uid), int(gid or uid)


def run_in(api: docker.APIClient, cid: str, argv: Sequence[str], user: str) -> tuple[int | None, str]:
    """argv run to its end in a running container as user: its exit code and what it said."""
    made = api.exec_create(cid, list(argv), user=user, stdout=True, stderr=True)["Id"]
    said = exec_output(api, made).decode(errors="replace").strip()
    return exit_code_of(api, made), said


def link_script(links: Sequence[tuple[str, str]]) -> list[str]:
    """The argv that makes each (target, path) a symbolic link."""
    return ["/bin/sh", "-c", LINK_SCRIPT, "sh", *(item for pair in links for item in pair)]


def put_stub(api: docker.APIClient, cid: str) -> None:
    """The call stub into its volume of a created container (before its start)."""
    data = stub_source().read_bytes()
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo(os.path.basename(stub_source()))
        info.size, info.mode = len(data), 0o444
        tar.addfile(info, io.BytesIO(data))
    put(api, cid, STUB_DIR, buffer.getvalue())


# -- back from the container --------------------------------------------------------------------------


class _Stream(io.RawIOBase):
    """The engine's answer (an iterator of byte chunks) as a file tarfile can read."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks, self._left = chunks, b""
        self.total = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._left:
            try:
                self._left = next(self._chunks)
            except StopIteration:
                return 0
        size = min(len(buffer), len(self._left))
        buffer[:size], self._left = self._left[:size], self._left[size:]
        self.total += size
        return size


class Malformed(SandboxError):
    """The engine's archive of a working folder holds what no folder's archive holds."""


class Empty(Malformed):
    """The engine answered with no archive at all (Podman, asked while a container stops)."""


def sync(chunks: Iterator[bytes], workspace: Path, user: tuple[int, int] | None, keep: Sequence[str] = ()) -> int:
    """Make workspace the same as the tar in chunks (the engine's archive of the working folder: one
    top folder holding the rest); user: who owns what is written (None: this process); keep: the
    paths a read-only mount covered, left as they are here while the archive still holds them (a
    bind mount never writes through to the folder under it). The number of paths written or removed."""
    root = os.path.realpath(workspace)
    seen: set[str] = set()
    changed = 0
    stream = _Stream(chunks)
    try:
        with tarfile.open(fileobj=io.BufferedReader(stream, _CHUNK), mode="r|") as tar:
            top: str | None = None
            for member in tar:
                if top is None:
                    top = _top(member)
                    continue
                rel = _relative(member.name, top)
                if _under_any(rel, keep):
                    seen.add(rel)
                    continue
                path = _place(root, rel)
                if _write(tar, member, path, rel, (root, top), seen, user):
                    changed += 1
                seen.add(rel)
        changed += _remove_unseen(root, seen, keep)
    except (tarfile.TarError, EOFError) as error:
        if not stream.total:
            raise Empty("the engine sent no archive of the working folder") from None
        raise Malformed(f"the engine's archive of the working folder is unreadable ({error})") from None
    except OSError as error:
        if error.errno in (errno.ENOSPC, errno.EDQUOT):
            raise WorkspaceError(
                f"the call's workspace does not fit in {workspace} on this machine ({error.strerror}); "
                "free space there, or raise --workspace-quota"
            ) from None
        raise WorkspaceError(f"could not bring the call's workspace back to {workspace}: {error}") from None
    return changed


def _top(member: tarfile.TarInfo) -> str:
    """The top folder's name, the prefix of everything after it: the folder's own name (Docker, and
    Podman for a running container), or none (Podman for a stopped one: `/d/a.txt` follows `''`)."""
    top = member.name.rstrip("/")
    if not member.isdir() or "/" in top or top in (".", ".."):
        raise Malformed(f"the archive starts with {member.name!r}, not a folder")
    return top


def _relative(name: str, top: str) -> str:
    if not name.startswith(top + "/"):
        raise Malformed(f"{name!r} lies outside the working folder's archive")
    rel = name[len(top) + 1 :].rstrip("/")
    if not rel or any(part in ("", ".", "..") for part in rel.split("/")):
        raise Malformed(f"{name!r} is not a plain path")
    return rel


def _place(root: str, rel: str) -> str:
    """Where rel goes: every folder on the way must be a real folder of the workspace (a link the
    container made is never followed)."""
    parent = os.path.join(root, *rel.split("/")[:-1])
    if os.path.realpath(parent) != parent or not os.path.isdir(parent):
        raise Malformed(f"{rel!r} lies under something that is not a folder")
    return os.path.join(root, rel)


def _write(
    tar: tarfile.TarFile,
    member: tarfile.TarInfo,
    path: str,
    rel: str,
    where: tuple[str, str],
    seen: set[str],
    user: tuple[int, int] | None,
) -> bool:
    """Make path what member says; False when it already was. where: the workspace's real path
    and the archive's top folder."""
    root, top = where
    mode = member.mode & 0o777
    try:
        now = os.lstat(path)
    except FileNotFoundError:
        now = None
    if member.isdir():
        if now is not None and stat.S_ISDIR(now.st_mode):
            if stat.S_IMODE(now.st_mode) == mode:
                return False
            os.chmod(path, mode)
            return True
        _clear(path, now)
        os.mkdir(path, 0o700)
        os.chmod(path, mode)
    elif member.issym():
        if now is not None and stat.S_ISLNK(now.st_mode) and os.readlink(path) == member.linkname:
            return False
        _clear(path, now)
        os.symlink(member.linkname, path)
    elif member.islnk():
        source = _relative(member.linkname, top)
        if source not in seen or not os.path.isfile(os.path.join(root, source)):
            raise Malformed(f"{rel!r} is a hard link to {member.linkname!r}, which is no file of the archive")
        target = os.path.join(root, source)
        if now is not None and os.path.samestat(now, os.lstat(target)):
            return False
        _clear(path, now)
        os.link(target, path, follow_symlinks=False)
        return True
    elif member.isreg():
        data = tar.extractfile(member)
        assert data is not None
        with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as spool:
            if now is not None and stat.S_ISREG(now.st_mode) and now.st_size == member.size:
                if _same_bytes(path, data, spool):
                    if stat.S_IMODE(now.st_mode) == mode:
                        return False
                    os.chmod(path, mode)
                    return True
                spool.seek(0)
                data = spool
            _clear(path, now)
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(descriptor, "wb") as handle:
                while block := data.read(_CHUNK):
                    handle.write(block)
        os.chmod(path, mode)
        os.utime(path, (member.mtime, member.mtime))
    else:  # a pipe, a device: never made here (a bind-mounted workspace would hold it; nothing needs it)
        return False
    if user is not None:
        os.lchown(path, *user)
    return True


def _same_bytes(path: str, data: IO[bytes], spool: IO[bytes]) -> bool:
    """Whether the file at path holds what data holds; data is read to its end, into spool."""
    same = True
    descriptor = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(descriptor, "rb") as handle:
        while block := data.read(_CHUNK):
            spool.write(block)
            if same and handle.read(len(block)) != block:
                same = False
    return same


def _clear(path: str, now: os.stat_result | None) -> None:
    if now is None:
        return
    if stat.S_ISDIR(now.st_mode):
        remove_tree(path)
    else:
        os.unlink(path)


def _remove_unseen(root: str, seen: set[str], keep: Sequence[str]) -> int:
    removed = 0
    for folder, dirs, others in walk(root):
        for name in list(dirs) + others:
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root)
            if rel in seen:
                if rel in keep and name in dirs:
                    dirs.remove(name)  # what the mount covered stays as it is here
                continue
            if name in dirs:
                dirs.remove(name)
                remove_tree(path)
            else:
                os.unlink(path)
            removed += 1
    return removed


# -- the derived image --------------------------------------------------------------------------------


def derived_image(api: docker.APIClient, image_id: str, workdir: str, user: str, labels: dict[str, str]) -> str:
    """The image whose working folder (empty) belongs to user: image_id itself when it is one (a step
    image), else one made from it once and found again by label; SpecError when the image has files
    there (a call would see them beside the workspace's). labels: its helper container's (the image
    committed from it carries them too)."""
    ready = f"{workdir} {user}"
    config = api.inspect_image(image_id).get("Config") or {}
    if (config.get("Labels") or {}).get(READY) == ready:
        return image_id  # a step image: committed from a container of a derived image
    key = hashlib.sha256(f"{image_id}\0{workdir}\0{user}\0{DERIVED_FORM}".encode()).hexdigest()[:24]
    for image in listed_images(api, filters={"label": f"{DERIVED_KEY}={key}"}):  # races removals on Podman
        if (image.get("Labels") or {}).get(labels_of.KIND) == "remote-image":  # never a step image
            return spelled_id(str(image["Id"]))
    uid, gid = numeric_ids(user)
    # Never started; committed, it gives the image its command: the image's own (a service's, a
    # database's), or `true` for an image that has none (the engine wants one to create a container).
    command = None if config.get("Cmd") or config.get("Entrypoint") else ["true"]
    cid = api.create_container(
        image_id, command=command, labels=dict(labels), host_config=api.create_host_config(network_mode="none")
    )["Id"]
    try:
        with contextlib.suppress(docker.errors.NotFound):
            chunks, _ = api.get_archive(cid, workdir)
            names = _names(chunks)
            if len(names) > 1:
                raise SpecError(
                    f"image {image_id[:19]} has files in {workdir} ({names[1]}, ...), which a call on an engine on "
                    "another machine would see beside the workspace's: use an image whose working folder is empty"
                )
        folders = workdir.strip("/").split("/")
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for depth in range(1, len(folders) + 1):
                info = tarfile.TarInfo("/".join(folders[:depth]))
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                if depth == len(folders):
                    info.uid, info.gid = uid, gid
                tar.addfile(info)
        put(api, cid, "/", buffer.getvalue())
        made = api.commit(cid, changes=labels_of.instructions({DERIVED_KEY: key, READY: ready}))
        return spelled_id(str(made["Id"]))
    finally:
        with contextlib.suppress(docker.errors.APIError):
            api.remove_container(cid, force=True, v=True)


def _names(chunks: Iterator[bytes]) -> list[str]:
    with tarfile.open(fileobj=io.BufferedReader(_Stream(chunks), _CHUNK), mode="r|") as tar:
        return [member.name for member in tar][:2]
