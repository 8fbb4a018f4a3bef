"""What changed in this machine's trees since they were last sent to an engine that takes archives.

A copy on the engine (an MCP server's workspace, a pooled call container's volumes filled ahead of
its call) was made from listings of this machine's files taken before they were read: what differs
between that listing and one taken now is what must be sent again, or removed there. Every entry
holds what a change of this machine's file cannot hide: its status-change time and inode beside its
mode, size and modification time (a bring-back that rewrites a file with the same size and sets its
modification time back, as an archive's member says, still changes the other two). Links are never
followed; sockets, pipes and devices never travel and are never listed.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import docker

from sandbox.docker import transfer
from sandbox.docker.transfer import Part
from sandbox.spec import Mount
from sandbox.tree import walk

Entry = tuple[int, int, int, int, int, str]
"""(mode, size, modification ns, status-change ns, inode, link target) of one path; a folder's is its
mode alone (what it holds is listed on its own)."""
Listing = dict[str, Entry]
"""rel -> Entry of every path under a folder."""


def entry(path: str) -> Entry | None:
    """The entry of path (never through a link), or None: gone, or a kind that never travels."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISDIR(st.st_mode):
        return (st.st_mode, 0, 0, 0, 0, "")
    if stat.S_ISLNK(st.st_mode):
        try:
            return (st.st_mode, 0, 0, 0, 0, os.readlink(path))
        except FileNotFoundError:
            return None
    if stat.S_ISREG(st.st_mode):
        return (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, "")
    return None


def listing(folder: Path | str) -> Listing:
    """Every path under folder (relative, never through a link), with what tells a change."""
    found: Listing = {}
    root = os.fspath(folder)
    for directory, dirs, others in walk(root):
        for name in [*dirs, *others]:
            path = os.path.join(directory, name)
            seen = entry(path)
            if seen is not None:
                found[os.path.relpath(path, root)] = seen
    return found


def contents(parts: Sequence[Part]) -> tuple[Listing, dict[str, int]]:
    """Every path one volume holds (`transfer.volumes`), as `transfer.pack` chooses them: each part's
    tree at its place, the workspace's paths under a mount's place left out (the mount's copy stands
    there); and the index of the part each comes from. Climbing links are listed too (their target
    tells a change)."""
    overlays = [part.rel for part in parts if part.rel]
    found: Listing = {}
    source: dict[str, int] = {}
    for index, part in enumerate(parts):
        if part.rel and (seen := entry(str(part.source))) is not None:
            found[part.rel], source[part.rel] = seen, index
        if not part.source.is_dir() or part.source.is_symlink():
            continue
        for part_rel, seen in listing(part.source).items():
            rel = part_rel if not part.rel else f"{part.rel}/{part_rel}"
            if part.owned and any(rel == top or rel.startswith(top + "/") for top in overlays):
                continue
            found[rel], source[rel] = seen, index
    return found, source


def difference(before: Listing, now: Listing) -> tuple[list[str], list[str]]:
    """(removed, changed) from before to now: removed, the paths gone, of another kind now, or links
    to somewhere else (made anew), none under another removed one; changed, every path new or not
    the same, parents first."""
    removed = sorted(
        rel
        for rel, seen in before.items()
        if rel not in now or _kind(now[rel]) != _kind(seen) or (stat.S_ISLNK(seen[0]) and now[rel] != seen)
    )
    removed = [rel for rel in removed if not any(rel.startswith(other + "/") for other in removed)]
    changed = sorted((rel for rel, seen in now.items() if before.get(rel) != seen), key=lambda r: r.count("/"))
    return removed, changed


def _kind(seen: Entry) -> int:
    return stat.S_IFMT(seen[0])


class Stale(Exception):
    """A container filled ahead of its call holds what its call cannot be given by changes alone (a
    read-only copy's path, or a folder holding one, removed here since; a removal that failed there;
    another layout of volumes): a fresh container is used."""


@dataclass(frozen=True)
class Filled:
    """What a container's volumes were filled with ahead of its call."""

    layout: dict[str, list[Part]]
    listed: dict[str, Listing]
    """Each volume's contents as listed before they were read (`contents`)."""


