"""A session's change laid onto a commit of the original repository: the paths the run changed
(its first snapshot against its last, caches and bytecode left out) are applied to the commit's
tree by a three-way merge of the trees, path by path: a path the commit has as the run found it
takes the run's version; a text file the commit changed too is merged by hunk (harness.landing.
hunks), and where both changed the same lines it is a conflict, and nothing is written.

A mined task's start state held its commit's test changes: those paths count as changed too (from
the commit the task started from), so the landed tree is the tree that was verified."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

from dulwich.object_store import iter_tree_contents

from harness.errors import UsageError
from harness.landing.hunks import merge_text
from harness.landing.repository import Repository
from sandbox.snapshot import edit
from sandbox.snapshot.objects import DIR, LARGE, LINK, ObjectStore, TreeEntry, encode_tree

Entry = tuple[int, str]
"""(git mode, object id) of a file or link."""
GITLINK = 0o160000


class Conflict(UsageError):
    """The change does not apply to the commit: the paths both changed, none written."""

    def __init__(self, paths: list[str], onto: str) -> None:
        shown = ", ".join(paths[:20]) + (f" and {len(paths) - 20} more" if len(paths) > 20 else "")
        super().__init__(f"the change conflicts with {onto} in {len(paths)} file(s): {shown}; nothing was written")
        self.paths = paths


@dataclass
class Merged:
    tree: str
    changed: list[str] = field(default_factory=list)
    merged: list[str] = field(default_factory=list)
    """Files both the change and the commit changed, merged by hunk."""


@dataclass(frozen=True)
class Held:
    """A start state built on `commit` that held `applied`'s version of some paths (a mined task's
    test changes): the paths where the start state is applied's and commit's differs."""

    commit: str
    applied: str


def canonical(mode: int) -> int:
    """git's mode for an entry (a snapshot keeps exact permission bits)."""
    kind = mode & 0o170000
    if kind in (LINK, GITLINK):
        return kind
    return 0o100755 if mode & 0o111 else 0o100644


def session_files(objects: ObjectStore, tree: str, prefix: str = "") -> dict[str, tuple[int, str]]:
    """path → (mode as stored, id) of every file and link under a snapshot tree."""
    found: dict[str, tuple[int, str]] = {}
    for entry in objects.tree(tree):
        path = prefix + entry.name.decode("utf-8", "surrogateescape")
        if entry.mode & 0o170000 == DIR:
            found.update(session_files(objects, entry.oid, path + "/"))
        else:
            found[path] = (entry.mode, entry.oid)
    return found


def merge(
    repo: Repository,
    objects: ObjectStore,
    base_tree: str,
    final_tree: str,
    onto: str,
    label: str,
    held: Held | None = None,
) -> Merged:
    """onto's tree with the session's change (base → final, and what the start state held of
    held.applied) applied, written into repo."""
    base = session_files(objects, edit.prune(objects, base_tree))
    final = session_files(objects, edit.prune(objects, final_tree))
    if held is not None:
        _unhold(repo, base, held)
    changed = sorted(p for p in set(base) | set(final) if _same(base.get(p)) != _same(final.get(p)))
    large = [p for p in changed if p in final and final[p][0] & LARGE and final[p][0] & 0o170000 != LINK]
    if large:
        raise UsageError(
            f"{', '.join(large[:5])}: kept outside the snapshot store (large files); export the patch instead"
        )
    ours = commit_files(repo, onto)
    both = [p for p in changed if _same(ours.get(p)) not in (_same(base.get(p)), _same(final.get(p)))]
    result = {path: (canonical(mode), oid) for path, (mode, oid) in ours.items()}
    for path in changed:
        if path in final:
            mode, oid = final[path]
            result[path] = (canonical(mode), oid)
        else:
            result.pop(path, None)
    conflicts, merged = [], []
    for path in both:
        blob = _by_hunk(repo, objects, base.get(path), ours.get(path), final.get(path))
        if blob is None:
            conflicts.append(path)
        else:
            result[path] = blob
            merged.append(path)
    shadowed = _file_directory_clashes(result)
    if conflicts or shadowed:
        raise Conflict(sorted(set(conflicts) | set(shadowed)), label)
    for path in changed:
        if path in final and path not in merged and not repo.has(final[path][1]):
            repo.write(b"blob", objects.read(final[path][1], b"blob"))
    return Merged(tree=_write_tree(repo, result), changed=changed, merged=merged)


