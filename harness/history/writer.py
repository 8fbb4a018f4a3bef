"""Write a repository's history object by object with dulwich (no `git` binary, no configuration):
commits of whole file sets on branches, merges of branches, fixed identity and clock. The mining
bench and the tests build the histories they mine with it."""

from __future__ import annotations

from pathlib import Path

from dulwich.objects import Blob, Commit, ObjectID, Tree
from dulwich.refs import Ref
from dulwich.repo import Repo

IDENTITY = b"Ada Example <ada@example.invalid>"


class HistoryWriter:
    """A fresh repository at path whose branches get commits of {path: text or None (deleted)}."""

    def __init__(self, path: Path, branch: str = "main", clock: int = 1_600_000_000) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self.repo = Repo.init(str(path))
        self.path = path
        self.clock = clock
        self.branch = branch
        self._files: dict[str, dict[str, bytes]] = {branch: {}}
        self._heads: dict[str, bytes | None] = {branch: None}
        self.repo.refs.set_symbolic_ref(Ref(b"HEAD"), Ref(f"refs/heads/{branch}".encode()))

    def close(self) -> None:
        self.repo.close()

    def checkout(self, branch: str, new: bool = False) -> None:
        """Switch to branch (new: start it at the current branch's head)."""
        if new:
            self._files[branch] = dict(self._files[self.branch])
            self._heads[branch] = self._heads[self.branch]
        self.branch = branch

    def commit(self, message: str, files: dict[str, str | None]) -> bytes:
        current = self._files[self.branch]
        for name, text in files.items():
            if text is None:
                current.pop(name, None)
            else:
                current[name] = text.encode()
        head = self._heads[self.branch]
        return self._write(message, [head] if head else [])

    def merge(self, branch: str, message: str) -> bytes:
        """A merge commit of branch into the current one (no conflicts: branch's files win)."""
        self._files[self.branch].update(self._files[branch])
        heads = [head for head in (self._heads[self.branch], self._heads[branch]) if head]
        return self._write(message, heads)

    def _write(self, message: str, parents: list[bytes]) -> bytes:
        self.clock += 3600
        commit = Commit()
        commit.tree = self._tree(self._files[self.branch])
        commit.parents = [ObjectID(parent) for parent in parents]
        commit.author = commit.committer = IDENTITY
        commit.author_time = commit.commit_time = self.clock
        commit.author_timezone = commit.commit_timezone = 0
        commit.encoding = b"UTF-8"
        commit.message = message.encode() + (b"" if message.endswith("\n") else b"\n")
        self.repo.object_store.add_object(commit)
        self._heads[self.branch] = commit.id
        self.repo.refs[Ref(f"refs/heads/{self.branch}".encode())] = commit.id
        return bytes(commit.id)

    def _tree(self, files: dict[str, bytes]) -> bytes:
        """The nested trees of a flat {path: content} (every file mode 100644)."""
        root: dict = {}
        for path, data in files.items():
            node = root
            *folders, name = path.split("/")
            for folder in folders:
                node = node.setdefault(folder, {})
            node[name] = data
        return self._store(root)

    def _store(self, node: dict) -> bytes:
        tree = Tree()
        for name, value in node.items():
            if isinstance(value, dict):
                tree.add(name.encode(), 0o040000, ObjectID(self._store(value)))
            else:
                blob = Blob.from_string(value)
                self.repo.object_store.add_object(blob)
                tree.add(name.encode(), 0o100644, blob.id)
        self.repo.object_store.add_object(tree)
        return bytes(tree.id)
