"""`harness apply`: each chosen task-run's change as one commit on a new branch of its original
repository. The parent is the commit the session started from (or `--onto REF`, through the
three-way merge of harness.landing.merge); author, date and message come from the run; a branch that
exists is never moved (unless `--force`, and only one harness made); every apply is on the trail in
the session folder (and the batch directory)."""

from __future__ import annotations

import getpass
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dulwich.objects import Commit, ObjectID

from harness.errors import NotFoundError, UsageError
from harness.history.mine import PULL_REQUEST, TRAILER
from harness.landing.merge import Held, merge
from harness.landing.repository import Repository
from harness.landing.trail import TRAIL
from harness.trajectory import read_records
from sandbox import durable
from sandbox.layout import SessionFolder
from sandbox.snapshot.objects import ObjectStore
from sandbox.snapshot.shared import git_dir_of

if TYPE_CHECKING:
    from harness.batch.records import TaskRunRecord

SESSION_TRAILER = "Harness-Session"
AUTHOR = "harness <harness@localhost>"
"""Every apply of a session (or of a batch's task-runs), in its folder: branch, commit, by whom, when."""


@dataclass(frozen=True)
class Landed:
    """One change landed: where it went."""

    session_id: str
    branch: str
    commit: str
    parent: str
    repo: str
    files: int
    onto: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "by": getpass.getuser(), "at": time.time()}


def apply_session(
    session_dir: Path,
    branch: str,
    *,
    onto: str | None = None,
    force: bool = False,
    author: str = AUTHOR,
    repo: Path | None = None,
) -> Landed:
    """The session's change as a commit on a new branch of its repository (or repo); UsageError
    (exit 64) with one line when it cannot land, nothing written then."""
    folder = SessionFolder(Path(session_dir))
    info = _session_info(folder)
    _check_branch_name(branch)
    with Repository(target_path(info, repo)) as target:
        start = _start(info, target)
        parent = target.resolve(onto) if onto else start.commit
        existing = _free(target, branch, force)
        sha, files = commit_change(target, folder, start, parent, onto or parent[:12], author, onto)
        target.create_branch(branch, sha, replace=existing)
        landed = Landed(folder.root.name, branch, sha, parent, str(target.path), files, onto)
    durable.append_line(folder.root / TRAIL, landed.as_dict())
    return landed


def target_path(info: dict[str, Any], repo: Path | None) -> Path:
    """The repository a session's change lands in: --repo, else the one its start state was mined
    from, else the one it was made from; UsageError when that is no git repository apply can write."""
    if repo is not None:
        return Path(repo)
    started = info.get("started_from") or {}
    if started:
        source = started.get("repository")
        if not source:
            raise UsageError(
                f"session {info['id']} started from a mined task's state (commit {str(started.get('applied'))[:12]}) "
                "and does not name the repository it was mined from; pass --repo PATH, a clone that has that commit"
            )
        if Path(source).is_file():
            raise UsageError(
                f"session {info['id']}'s task was mined from the bundle {source}, which apply cannot write; "
                "pass --repo PATH, a clone of it"
            )
        return Path(source)
    return Path(info["repo"])


@dataclass(frozen=True)
class Start:
    """What a session's change is laid onto: the commit it started from, and the commit whose changes
    its start state already held on some paths (a mined task's test changes), if any."""

    commit: str
    applied: str | None = None


def commit_change(
    target: Repository,
    folder: SessionFolder,
    start: Start,
    parent: str,
    label: str,
    author: str,
    onto: str | None,
) -> tuple[str, int]:
    """The session's change (with what its start state held of start.applied) merged onto parent,
    committed (no ref moves); (commit id, files changed). Conflict (a UsageError) when it does not
    apply there."""
    steps = list(durable.read_lines(folder.steps))
    objects = ObjectStore(git_dir_of(folder.root))
    held = Held(start.commit, start.applied) if start.applied else None
    merged = merge(target, objects, steps[0]["tree"], steps[-1]["tree"], parent, label, held)
    if not merged.changed:
        raise UsageError(f"session {folder.root.name} changed nothing; no commit was made")
    commit = Commit()
    commit.tree = merged.tree.encode()
    commit.parents = [ObjectID(parent.encode())]
    commit.author = commit.committer = author.encode()
    commit.author_time, commit.commit_time = int(_ended(folder)), int(time.time())
    commit.author_timezone = commit.commit_timezone = 0
    commit.encoding = b"UTF-8"
    mined = target.commit(start.applied).message.decode("utf-8", "replace") if start.applied else None
    commit.message = message(folder, onto, mined=mined, applied=start.applied).encode("utf-8", "replace")
    return target.write(b"commit", _payload(commit)), len(merged.changed)


