"""Forks as a batch: N continuations of one session from one of its steps, each a task-run of a batch
directory laid out like any (records, `sessions/`, reports), so the same Dask engine runs them (local
or a cluster), under one budget, resumable after kill -9 exactly once, and `harness report DIR`
compares them."""

from __future__ import annotations

from pathlib import Path

from harness import assembly
from harness.agent.fork import fork_start
from harness.agent.outcome import RunState
from harness.batch.records import BatchDir, TaskRunKey
from harness.batch.tasks import ForkFrom, Task, TaskDefaults, TasksFile
from harness.batch.worker import TaskRunSpec, session_record
from harness.errors import NotFoundError, UsageError
from harness.trajectory import read_records, read_state
from sandbox.layout import SessionFolder


def fork_tasks(parent_dir: Path, at: int, *, runs: int, models: list[str], hint: str | None = None) -> TasksFile:
    """The batch of forks of the session in parent_dir at its step `at`: each model `runs` times
    (default: the parent's own model). UsageError for a step the run does not have, a session
    still running or one that recorded no run."""
    parent_dir = Path(parent_dir).resolve()
    if not SessionFolder(parent_dir).info.is_file():
        raise NotFoundError(f"no session {parent_dir.name} in {parent_dir.parent} (see: harness session list)")
    assembly.check_forkable(parent_dir)
    config = assembly.saved_config(parent_dir, {})
    records = read_records(parent_dir)
    start = fork_start(records, at, session_id=parent_dir.name, model="", config=config.context, hint=hint)
    info = assembly.open_session(parent_dir.parent, parent_dir.name).info
    task = Task(
        id=f"{parent_dir.name}-at-{at}"[:100],
        repo=Path(info.repo),
        task=start.state.task,
        fork=ForkFrom(folder=parent_dir, at=at, hint=hint),
        runs=runs,
        image=config.image,
        verify=config.verify,
    )
    models = list(models) or [config.model or ""]
    if not all(models):
        raise UsageError("the parent recorded no model: give one with --model")
    return TasksFile(source=SessionFolder(parent_dir).run_config, defaults=TaskDefaults(model=models), tasks=[task])


PARENT = " (parent)"
"""What the parent's record adds to its model's name: the report shows it beside the forks."""


def record_parent(tasks: TasksFile, out: Path) -> None:
    """The parent's own record in the forks' batch directory (once; a parent without an outcome has
    none), so `harness report DIR` compares the forks with the run they continue."""
    task = tasks.tasks[0]
    assert task.fork is not None
    state = read_state(task.fork.folder, RunState)
    if state is None or state.result is None:
        return
    key = TaskRunKey(task_id=task.id, model=f"{state.model}{PARENT}", run_index=0)
    batch = BatchDir(out)
    if batch.read(key) is not None:
        return
    spec = TaskRunSpec(key=key, task=task, defaults=tasks.defaults, sessions=task.fork.folder.parent, run_id="")
    batch.write(session_record(spec, task.fork.folder, state.result))


# --- a parent for a worker that lacks it ---------------------------------------------------------

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
    import fcntl
    import json
    import os
    import shutil

    from sandbox.layout import objects_dir
    from sandbox.snapshot.shared import SharedObjects

    info = json.loads((bundle_dir / "session" / "session.json").read_text(encoding="utf-8"))
    folder = Path(sessions) / f"parent-{bundle_dir.name[:12]}-{info['id']}"[:120]
    if (folder / "session.json").is_file():
        return folder
    with open(Path(sessions) / f".{folder.name}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (folder / "session.json").is_file():
            return folder
        shared = SharedObjects(objects_dir(sessions)).init()
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
        shared.add_ref(folder)
        os.replace(staging_dir, folder)
    return folder
