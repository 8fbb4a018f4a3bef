"""A fork's parent for a worker that does not see it: the parent session bundled once per batch (its
files and one pack of every object its steps name) and shipped like a repository, then made a
session of the worker's store there (`adopt`), which every fork of it on that machine starts from."""

from __future__ import annotations

from pathlib import Path

from harness.batch.shipping import locked
from harness.errors import UsageError

BUNDLE_FILES = ("session.json", "steps.jsonl", "trajectory.jsonl", "run.json", "state.json")
"""What of the parent's folder a fork needs besides its objects."""


def bundle(parent_dir: Path, into: Path) -> Path:
    """The parent session for workers without it, as a folder shipped like a repository: its files
    (`session/`) and one pack of every object its steps reference (`objects/pack/`), with the large
    files they point to (`objects/large/`). Sent once per batch, as a repository is."""
    import json
    import shutil

    from sandbox.snapshot import packs
    from sandbox.snapshot.objects import DIR, LARGE, LINK, ObjectStore

    parent_dir = Path(parent_dir)
    info = json.loads((parent_dir / "session.json").read_text(encoding="utf-8"))
    if not info.get("objects"):
        raise UsageError(f"session {parent_dir.name} keeps a store of its own (an older session): it cannot be shipped")
    root = Path(info["objects"])
    store = ObjectStore(root / "git")
    into.mkdir(parents=True)
    (into / "session").mkdir()
    for name in BUNDLE_FILES:
        if (parent_dir / name).is_file():
            shutil.copyfile(parent_dir / name, into / "session" / name)
    found: dict[str, tuple[str, bytes, bytes]] = {}
    large: set[str] = set()
    work = [json.loads(line)["tree"] for line in (parent_dir / "steps.jsonl").read_text().splitlines() if line.strip()]
    while work:
        tree = work.pop()
        if tree in found:
            continue
        found[tree] = (tree, b"tree", store.read(tree, b"tree"))
        for entry in store.tree(tree):
            if entry.mode & 0o170000 == DIR:
                work.append(entry.oid)
            elif entry.oid not in found:
                payload = store.read(entry.oid, b"blob")
                found[entry.oid] = (entry.oid, b"blob", payload)
                if entry.mode & 0o170000 != LINK and entry.mode & LARGE:
                    large.add(payload.split(b"\n")[1].split(b" ")[1].decode())
    (into / "objects" / "pack").mkdir(parents=True)
    (into / "objects" / "large").mkdir()
    packs.write_pack(into / "objects" / "pack", into / "objects", sorted(found.values()))
    for name in large:
        shutil.copyfile(root / "large" / name, into / "objects" / "large" / name)
    return into


def adopt(bundle_dir: Path, sessions: Path) -> Path:
    """A shipped parent made a session of this worker's batch folder (its objects added to the
    store, referenced, its session.json naming this store); the same folder for every fork of it."""
    import json
    import os
    import shutil

    from sandbox.layout import objects_dir
    from sandbox.snapshot.shared import SharedObjects

    info = json.loads((bundle_dir / "session" / "session.json").read_text(encoding="utf-8"))
    folder = Path(sessions) / f"parent-{bundle_dir.name[:12]}-{info['id']}"[:120]
    if (folder / "session.json").is_file():
        return folder
    with locked(Path(sessions) / f".{folder.name}.lock"):
        if (folder / "session.json").is_file():
            return folder
        shared = SharedObjects(objects_dir(sessions)).init()
        with shared.writing():  # no collection until the folder and its reference are both there
            pack_folder = shared.git / "objects" / "pack"
            pack_folder.mkdir(parents=True, exist_ok=True)
            shipped = sorted((bundle_dir / "objects" / "pack").iterdir(), key=lambda p: p.suffix != ".pack")
            for path in shipped:  # the pack before its index: a reader never finds an index without it
                staging = pack_folder / f".{path.name}.{os.getpid()}"
                shutil.copyfile(path, staging)
                os.replace(staging, pack_folder / path.name)
            for path in (bundle_dir / "objects" / "large").iterdir():
                if not (shared.large / path.name).exists():
                    shutil.copyfile(path, shared.large / path.name)
            staging_dir = Path(sessions) / f".{folder.name}.{os.getpid()}"
            shutil.rmtree(staging_dir, ignore_errors=True)
            shutil.copytree(bundle_dir / "session", staging_dir)
            info["objects"] = str(shared.root.resolve())
            (staging_dir / "session.json").write_text(json.dumps(info), encoding="utf-8")
            os.replace(staging_dir, folder)
            shared.add_ref(folder)
    return folder