def _free(target: Repository, branch: str, force: bool) -> str | None:
    """Where the branch points now (None: it does not exist), when it may be written; else UsageError."""
    existing = target.branch(branch)
    if existing is not None and not (force and _ours(target, existing)):
        why = "it was not made by harness" if force else "pass --force to replace one harness made"
        raise UsageError(f"branch {branch} exists in {target.path} ({existing[:12]}); {why}; nothing was written")
    return existing


def _payload(commit: Commit) -> bytes:
    """A commit object's body as git hashes it (dulwich builds it; our writer stores it)."""
    return b"".join(commit.as_raw_chunks())


def message(folder: SessionFolder, onto: str | None, *, mined: str | None = None, applied: str | None = None) -> str:
    """The commit message: the task (for a mined task, the words of the commit it was mined from,
    not the prompt's note on its tests), then what the run did and how it was checked."""
    records = read_records(folder.root)
    start = next((r for r in records if r.kind == "start"), None)
    outcome = next((r for r in reversed(records) if r.kind == "outcome"), None)
    verify = next((r for r in reversed(records) if r.kind == "verify"), None)
    final = next((r.turn.text for r in reversed(records) if r.kind == "turn" and not r.turn.tool_calls), "")
    task = (mined_text(mined) if mined is not None else (start.task if start else "")).strip() or "harness session"
    title, _, rest = task.partition("\n")
    title = title if len(title) <= 72 else title[:69] + "..."
    lines = [title, ""]
    if rest.strip():
        lines += [rest.strip(), ""]
    if outcome is not None:
        lines.append(f"Outcome: {outcome.outcome}" + (f" ({outcome.detail})" if outcome.detail else ""))
    if start is not None:
        lines.append(f"Model: {start.model}")
    if verify is not None:
        state = "passed" if verify.passed else f"failed (exit {verify.exit_code})"
        lines.append(f"Verify: `{verify.command}` {state} in round {verify.round}")
    if applied:
        lines.append(f"Mined from: {applied} (its tests with this run's change)")
    if onto:
        lines.append(f"Rebased onto: {onto} (three-way merge of the trees)")
    if final.strip():
        lines += ["", "The model's summary:", "", *(f"    {line}" for line in final.strip().splitlines()[:40])]
    lines += ["", f"{SESSION_TRAILER}: {folder.root.name}"]
    return "\n".join(lines) + "\n"


def _session_info(folder: SessionFolder) -> dict[str, Any]:
    try:
        return dict(durable.read_json(folder.info))
    except FileNotFoundError:
        raise NotFoundError(f"no session in {folder.root}") from None


def mined_text(raw: str) -> str:
    """A mined commit's message as a task's words: a merged pull request's title under GitHub's
    merge line, trailers left out."""
    lines = raw.replace("\r\n", "\n").strip().splitlines()
    if len(lines) > 1 and PULL_REQUEST.match(lines[0].strip()) and any(line.strip() for line in lines[1:]):
        lines = lines[1:]
    kept = [line.rstrip() for line in lines if not TRAILER.match(line.strip())]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip()


