"""Mined tasks on disk: `tasks.yaml`, and beside it `<stem>.tasks/<id>/` with the start state as a
plain directory (`repo/`, no `.git`), the reference patch (for graders) and the reference files (for
the `reference:` model). A batch never needs the original repository again."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import yaml

from harness.errors import UsageError
from harness.history.mine import Mined, MinedTask
from harness.history.prepare import SetupPolicy, setup_keys
from harness.history.reader import SYMLINK, History
from sandbox.durable import write_text_atomic
from sandbox.tree import remove_tree

MARKER = ".harness-mined"
"""In a states directory harness wrote (and may replace on the next mine)."""
YIELD = "mined.json"
"""The mining half of the yield report (scanned, made, skipped by reason), read by `tasks check`."""
REFERENCE = "reference.json"
PATCH = "reference.patch"


def states_dir(output: Path) -> Path:
    return output.parent / f"{output.stem}.tasks"


def write(
    mined: Mined, history: History, output: Path, *, image: str | None = None, setup: SetupPolicy | None = None
) -> Path:
    """Write the tasks file and the states beside it; the states directory. image: the defaults'
    image (default: the most common of the tasks'; a task in another names its own). setup: what
    each task's setup is (default: what its start state declares for its language)."""
    setup = setup or SetupPolicy()
    output = Path(output)
    states = states_dir(output)
    if states.exists():
        if not (states / MARKER).is_file():
            raise UsageError(f"{states} exists and was not written by harness tasks mine: move it away first")
        remove_tree(states)
    states.mkdir(parents=True)
    (states / MARKER).write_text(f"mined from {history.source} at {mined.head}\n", encoding="utf-8")
    images = Counter(task.image for task in mined.tasks)
    image = image or (images.most_common(1)[0][0] if images else "py311")
    entries = []
    for task in mined.tasks:
        folder = states / task.id
        _materialize(history, task, folder / "repo")
        (folder / PATCH).write_bytes(task.patch)
        write_text_atomic(folder / REFERENCE, json.dumps(_reference(history, task), indent=1))
        entry = _entry(task, folder.relative_to(output.parent), image, _source(history))
        entries.append({**entry, **setup_keys(folder / "repo", task.language, setup, task.added)})
    skipped = [{"commit": s.commit, "subject": s.subject, "reason": s.reason} for s in mined.skipped]
    write_text_atomic(states / "skipped.json", json.dumps(skipped, indent=1))
    write_text_atomic(states / YIELD, json.dumps(mined.yield_summary(str(history.source)), indent=1))
    header = [
        f"Mined by `harness tasks mine` from {history.source} (HEAD {mined.head[:12]}): {len(mined.tasks)} task(s),",
        f"{len(mined.skipped)} commit(s) skipped (reasons in {states.name}/skipped.json).",
        "Each task's reference patch and files are for graders and the reference: model, never for the model.",
    ]
    dump(output, header, {"image": image, "read_only": []}, entries)
    return states


def dump(output: Path, header: Iterable[str], defaults: dict[str, Any], tasks: list[dict[str, Any]]) -> None:
    """A tasks file: comment lines, defaults, tasks (multi-line text as YAML block literals)."""
    body = yaml.dump(
        {"defaults": defaults, "tasks": tasks}, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100
    )
    text = "".join(f"# {line}\n" for line in header) + body
    write_text_atomic(output, text)


class _Dumper(yaml.SafeDumper):
    pass


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.Node:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def read_yield(states: Path) -> dict[str, Any] | None:
    """What `tasks mine` wrote of its yield in a states directory, or None."""
    try:
        data = json.loads((states / YIELD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _source(history: History) -> str:
    """The mined repository's absolute path: where `harness apply` lands the task-runs' changes."""
    return str(Path(history.source).expanduser().resolve())


def _entry(task: MinedTask, folder: Path, image: str, repository: str) -> dict[str, Any]:
    tags: dict[str, Any] = {
        "category": task.category,
        "long_context": task.long_context,
        "commit": task.commit,
        "parent": task.parent,
        "date": task.date,
        "repository": repository,
        "language": task.language,
        "source": task.source,
        "files_to_read": task.files_to_read,
        "reference_files": task.reference_files,
        "reference_lines": task.reference_lines,
    }
    if task.pull_request is not None:
        tags["pull_request"] = task.pull_request
    if task.environment:
        tags["environment"] = task.environment
    return {
        "id": task.id,
        "repo": f"{folder.as_posix()}/repo",
        **({"image": task.image} if task.image != image else {}),
        "task": task.task,
        "verify": task.verify,
        "read_only": task.read_only,
        "reference": f"{folder.as_posix()}/{REFERENCE}",
        "max_files": task.max_files,
        "max_lines": task.max_lines,
        "tags": tags,
    }


def _reference(history: History, task: MinedTask) -> dict[str, Any]:
    files: dict[str, Any] = {}
    for path, entry in sorted(task.reference.items()):
        if entry is None:
            files[path] = None
        else:
            files[path] = {
                "content": history.blob(entry.sha).decode("utf-8"),
                "executable": bool(entry.mode & 0o111),
                "new": path not in task.start,
            }
    return {"commit": task.commit, "subject": task.subject, "files": files}


def _materialize(history: History, task: MinedTask, root: Path) -> None:
    """The start state as plain files. Paths were checked at mine time (no `..`, no `.git`), and no
    directory written through is a symlink (each parent is checked before a file goes in)."""
    root.mkdir(parents=True)
    made: set[Path] = {root}
    for path, entry in sorted(task.start.items()):
        target = root / path
        parent = target.parent
        if parent not in made:
            _directories(root, parent, made)
        data = history.blob(entry.sha)
        if entry.mode == SYMLINK:
            os.symlink(data, target)
            continue
        mode = 0o755 if entry.mode & 0o111 else 0o644
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)


def _directories(root: Path, directory: Path, made: set[Path]) -> None:
    current = root
    for part in directory.relative_to(root).parts:
        current = current / part
        if current in made:
            continue
        if current.is_symlink() or (current.exists() and not current.is_dir()):
            raise UsageError(f"{current} would be written through a symlink or file: the tree is malformed")
        current.mkdir(exist_ok=True)
        made.add(current)
