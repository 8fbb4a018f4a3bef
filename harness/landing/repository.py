"""The original repository as apply sees it: where its objects and refs are (a working copy, a
bare repository or a linked worktree), objects read with dulwich's reader and written loose by our
own writer (temp + fsync + rename, as git lays them out), and refs created without ever moving an
existing one. Nothing it configures is read: no config, hooks, attributes or index."""

from __future__ import annotations

import hashlib
import os
import re
import zlib
from pathlib import Path

from dulwich.file import FileLocked
from dulwich.object_store import DiskObjectStore
from dulwich.objects import Commit, ObjectID, ShaFile, Tree
from dulwich.refs import DiskRefsContainer, Ref

from harness.errors import NotFoundError, UsageError

BRANCH_PREFIX = "refs/heads/"
_REVISION = re.compile(r"(.*?)((?:[~^]\d*)*)")


class Repository:
    """Objects and refs of one repository (commondir: shared by its worktrees)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path).expanduser().resolve()
        self.gitdir = _gitdir(self.path)
        common = self.gitdir / "commondir"
        self.commondir = (self.gitdir / common.read_text().strip()).resolve() if common.is_file() else self.gitdir
        if not (self.commondir / "objects").is_dir():
            raise NotFoundError(f"{self.path} is no git repository (no objects folder)")
        self.store = DiskObjectStore(str(self.commondir / "objects"))
        self.refs = DiskRefsContainer(str(self.commondir), worktree_path=str(self.gitdir))
        head, _ = self.head()
        if head is not None and len(head) != 40:
            self.store.close()
            raise UsageError(
                f"{self.path} names its objects with another hash than SHA-1 ({len(head)} hex digits): harness "
                "apply writes SHA-1 repositories only; export the patch instead (harness export)"
            )

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> Repository:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- reading ----------------------------------------------------------------------------------

    def get(self, sha: str) -> ShaFile:
        return self.store[ObjectID(sha.encode())]

    def has(self, sha: str) -> bool:
        return ObjectID(sha.encode()) in self.store

    def commit(self, sha: str) -> Commit:
        found = self.get(sha)
        if not isinstance(found, Commit):
            raise UsageError(f"{sha[:12]} is not a commit in {self.path}")
        return found

    def tree(self, sha: str) -> Tree:
        found = self.get(sha)
        if not isinstance(found, Tree):
            raise UsageError(f"{sha[:12]} is not a tree in {self.path}")
        return found

    def resolve(self, name: str) -> str:
        """A commit id from HEAD, a branch, a tag, a full ref or a hex id (4 digits or more, unique),
        each optionally followed by parent steps as git writes them (`^`, `^2`, `~3`)."""
        found = _REVISION.fullmatch(name.strip())
        if found is None or not found.group(1):
            raise UsageError(f"{name!r} is not a revision apply understands (a ref or commit id, then ^N or ~N)")
        sha = self._resolve_name(found.group(1))
        for step in re.findall(r"[~^]\d*", found.group(2)):
            count = int(step[1:]) if step[1:] else 1
            if step[0] == "^":
                sha = self._parent(sha, count, name)
            else:
                for _ in range(count):
                    sha = self._parent(sha, 1, name)
        return sha

    def _parent(self, sha: str, which: int, name: str) -> str:
        if which == 0:
            return sha
        parents = self.commit(sha).parents
        if len(parents) < which:
            raise NotFoundError(f"no commit {name!r} in {self.path}: {sha[:12]} has {len(parents)} parent(s)")
        return parents[which - 1].decode()

    def _resolve_name(self, name: str) -> str:
        for ref in (name, f"{BRANCH_PREFIX}{name}", f"refs/tags/{name}", f"refs/remotes/{name}"):
            try:
                sha = self.refs[Ref(ref.encode())]
            except KeyError:
                continue
            found = self.get(sha.decode())
            while not isinstance(found, Commit):  # an annotated tag
                found = self.get(found.object[1].decode())  # type: ignore[attr-defined]
            return found.id.decode()
        if len(name) == 40 and self.has(name.lower()):
            return self.commit(name.lower()).id.decode()
        if 4 <= len(name) < 40 and re.fullmatch(r"[0-9a-fA-F]+", name):
            matches = {oid.decode() for oid in self.store.iter_prefix(name.lower().encode())}
            commits = [oid for oid in matches if isinstance(self.get(oid), Commit)]
            if len(commits) > 1:
                raise UsageError(f"{name!r} names {len(commits)} commits in {self.path}: give more digits")
            if commits:
                return commits[0]
        raise NotFoundError(f"no commit {name!r} in {self.path}")

    def branch(self, name: str) -> str | None:
        """The commit a branch points at, or None."""
        try:
            return self.refs[Ref((BRANCH_PREFIX + name).encode())].decode()
        except KeyError:
            return None

    def head(self) -> tuple[str | None, str | None]:
        """(commit HEAD points at, the branch it names) of this working copy or worktree."""
        try:
            target = self.refs.follow(Ref(b"HEAD"))
        except KeyError:
            return None, None
        names, sha = target
        branch = names[-1].decode() if len(names) > 1 else None
        return (sha.decode() if sha else None), branch

    # --- writing ----------------------------------------------------------------------------------

    def _no_link(self, target: Path, what: str) -> None:
        _no_link_below(self.commondir, target, what)

    def write(self, kind: bytes, data: bytes) -> str:
        """A loose object as git writes it (temp file in its fan-out folder, fsync, rename); its id."""
        raw = b"%s %d\0" % (kind, len(data)) + data
        oid = hashlib.sha1(raw).hexdigest()
        if self.has(oid):
            return oid
        folder = self.commondir / "objects" / oid[:2]
        self._no_link(folder, "objects")
        folder.mkdir(exist_ok=True)
        target = folder / oid[2:]
        temporary = folder / f"tmp_obj_harness_{os.getpid()}_{oid[2:10]}"
        with open(temporary, "wb") as handle:
            handle.write(zlib.compress(raw))
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, 0o444)
        os.replace(temporary, target)
        return oid

    def create_branch(self, name: str, sha: str, *, replace: str | None = None) -> None:
        """refs/heads/name → sha, only if it does not exist (or still points at replace). Never through
        a link the repository made, never over another writer's lock: UsageError, nothing written."""
        ref = Ref((BRANCH_PREFIX + name).encode())
        path = self.commondir / BRANCH_PREFIX / name
        self._no_link(path, "refs")
        if path.with_name(path.name + ".lock").exists():
            raise UsageError(
                f"branch {name} is being written by another program ({BRANCH_PREFIX}{name}.lock exists in "
                f"{self.path}); nothing was written"
            )
        try:
            if replace is None:
                done = self.refs.add_if_new(ref, ObjectID(sha.encode()))
            else:
                done = self.refs.set_if_equals(ref, ObjectID(replace.encode()), ObjectID(sha.encode()))
        except (OSError, FileLocked) as error:
            raise UsageError(f"branch {name} cannot be written in {self.path}: {error}; nothing was written") from None
        if not done:
            raise UsageError(f"branch {name} appeared or moved while it was being written; nothing was changed")


def _no_link_below(root: Path, target: Path, what: str) -> None:
    """UsageError when a folder or file on the way from root to target is a symbolic link (or not a
    folder where one is needed): the repository's own links are never written through."""
    current = root
    for part in target.relative_to(root).parts:
        current = current / part
        if current.is_symlink():
            raise UsageError(
                f"{current} is a symbolic link in the repository's {what}: harness apply never writes through "
                "a link the repository made; nothing was written"
            )
        if current != target and current.exists() and not current.is_dir():
            raise UsageError(f"{current} is in the way of {target.name} (a file, not a folder); nothing was written")


def _gitdir(path: Path) -> Path:
    dot = path / ".git"
    if dot.is_dir():
        return dot
    if dot.is_file():  # a linked worktree: "gitdir: <path>"
        text = dot.read_text(encoding="utf-8", errors="replace").strip()
        if text.startswith("gitdir:"):
            return (path / text.removeprefix("gitdir:").strip()).resolve()
    if (path / "objects").is_dir() and (path / "HEAD").is_file():
        return path  # bare
    raise NotFoundError(f"{path} is no git repository (no .git, and not a bare repository)")