def _start(info: dict[str, Any], repo: Repository) -> Start:
    """The commit the session's change lands on by default (and, for a mined task, the commit whose
    test changes its start state held); UsageError when the repository does not have it."""
    started = info.get("started_from") or {}
    applied = started.get("applied")
    if applied and not repo.has(applied):
        raise UsageError(
            f"session {info['id']}'s task was mined from commit {applied[:12]}, which {repo.path} does not have; "
            "pass --repo PATH, the repository it was mined from"
        )
    origin = info.get("origin")
    if not origin and applied:
        parents = repo.commit(applied).parents
        if not parents:
            raise UsageError(f"the commit {applied[:12]} session {info['id']} was mined from has no parent")
        origin = parents[0].decode()
    if not origin:
        raise UsageError(
            f"session {info['id']} was made from {info['repo']}, which was no git repository (or had no commit); "
            "name the commit to land on with --onto REF (and the repository with --repo), or write the patch "
            "with harness export"
        )
    if not repo.has(origin):
        raise UsageError(
            f"the commit session {info['id']} started from ({origin[:12]}) is not in {repo.path} any more "
            "(rewritten or removed); name one with --onto REF"
        )
    return Start(str(origin), applied)


def _started_at(target: Repository, record: TaskRunRecord) -> int:
    """When the commit a task-run started from was made (0 when it cannot be told): stacking order."""
    try:
        start = _start(_session_info(SessionFolder(Path(record.session_dir))), target)
        return int(target.commit(start.commit).commit_time)
    except (UsageError, NotFoundError, KeyError, OSError):
        return 0


def _ours(repo: Repository, sha: str) -> bool:
    """The commit was made by harness apply (its message ends with the session trailer)."""
    try:
        text = repo.commit(sha).message.decode("utf-8", "replace")
    except (KeyError, UsageError):
        return False
    return f"\n{SESSION_TRAILER}: " in text


def _ended(folder: SessionFolder) -> float:
    records = read_records(folder.root)
    outcome = next((r for r in reversed(records) if r.kind == "outcome"), None)
    return outcome.ts if outcome is not None else folder.steps.stat().st_mtime


_BAD_CHARACTERS = re.compile(r"[\x00-\x20~^:?*\[\\\x7f]|@\{|\.\.|//")


def _check_branch_name(name: str) -> None:
    """UsageError unless git accepts refs/heads/NAME (git check-ref-format --branch): no part begins
    with a dot or ends with `.lock`, no `..`, `@{`, `//`, control or special character, not `@`, not
    `HEAD`, not a full ref, nothing leading with `-`."""
    parts = name.split("/")
    why = (
        "it is empty" if not name
        else "it names a full ref: give the branch's name" if name.startswith("refs/")
        else "HEAD and @ are not branch names" if name in ("HEAD", "@")
        else "it begins with - or / or ends with / or ." if name.startswith(("-", "/")) or name.endswith(("/", "."))
        else "a part begins with ." if any(part.startswith(".") for part in parts)
        else "a part ends with .lock" if any(part.endswith(".lock") for part in parts)
        else "it holds a space, a control character, .., //, @{ or one of ~^:?*[\\" if _BAD_CHARACTERS.search(name)
        else ""
    )  # fmt: skip
    if why:
        raise UsageError(f"{name!r} is not a branch name git accepts ({why}; see git check-ref-format)")


def branch_name(prefix: str, task_id: str, model: str, run_index: int) -> str:
    """The branch of one task-run: prefix/task/model-slug[-run]."""
    name = model.split(":", 1)[-1].rsplit("/", 1)[-1] or model.split(":", 1)[0]  # `reference:` is reference
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "model"
    task = re.sub(r"[^A-Za-z0-9._/-]+", "-", task_id).strip("-./") or "task"
    return f"{prefix.rstrip('/')}/{task}/{slug}" + (f"-{run_index}" if run_index else "")


def chosen(batch_dir: Path, only: str, pick: Sequence[str]) -> tuple[list[TaskRunRecord], list[tuple[str, str]]]:
    """The task-runs of a batch that are to land (only verified, completed, or accepted; pick narrows
    them by task id or session id), and the others with why not."""
    from harness.batch.records import BatchDir
    from harness.report.marks import read_marks
    from harness.report.metrics import completion

    records = [r for r in BatchDir(batch_dir).records() if r.status == "done"]
    if pick:
        records = [r for r in records if r.session_id in pick or r.key.task_id in pick]
        if not records:
            raise NotFoundError(f"none of {', '.join(pick)} is a task-run of {batch_dir}")
    taken, skipped = [], []
    marks = read_marks(batch_dir) if only == "accepted" else {}
    for record in records:
        if only == "accepted" and marks.get(record.session_id) != "accepted":
            skipped.append((record.session_id, f"not accepted ({marks.get(record.session_id, 'no mark')})"))
        elif only == "verified" and not record.verified:
            skipped.append((record.session_id, f"not verified ({record.outcome})"))
        elif only == "completed" and not completion(record).completed:
            skipped.append((record.session_id, f"not completed ({completion(record).why})"))
        else:
            taken.append(record)
    return taken, skipped


