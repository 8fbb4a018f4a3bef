"""The workspace of a long-lived container (an MCP server, a service) on an engine that cannot take
this machine's folders (`sandbox.docker.transfer`): a copy in the container's own volume, sent when it
starts and kept the same as this machine's workspace after.

A server lives for the session and is used many times: before each use only what changed since the
last is sent (new and changed paths in one archive, removed ones removed in the container), found by
comparing listings (`sandbox.docker.delta`: type, mode, size, times, inode and link target of every
path, never following a link; a call's pooled container is filled the same way while it waits for
its call); a writable server's workspace comes back
after each use (the same `transfer.sync` a call's does), so this machine's copy holds what it wrote
as a bind mount would. A read-only copy is root's with its write bits dropped, as a read-only mount's
is for a call; its symbolic links that climb out of the folder are left out (the engine refuses to
unpack them, and the server could not make them there).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from sandbox.docker import transfer
from sandbox.docker.delta import REMOVE_SCRIPT, Listing, difference, listing
from sandbox.docker.engine import translate
from sandbox.errors import SandboxError


class WorkspaceCopy:
    """The workspace in one long-lived container on an engine elsewhere: `send_all` before its start,
    `around()` each use (what changed sent before; a writable copy brought back after)."""

    def __init__(self, api: Any, cid: str, workspace: Path, workdir: str, user: str, *, writable: bool) -> None:
        self.api, self.cid, self.workspace, self.workdir = api, cid, Path(workspace), workdir
        self.user, self.writable = user, writable
        self.ids = transfer.numeric_ids(user)
        self.sent: Listing = {}
        self.climbing: list[tuple[str, str]] = []

    @property
    def _exec_user(self) -> str:
        """Who changes the copy in the container: its owner (the server's user, or root for a read-only one)."""
        return self.user if self.writable else "0:0"

    def send_all(self, layout: dict[str, list[transfer.Part]]) -> None:
        """Each volume's content (`transfer.volumes`: the workspace's at the working folder) into the
        created container."""
        self.sent = listing(self.workspace)
        self.climbing = transfer.send(self.api, self.cid, layout, self.ids)

    def make_links(self, links: Sequence[tuple[str, str]] | None = None) -> None:
        """The links an archive could not carry (a writable copy's that climb out: send_all's unless
        given), once the container runs."""
        links = self.climbing if links is None else links
        if self.writable and links:
            self._run(transfer.link_script(links), "making the workspace's symbolic links")

    @contextlib.contextmanager
    def around(self) -> Iterator[None]:
        """One use of the container: the workspace's changes sent first; a writable copy's brought back after."""
        with translate("sending the workspace's changes to the engine"):
            self.send_changes()
        try:
            yield
        except BaseException:
            if self.writable:  # what it wrote before the call failed; a container gone with it says nothing
                with contextlib.suppress(SandboxError), translate("bringing the workspace back from the engine"):
                    self.bring_back()
            raise
        if self.writable:
            with translate("bringing the workspace back from the engine"):
                self.bring_back()

    def send_changes(self) -> None:
        """What changed here since the copy was last the same: sent, or removed there."""
        now = listing(self.workspace)
        removed, changed = difference(self.sent, now)
        if removed:
            paths = [f"{self.workdir.rstrip('/')}/{rel}" for rel in removed]
            self._run(["/bin/sh", "-c", REMOVE_SCRIPT, "sh", *paths], "removing what the workspace no longer holds")
        links: list[tuple[str, str]] = []
        if changed:
            with tempfile.SpooledTemporaryFile(max_size=transfer.SPOOL_BYTES) as archive:
                part = transfer.Part("", self.workspace, self.writable)
                left = transfer.pack_some([part], changed, dict.fromkeys(changed, 0), self.ids, archive)
                links = [(target, f"{self.workdir.rstrip('/')}/{rel}") for target, rel in left]
                transfer.put(self.api, self.cid, self.workdir, archive)
        self.make_links(links)
        self.sent = now

    def bring_back(self) -> None:
        """This machine's workspace made the same as the container's working folder."""
        chunks, _ = self.api.get_archive(self.cid, self.workdir)
        owner = self.ids if os.geteuid() == 0 else None
        transfer.sync(chunks, self.workspace, owner)
        self.sent = listing(self.workspace)

    def _run(self, argv: list[str], what: str) -> None:
        code, said = transfer.run_in(self.api, self.cid, argv, self._exec_user)
        if code != 0:
            raise SandboxError(f"{what} in the container on the engine failed: {said[-300:] or 'it said nothing'}")