class AheadOfCalls:
    """Call containers of an engine that takes archives, filled while they wait for their call.

    A pooled container is started after the call before it (the model thinks meanwhile): its volumes
    get the workspace and the mounts then (`fill`), and its call sends only what changed here since
    (`send`): new and changed paths in one archive per volume, removed ones removed in the container
    as the call's user. What comes back after the call is the whole working folder, as before (only
    the engine can say what a call changed, and it says so only by sending it)."""

    def __init__(self, api: Any, make_links: Callable[[str, Sequence[tuple[str, str]], str], None]) -> None:
        self.api, self.make_links = api, make_links
        self._lock = threading.Lock()
        self._fills: dict[str, tuple[Path, str, tuple[Mount, ...], str]] = {}
        """By pool key: the workspace, working folder, mounts and user its containers are filled for."""
        self._filled: dict[str, Filled] = {}
        """By container id: what it was filled with."""

    def key(self, key: str, workspace: Path, workdir: str, mounts: Sequence[Mount], user: str) -> str:
        """The pool key of containers filled for these (a container filled with one workspace is never
        handed to a call on another), recorded for `fill`."""
        marks = [str(workspace), workdir, user, *(m.model_dump_json() for m in mounts)]
        own = f"{key}-{hashlib.sha256(chr(0).join(marks).encode()).hexdigest()[:12]}"
        with self._lock:
            self._fills[own] = (Path(workspace), workdir, tuple(mounts), user)
        return own

    def fill(self, key: str, cid: str) -> None:
        """The volumes of a started container of key filled with what they hold now (the pool's fill)."""
        with self._lock:
            fill = self._fills.get(key)
        if fill is None:
            return
        workspace, workdir, mounts, user = fill
        layout = transfer.volumes(workdir, workspace, mounts)
        listed = {target: contents(parts)[0] for target, parts in layout.items()}  # before anything is read
        climbing = transfer.send(self.api, cid, layout, transfer.numeric_ids(user))
        if climbing:
            self.make_links(cid, climbing, user)
        with self._lock:
            self._filled[cid] = Filled(layout, listed)

    def forget(self, cid: str) -> None:
        with self._lock:
            self._filled.pop(cid, None)

    def send(self, cid: str, layout: dict[str, list[Part]], workdir: str, user: str) -> bool:
        """What changed since cid was filled, into it; False when it was not filled (the caller sends
        everything); Stale when what it was filled with cannot be made what the call must see."""
        with self._lock:
            filled = self._filled.pop(cid, None)
        if filled is None:
            return False
        if filled.layout != layout:  # (a mount's source became a file, say): what it holds is not this
            raise Stale("filled for another layout of volumes")
        plans = []
        doomed: list[str] = []
        for target, parts in layout.items():
            now, source = contents(parts)
            removed, changed = difference(filled.listed[target], now)
            overlays = [part.rel for part in parts if part.rel]
            owned = target == workdir and parts[0].owned and not parts[0].rel
            for rel in removed:
                if not owned or any(_related(rel, top) for top in overlays):
                    raise Stale(f"{target}/{rel}")
                doomed.append(f"{target.rstrip('/')}/{rel}")
            if changed:
                plans.append((target, parts, changed, source))
        if doomed:
            try:
                code, said = transfer.run_in(self.api, cid, ["/bin/sh", "-c", REMOVE_SCRIPT, "sh", *doomed], user)
            except docker.errors.APIError as error:
                if error.status_code != 409:  # (404: gone, the caller's to say; 409: it stopped meanwhile)
                    raise
                raise Stale("it stopped before its call") from None
            if code != 0:  # what it holds is not what the call must see: a fresh container gets everything
                raise Stale(f"removing what the workspace no longer holds failed there: {said[-300:]}")
        ids = transfer.numeric_ids(user)
        for target, parts, changed, source in plans:
            with tempfile.SpooledTemporaryFile(max_size=transfer.SPOOL_BYTES) as archive:
                climbing = transfer.pack_some(parts, changed, source, ids, archive)
                transfer.put(self.api, cid, target, archive)
            if climbing:
                self.make_links(cid, [(link, f"{target.rstrip('/')}/{rel}") for link, rel in climbing], user)
        return True


def _related(rel: str, top: str) -> bool:
    """Whether rel is top, under it, or a folder holding it."""
    return rel == top or rel.startswith(top + "/") or top.startswith(rel + "/")


REMOVE_SCRIPT = 'for p do d=$(dirname -- "$p"); chmod u+w -- "$d" 2>/dev/null; chmod -R u+w -- "$p" 2>/dev/null; rm -rf -- "$p" || exit 1; done'
"""Removes each path given as an argument (a read-only copy's folders are root's without write bits:
root without capabilities may write there only once it gives itself the bit back, as their owner)."""