def apply_batch(
    batch_dir: Path,
    *,
    prefix: str = "harness",
    only: str = "verified",
    pick: Sequence[str] = (),
    onto: str | None = None,
    force: bool = False,
    author: str = AUTHOR,
    repo: Path | None = None,
) -> tuple[list[Landed], list[tuple[str, str]]]:
    """Each chosen task-run of a batch on a branch of its own (in repo, else where each session's
    start state came from): (landed, [(session, why not)])."""
    records, skipped = chosen(batch_dir, only, pick)
    landed: list[Landed] = []
    for record in records:
        name = branch_name(prefix, record.key.task_id, record.key.model, record.key.run_index)
        try:
            done = apply_session(Path(record.session_dir), name, onto=onto, force=force, author=author, repo=repo)
        except UsageError as error:
            skipped.append((record.session_id, str(error)))
            continue
        durable.append_line(Path(batch_dir) / TRAIL, done.as_dict())
        landed.append(done)
    return landed, skipped


def combine_batch(
    batch_dir: Path,
    branch: str,
    *,
    only: str = "verified",
    pick: Sequence[str] = (),
    onto: str | None = None,
    force: bool = False,
    author: str = AUTHOR,
    repo: Path | None = None,
) -> tuple[list[Landed], list[tuple[str, str]]]:
    """The chosen task-runs stacked on one branch (of repo, else the first one's repository), one
    commit each, completed ones first, then in the order of the commits they were mined from, then the
    smallest change first; a change that conflicts
    with those stacked before it (or is already in the stack, or belongs to another repository) is
    left out, with why."""
    from harness.report.metrics import completion
    from harness.report.patchstats import patch_stats

    _check_branch_name(branch)
    records, skipped = chosen(batch_dir, only, pick)
    if not records:
        raise UsageError(f"no task-run of {batch_dir} is to land ({only}); nothing was written")
    records.sort(key=lambda r: (not completion(r).completed, patch_stats(r.patch or "").lines_changed, r.session_id))
    first = SessionFolder(Path(records[0].session_dir))
    info = _session_info(first)
    landed: list[Landed] = []
    folders: dict[str, Path] = {}
    path = target_path(info, repo)
    with Repository(path) as target:
        # changes of older commits first (mined tasks of several commits stack in the history's order)
        records.sort(key=lambda r: (not completion(r).completed, _started_at(target, r)))
        first = SessionFolder(Path(records[0].session_dir))
        info = _session_info(first)
        existing = _free(target, branch, force)
        tip = base = target.resolve(onto) if onto else _start(info, target).commit
        for record in records:
            folder = SessionFolder(Path(record.session_dir))
            own = _session_info(folder)
            try:
                if Path(target_path(own, repo)).resolve() != target.path:
                    skipped.append((record.session_id, f"its repository is another one than {target.path}"))
                    continue
                start = _start(own, target)
                sha, files = commit_change(target, folder, start, tip, f"the changes stacked on {branch}", author, onto)
            except UsageError as error:
                skipped.append((record.session_id, str(error)))
                continue
            if target.commit(sha).tree == target.commit(tip).tree:
                skipped.append((record.session_id, "its change is already in the branch"))
                continue
            landed.append(Landed(folder.root.name, branch, sha, tip, str(target.path), files, onto))
            folders[folder.root.name] = folder.root
            tip = sha
        if tip != base:
            target.create_branch(branch, tip, replace=existing)
    for done in landed:  # the trail once the branch is there
        durable.append_line(Path(batch_dir) / TRAIL, done.as_dict())
        durable.append_line(folders[done.session_id] / TRAIL, done.as_dict())
    return landed, skipped
