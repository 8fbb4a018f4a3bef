"""A repository's history read as data, with dulwich's object reader: never the `git` binary and
nothing the repository configures (hooks, fsmonitor, filters, textconv, aliases are not even read).

A repository is a working copy (`.git/` inside), a bare repository, or a git bundle file. Objects are
read from the object store and refs from the refs files; no checkout, no index, no config.
"""

from __future__ import annotations

import atexit
import io
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from dulwich.bundle import read_bundle
from dulwich.diff_tree import tree_changes
from dulwich.object_store import BaseObjectStore, DiskObjectStore, iter_tree_contents
from dulwich.objects import Blob, Commit, ObjectID, ShaFile, TreeEntry
from dulwich.patch import write_object_diff
from dulwich.refs import DiskRefsContainer, Ref

from harness.errors import NotFoundError, UsageError

GITLINK = 0o160000
SYMLINK = 0o120000


@dataclass(frozen=True)
class Entry:
    mode: int
    sha: bytes


@dataclass(frozen=True)
class Change:
    """One path that differs between a commit and its parent (None: absent on that side)."""

    path: str
    old: Entry | None
    new: Entry | None


class History:
    """The objects and refs of one repository."""

    def __init__(
        self, store: BaseObjectStore, refs: dict[bytes, bytes], source: Path, scratch: str | None = None
    ) -> None:
        self.store, self.refs, self.source = store, refs, source
        self._scratch = scratch

    def close(self) -> None:
        """Close the object store's files (and remove a bundle's scratch store)."""
        self.store.close()
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch = None

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @classmethod
    def open(cls, path: Path) -> History:
        """A working copy, a bare repository or a bundle; NotFoundError when it is none of them."""
        path = Path(path).expanduser()
        if path.is_file():
            return cls._bundle(path)
        gitdir = path / ".git" if (path / ".git").is_dir() else path
        if not ((gitdir / "objects").is_dir() and (gitdir / "HEAD").is_file()):
            raise NotFoundError(f"{path} is no git repository (no .git/objects and HEAD) and no git bundle")
        refs = DiskRefsContainer(str(gitdir))
        resolved: dict[bytes, bytes] = {}
        for name in [b"HEAD", *refs.allkeys()]:
            try:
                resolved[name] = refs[Ref(name)]
            except KeyError:  # a dangling symbolic ref (an empty repository's HEAD)
                continue
        return cls(DiskObjectStore(str(gitdir / "objects")), resolved, path)

    @classmethod
    def _bundle(cls, path: Path) -> History:
        """A bundle's pack, indexed into a scratch object store (removed when the process ends)."""
        try:
            raw = path.read_bytes()
            bundle = read_bundle(io.BytesIO(raw))
            refs = {bytes(name): bytes(sha) for name, sha in bundle.references.items()}
            bundle.close()
            pack = raw[raw.index(b"\n\n") + 2 :]
            if not pack.startswith(b"PACK"):
                raise ValueError("no pack after the header")
            scratch = tempfile.mkdtemp(prefix="harness-bundle-")
            atexit.register(shutil.rmtree, scratch, True)  # if close() is never called
            store = DiskObjectStore.init(scratch)
            handle_, commit, abort = store.add_pack()
            try:
                handle_.write(pack)
                commit()
            except BaseException:
                abort()
                raise
        except (AssertionError, ValueError, KeyError, OSError) as error:
            raise UsageError(f"{path} is not a readable git bundle ({type(error).__name__}: {error})") from None
        if b"HEAD" not in refs and refs:
            refs[b"HEAD"] = next(iter(refs.values()))
        return cls(store, refs, path, scratch)

    def resolve(self, ref: str) -> bytes:
        """A commit id from a ref name (HEAD, a branch, a tag, refs/...) or a (short) hex id."""
        for name in (ref, f"refs/heads/{ref}", f"refs/tags/{ref}", f"refs/remotes/{ref}"):
            sha = self.refs.get(name.encode())
            if sha is not None:
                return self._peel(sha)
        text = ref.lower()
        if 4 <= len(text) <= 40 and all(c in "0123456789abcdef" for c in text):
            if len(text) == 40 and self._has(text.encode()):
                return self._peel(text.encode())
            found = [sha for sha in self.store if sha.decode().startswith(text)] if len(text) < 40 else []
            commits = [bytes(sha) for sha in found if isinstance(self._get(sha), Commit)]
            if len(commits) == 1:
                return commits[0]
            if len(commits) > 1:
                raise UsageError(f"{ref} names {len(commits)} commits in {self.source}: give more digits")
        raise NotFoundError(f"no commit {ref!r} in {self.source}")

    def _get(self, sha: bytes) -> ShaFile:
        return self.store[ObjectID(sha)]

    def _has(self, sha: bytes) -> bool:
        try:
            self._get(sha)
        except KeyError:
            return False
        return True

    def _peel(self, sha: bytes) -> bytes:
        obj = self._get(sha)
        while not isinstance(obj, Commit):
            target = getattr(obj, "object", None)
            if target is None:
                raise NotFoundError(f"{sha.decode()} in {self.source} is no commit")
            obj = self._get(target[1])
        return bytes(obj.id)

    def commit(self, sha: bytes) -> Commit:
        obj = self._get(sha)
        if not isinstance(obj, Commit):
            raise NotFoundError(f"{sha.decode()} is no commit")
        return obj

    def first_parents(self, head: bytes, stop: bytes | None, limit: int) -> list[Commit]:
        """head and its first-parent ancestors, newest first, up to (not including) stop."""
        chain: list[Commit] = []
        sha: bytes | None = head
        while sha is not None and sha != stop and len(chain) < limit:
            commit = self.commit(sha)
            chain.append(commit)
            sha = commit.parents[0] if commit.parents else None
        return chain

    def merged_subjects(self, merge: Commit, line: set[bytes], limit: int) -> list[str]:
        """The subjects of the commits a merge brought in (reachable from its other parents, not from
        the first-parent line), oldest first, at most limit of them (newest kept)."""
        found: list[Commit] = []
        queue = [bytes(parent) for parent in merge.parents[1:]]
        seen: set[bytes] = set(line)
        while queue and len(found) < limit:
            sha = queue.pop(0)
            if sha in seen:
                continue
            seen.add(sha)
            try:
                commit = self.commit(sha)
            except (KeyError, NotFoundError):  # a shallow history ends here
                continue
            if len(commit.parents) <= 1:
                found.append(commit)
            queue += [bytes(parent) for parent in commit.parents]
        found.sort(key=lambda commit: commit.commit_time)
        return [commit.message.decode("utf-8", "replace").strip().split("\n")[0].strip() for commit in found]

    def changes(self, parent: Commit, commit: Commit) -> list[Change]:
        """What commit changed relative to parent, one entry per path (renames are a delete and an add)."""
        out = []
        for change in tree_changes(self.store, parent.tree, commit.tree):
            old, new = _entry(change.old), _entry(change.new)
            path = (change.new.path if new and change.new else change.old.path if change.old else None) or b""
            out.append(Change(path.decode("utf-8", "surrogateescape"), old, new))
        return out

    def files(self, tree: bytes) -> dict[str, Entry]:
        """Every file, symlink and submodule of a tree by path."""
        return {
            entry.path.decode("utf-8", "surrogateescape"): Entry(entry.mode, entry.sha)
            for entry in iter_tree_contents(self.store, ObjectID(tree))
            if entry.path is not None and entry.mode is not None and entry.sha is not None
        }

    def blob(self, sha: bytes) -> bytes:
        obj = self._get(sha)
        if not isinstance(obj, Blob):
            raise NotFoundError(f"{sha.decode()} is no blob")
        return obj.as_raw_string()

    def diff(self, change: Change) -> bytes:
        """The git-format diff of one change (`Binary files ... differ` for binary content)."""
        out = io.BytesIO()
        path = change.path.encode("utf-8", "surrogateescape")
        none: tuple[bytes | None, int | None, ObjectID | None] = (None, None, None)
        old = (path, change.old.mode, ObjectID(change.old.sha)) if change.old else none
        new = (path, change.new.mode, ObjectID(change.new.sha)) if change.new else none
        write_object_diff(out, self.store, old, new)
        return out.getvalue()


def _entry(side: TreeEntry | None) -> Entry | None:
    if side is None or side.path is None or side.mode is None or side.sha is None:
        return None
    return Entry(side.mode, bytes(side.sha))


def is_binary(data: bytes) -> bool:
    return b"\0" in data[:8000]