def _blob(repo: Repository, objects: ObjectStore, oid: str) -> bytes:
    """A blob from the repository (a commit's file) or else the session's store (one the run wrote)."""
    return repo.get(oid).as_raw_string() if repo.has(oid) else objects.read(oid, b"blob")


def commit_files(repo: Repository, commit: str) -> dict[str, Entry]:
    """path → (git mode, id) of every file, link and submodule of a commit's tree."""
    return {
        entry.path.decode("utf-8", "surrogateescape"): (entry.mode, entry.sha.decode())
        for entry in iter_tree_contents(repo.store, repo.commit(commit).tree)
    }


def _unhold(repo: Repository, base: dict[str, tuple[int, str]], held: Held) -> None:
    """base with the paths the start state held of held.applied put back as held.commit has them
    (so they count as part of the change)."""
    before, after = commit_files(repo, held.commit), commit_files(repo, held.applied)
    for path in set(before) | set(after):
        if before.get(path) != after.get(path) and _same(base.get(path)) == after.get(path):
            if path in before:
                base[path] = before[path]
            else:
                base.pop(path, None)


def _by_hunk(
    repo: Repository,
    objects: ObjectStore,
    base: tuple[int, str] | None,
    ours: tuple[int, str] | None,
    final: tuple[int, str] | None,
) -> Entry | None:
    """A text file both sides changed, merged by hunk and written into repo; None: a conflict (a
    deletion, a link, a mode both changed otherwise, binary, or the same lines changed)."""
    if base is None or ours is None or final is None:
        return None
    if any(entry[0] & 0o170000 != 0o100000 for entry in (base, ours, final)):
        return None
    modes = {canonical(base[0]), canonical(ours[0]), canonical(final[0])}
    mode = canonical(final[0]) if canonical(ours[0]) == canonical(base[0]) else canonical(ours[0])
    if len(modes) == 3:
        return None
    texts = [_blob(repo, objects, base[1]), repo.get(ours[1]).as_raw_string(), _blob(repo, objects, final[1])]
    if any(b"\0" in text[:8000] for text in texts):
        return None
    merged = merge_text(texts[0], texts[1], texts[2])
    return None if merged is None else (mode, repo.write(b"blob", merged))


def _same(entry: tuple[int, str] | None) -> Entry | None:
    return None if entry is None else (canonical(entry[0]), entry[1])


def _file_directory_clashes(files: dict[str, Entry]) -> list[str]:
    """Paths that are a file in one place and a folder's name in another."""
    folders = {path.rsplit("/", 1)[0] for path in files if "/" in path}
    folders |= {f.rsplit("/", i)[0] for f in folders for i in range(1, f.count("/") + 1)}
    return sorted(path for path in files if path in folders)


def _write_tree(repo: Repository, files: dict[str, Entry]) -> str:
    """The nested trees of files written into repo; the root's id."""
    root: dict[str, object] = {}
    for path, entry in files.items():
        node = root
        parts = path.split("/")
        for part in parts[:-1]:
            node = node.setdefault(part, {})  # type: ignore[assignment]
        node[parts[-1]] = entry
    return _write_node(repo, root)


def _write_node(repo: Repository, node: dict[str, object]) -> str:
    entries = []
    for name, value in node.items():
        if isinstance(value, dict):
            entries.append(TreeEntry(DIR, name.encode("utf-8", "surrogateescape"), _write_node(repo, value)))
        else:
            mode, oid = cast(Entry, value)
            entries.append(TreeEntry(mode, name.encode("utf-8", "surrogateescape"), oid))
    return repo.write(b"tree", encode_tree(entries))
