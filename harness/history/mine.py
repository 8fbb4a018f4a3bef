"""`harness tasks mine`: turn a repository's own commits into benchmark tasks.

The first-parent line from HEAD is walked: each commit on it is one change, and a merge on it is one
change too (a merged pull request: everything it brought, against the line it was merged into; its
task in the words of the merge message and the merged commits' subjects), so neither the branch's
own commits nor a squash's pieces are mined twice. `--first-parent` (first_parent=True) keeps
merges out, as before. A change makes a task when it touches both code and tests and is not huge.
The task starts from the parent plus the change's test changes (so its new tests are there, and
fail), asks in the words of the message (diffs, code blocks and trailers stripped), is verified by
the tests the change touched (read-only in the session), run the way its language runs them
(languages.py), and keeps the other changes as the reference: a patch for graders and the files for
the `reference:` model, never shown to the model. What the start state declares it needs (the
interpreter or toolchain version, environment.py) goes with the task.

Tags say what kind of change the reference is (category), whether the change needs many files read
(`long_context`: the files it touches plus the repository files those import, at least
LONG_CONTEXT_FILES), and how big it is (the report's "change within range" uses max_files/max_lines:
twice the reference, with a little slack).
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from dulwich.objects import Commit

from harness.history import environment, languages
from harness.history.paths import Classifier, matcher
from harness.history.reader import GITLINK, SYMLINK, Change, Entry, History, is_binary

LONG_CONTEXT_FILES = 12
MAX_FILES = 30
"""A commit touching more files than this is huge (skipped)."""
MAX_LINES = 800
"""A commit changing more code lines than this is huge (skipped)."""
SCAN_LIMIT = 5000
"""Commits looked at, at most, per mine."""
MERGED_SUBJECTS = 20
"""A merge's task lists at most this many of the merged commits' subjects."""
PULL_REQUEST = re.compile(r"^Merge pull request #(\d+) from \S+|\(#(\d+)\)\s*$|^Merge branch '[^']+'")
TRAILER = re.compile(
    r"^(signed-off-by|co-authored-by|reviewed-by|acked-by|tested-by|reported-by|suggested-by|helped-by|cc|"
    r"change-id|fixes|closes|refs|see-also)\s*:",
    re.IGNORECASE,
)


@dataclass
class MinedTask:
    id: str
    commit: str
    subject: str
    task: str
    verify: str
    read_only: list[str]
    category: str
    long_context: bool
    files_to_read: int
    reference_files: int
    reference_lines: int
    language: str = "python"
    image: str = "py311"
    """The image its language runs in (or --image)."""
    source: str = "commit"
    """commit, merge (a merged pull request) or squash (a commit naming its pull request)."""
    pull_request: int | None = None
    environment: dict[str, str] | None = None
    """What the start state declares it needs (language, requires, source), if it says."""
    start: dict[str, Entry] = field(default_factory=dict)
    """The start state: the parent's files with the commit's test changes applied."""
    reference: dict[str, Entry | None] = field(default_factory=dict)
    """The commit's other changes: path -> its new entry (None: deleted)."""
    patch: bytes = b""
    added: list[str] = field(default_factory=list)
    """Dependencies the reference change declares that the start state does not (`name@range` for npm,
    requirement specifiers for pip): the tests after the change need them, so setup installs them too."""
    date: str = ""
    """When the commit was made (UTC, `YYYY-MM-DD`): `tasks check` may look for an environment of its time."""
    parent: str = ""
    """The commit the task starts from (the mined commit's first parent: for a merge, the line it was
    merged into); its tree plus the test changes is the start state."""

    @property
    def max_files(self) -> int:
        return max(2 * self.reference_files, self.reference_files + 2)

    @property
    def max_lines(self) -> int:
        return max(2 * self.reference_lines, self.reference_lines + 20)


@dataclass(frozen=True)
class Skipped:
    commit: str
    subject: str
    reason: str


@dataclass
class MineOptions:
    since: str | None = None
    max_tasks: int = 50
    paths: Sequence[str] = ()
    """Only commits touching these (gitignore-style) paths."""
    tests: Sequence[str] | None = None
    """What counts as a test path (default: Python, JS/TS, Go and Rust layouts)."""
    max_files: int = MAX_FILES
    max_lines: int = MAX_LINES
    verify: str | None = None
    """A verify template with {tests} (default: by the language of the tests)."""
    image: str | None = None
    """The image every task runs in (default: its language's)."""
    first_parent: bool = False
    """Skip merges (only the first-parent line's own commits make tasks)."""
    skipped_limit: int = 1000


@dataclass
class Mined:
    head: str
    tasks: list[MinedTask] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    scanned: int = 0
    """Commits looked at (on the first-parent line)."""
    merges: int = 0
    """Of them, merges."""
    skipped_count: int = 0
    """Commits that made no task (skipped keeps at most skipped_limit of them)."""

    def yield_summary(self, source: str) -> dict[str, Any]:
        """Scanned, made (by language and source), and skipped by reason: the mining half of the yield."""
        reasons: dict[str, int] = {}
        for item in self.skipped:
            reasons[reason_kind(item.reason)] = reasons.get(reason_kind(item.reason), 0) + 1
        by_language: dict[str, int] = {}
        by_source: dict[str, int] = {}
        for task in self.tasks:
            by_language[task.language] = by_language.get(task.language, 0) + 1
            by_source[task.source] = by_source.get(task.source, 0) + 1
        return {
            "repository": source,
            "head": self.head,
            "scanned": self.scanned,
            "merges": self.merges,
            "tasks": len(self.tasks),
            "by_language": by_language,
            "by_source": by_source,
            "skipped": self.skipped_count,
            "skipped_by_reason": dict(sorted(reasons.items(), key=lambda item: -item[1])),
        }


def reason_kind(reason: str) -> str:
    """A skip reason without its particulars (paths, counts): what a yield table groups by."""
    if ": a " in reason or ": not UTF-8" in reason:
        return reason.split(": ", 1)[1].split(" (")[0]
    return reason.split(" (")[0].split(" '")[0]


def mine(history: History, options: MineOptions) -> Mined:
    """The tasks of history's first-parent line from HEAD back to --since, newest first (a merge on
    the line is one task: the pull request it merged)."""
    head = history.resolve("HEAD")
    stop = history.resolve(options.since) if options.since else None
    classifier = Classifier(options.tests) if options.tests else Classifier()
    only = matcher(options.paths) if options.paths else None
    result = Mined(head=head.decode())
    seen: set[str] = set()
    line = history.first_parents(head, stop, SCAN_LIMIT)
    on_line = {bytes(commit.id) for commit in line}
    for commit in line:
        if len(result.tasks) >= options.max_tasks:
            break
        result.scanned += 1
        result.merges += len(commit.parents) > 1
        outcome = _task(history, commit, classifier, only, options, on_line)
        if isinstance(outcome, Skipped):
            result.skipped_count += 1
            if len(result.skipped) < options.skipped_limit:
                result.skipped.append(outcome)
            continue
        while outcome.id in seen:  # two commits with the same short id and subject
            outcome.id = outcome.id[:-2] + "-x" if not outcome.id.endswith("-x") else outcome.id + "x"
        seen.add(outcome.id)
        result.tasks.append(outcome)
    return result


def _task(
    history: History,
    commit: Commit,
    classifier: Classifier,
    only: object,
    options: MineOptions,
    on_line: set[bytes],
) -> MinedTask | Skipped:
    sha = commit.id.decode()
    message = commit.message.decode("utf-8", "replace")
    subject = message.strip().splitlines()[0].strip() if message.strip() else "(no message)"

    def skip(reason: str) -> Skipped:
        return Skipped(sha, subject, reason)

    merge = len(commit.parents) > 1
    if merge and options.first_parent:
        return skip("merge commit (--first-parent keeps merges out)")
    if not commit.parents:
        return skip("root commit (there is no state before it)")
    parent = history.commit(commit.parents[0])
    changes = history.changes(parent, commit)
    if not changes:
        return skip("changes nothing")
    if only is not None and not any(only.match_file(c.path) for c in changes):  # type: ignore[attr-defined]
        return skip("touches none of --paths")
    unsafe = [c.path for c in changes if not _safe_path(c.path)]
    if unsafe:
        return skip(f"unsafe path {unsafe[0]!r}")
    kinds = {c.path: classifier.kind(c.path) for c in changes}
    tests = [c for c in changes if kinds[c.path] == "test"]
    others = [c for c in changes if kinds[c.path] != "test"]
    code = [c for c in others if kinds[c.path] in ("code", "manifest")]
    if not tests and not code:
        return skip("only docs or lockfiles")
    if not code:
        return skip("only tests, docs or lockfiles" if others else "only tests")
    if not tests:
        return skip("no test changes (nothing to verify with)")
    if len(changes) > options.max_files:
        return skip(f"huge commit ({len(changes)} files, at most {options.max_files})")
    for change in others:
        for entry in (change.old, change.new):
            if entry is not None and entry.mode in (GITLINK, SYMLINK):
                return skip(f"{change.path}: a symlink or submodule change (the tools cannot make it)")
        if change.new is not None:
            data = history.blob(change.new.sha)
            if is_binary(data):
                return skip(f"{change.path}: a binary change (the tools cannot make it)")
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                return skip(f"{change.path}: not UTF-8 text (the tools write UTF-8)")
    patch = b"".join(history.diff(c) for c in others)
    lines = _changed_lines(b"".join(history.diff(c) for c in code))
    if lines > options.max_lines:
        return skip(f"huge commit ({lines} code lines changed, at most {options.max_lines})")
    test_files = [c.path for c in tests if c.new is not None and classifier.holds_tests(c.path)]
    kept_tests = [c.path for c in tests if c.new is not None]
    if not kept_tests:
        return skip("its test changes only delete tests")
    if not any(_checks(history, change) for change in tests):
        return skip("its test changes check nothing new (only comments, imports, blank lines or formatting)")
    start = history.files(parent.tree)
    for change in tests:
        _overlay(start, change)
    start = {path: entry for path, entry in start.items() if _safe_path(path) and entry.mode != GITLINK}
    language = languages.of_files(test_files or kept_tests, start)
    if not test_files and language is not languages.PYTHON:
        return skip(f"no file of its test changes holds {language.name} tests (only fixtures or helpers)")
    verify = _verify(language, options.verify, test_files or _test_dirs(kept_tests), start, history)
    after = history.files(commit.tree)
    reading = _files_to_read(history, [start, after], [c.path for c in code] + kept_tests)
    text = _task_text(_merge_message(history, commit, on_line) if merge else message, sorted(kept_tests))
    pull = PULL_REQUEST.search(subject)
    number = next((int(group) for group in pull.groups() if group), None) if pull else None
    wanted = environment.declared(language.name, lambda path: _root_file(history, start, path))
    return MinedTask(
        id=_task_id(sha, _merge_title(message) if merge else subject),
        commit=sha,
        subject=subject,
        task=text,
        verify=verify,
        read_only=sorted(c.path for c in tests),
        category=_category(tests, code, kinds),
        long_context=reading >= LONG_CONTEXT_FILES,
        files_to_read=reading,
        reference_files=len(code),
        reference_lines=lines,
        language=language.name,
        image=options.image or language.image,
        source="merge" if merge else "squash" if number is not None else "commit",
        pull_request=number,
        environment=wanted.as_tag() if wanted else None,
        start=start,
        reference={c.path: c.new for c in others},
        patch=patch,
        parent=parent.id.decode(),
        added=_added_dependencies(history, start, after, language.name),
        date=datetime.datetime.fromtimestamp(commit.commit_time, datetime.UTC).date().isoformat(),
    )


_COMMENT = {".py": "#", ".pyi": "#", ".rb": "#"}
_IMPORT_LINE = re.compile(r"^(import\s|from\s+\S+\s+import\s|use\s|package\s|#\s*-\*-)")


def _checks(history: History, change: Change) -> bool:
    """Whether a test file's change can check something new: what it holds besides comments, blank
    lines, imports and spacing differs (a moved import, a re-wrapped tuple, a comment or an empty
    `__init__.py` checks nothing, and makes a task whose tests pass before the change)."""
    marker = _COMMENT.get(PurePosixPath(change.path).suffix, "//")

    def essence(entry: Entry | None) -> str:
        if entry is None or entry.mode in (GITLINK, SYMLINK):
            return ""
        data = history.blob(entry.sha)
        if is_binary(data):
            return data.hex()
        kept, in_import = [], False
        for line in data.decode("utf-8", "replace").splitlines():
            stripped = line.strip()
            if in_import:  # the rest of a parenthesised import
                in_import = ")" not in stripped
                continue
            if _IMPORT_LINE.match(stripped):
                in_import = "(" in stripped and ")" not in stripped
                continue
            if stripped and not stripped.startswith(marker):
                kept.append("".join(stripped.split()))
        return "".join(kept)

    return essence(change.old) != essence(change.new)


def _added_dependencies(
    history: History, before: dict[str, Entry], after: dict[str, Entry], language: str
) -> list[str]:
    """What the change adds to the root manifest's dependencies: package.json's (dependencies and
    devDependencies, `name@range`) for JavaScript, requirement files' lines for Python."""
    if language == "javascript":
        old, new = (_npm_dependencies(_root_file(history, files, "package.json")) for files in (before, after))
        return [f"{name}@{spec}" for name, spec in sorted(new.items()) if old.get(name) != spec]
    if language == "python":
        added: list[str] = []
        for name in sorted(p for p in after if re.fullmatch(r"[\w.-]*requirements[\w.-]*\.txt", p)):
            old_lines = set(_requirement_lines(_root_file(history, before, name)))
            added += [line for line in _requirement_lines(_root_file(history, after, name)) if line not in old_lines]
        return added
    return []


def _npm_dependencies(data: bytes | None) -> dict[str, str]:
    import json

    try:
        manifest = json.loads(data or b"{}")
    except ValueError:
        return {}
    found: dict[str, str] = {}
    for key in ("dependencies", "devDependencies"):
        table = manifest.get(key) if isinstance(manifest, dict) else None
        if isinstance(table, dict):
            found.update({str(k): str(v) for k, v in table.items() if isinstance(v, str)})
    return found


def _requirement_lines(data: bytes | None) -> list[str]:
    lines = (data or b"").decode("utf-8", "replace").splitlines()
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith(("#", "-"))]


def _root_file(history: History, files: dict[str, Entry], path: str) -> bytes | None:
    entry = files.get(path)
    if entry is None or entry.mode in (GITLINK, SYMLINK):
        return None
    return history.blob(entry.sha)


def _merge_title(message: str) -> str:
    """A merge's title: the pull request's (the body's first line under GitHub's "Merge pull request
    #N from ..."), else its subject."""
    lines = [line.strip() for line in message.strip().splitlines()]
    if lines and PULL_REQUEST.match(lines[0]):
        body = [line for line in lines[1:] if line]
        if body and not TRAILER.match(body[0]):
            return body[0]
    return lines[0] if lines else "(no message)"


def _merge_message(history: History, commit: Commit, on_line: set[bytes]) -> str:
    """A merge's task text: the merge message (its boilerplate subject dropped when the pull
    request's own title follows), then the subjects of the commits it merged."""
    message = commit.message.decode("utf-8", "replace").strip()
    lines = message.splitlines()
    if lines and PULL_REQUEST.match(lines[0].strip()) and any(line.strip() for line in lines[1:]):
        message = "\n".join(lines[1:]).strip()
    subjects = history.merged_subjects(commit, on_line, MERGED_SUBJECTS + 1)
    if len(subjects) > 1:
        listed = "\n".join(f"- {s}" for s in subjects[:MERGED_SUBJECTS])
        more = "\n- ..." if len(subjects) > MERGED_SUBJECTS else ""
        message += f"\n\nThe pull request's commits:\n{listed}{more}"
    return message


def _safe_path(path: str) -> bool:
    parts = path.split("/")
    return all(p not in ("", ".", "..") and p.lower() != ".git" and "\0" not in p for p in parts)


def _overlay(files: dict[str, Entry], change: Change) -> None:
    """Apply one change to a flat tree, keeping it a tree (no file under a file's path)."""
    files.pop(change.path, None)
    if change.new is None:
        return
    prefix = change.path + "/"
    for path in [p for p in files if p.startswith(prefix)]:
        del files[path]
    parts = change.path.split("/")
    for depth in range(1, len(parts)):
        files.pop("/".join(parts[:depth]), None)
    files[change.path] = change.new


def _changed_lines(diff: bytes) -> int:
    return sum(
        1
        for line in diff.splitlines()
        if (line.startswith(b"+") and not line.startswith(b"+++"))
        or (line.startswith(b"-") and not line.startswith(b"---"))
    )


def _category(tests: list[Change], code: list[Change], kinds: Mapping[str, str]) -> str:
    """dependency-adaptation (a manifest or lockfile changed with the code), tests-added (the commit's
    tests are all new files: new behaviour), else single-file-fix or cross-file-change."""
    if any(kinds[path] in ("manifest", "lock") for path in kinds):
        return "dependency-adaptation"
    if all(c.old is None for c in tests):
        return "tests-added"
    return "single-file-fix" if len(code) == 1 else "cross-file-change"


def _test_dirs(paths: list[str]) -> list[str]:
    """pytest takes folders: those of the changed fixtures when no changed file holds tests itself."""
    return sorted({str(PurePosixPath(p).parent) for p in paths})


def _verify(
    language: languages.Language,
    template: str | None,
    tests: list[str],
    start: dict[str, Entry],
    history: History,
) -> str:
    """The verify command: the template given (its {tests} expanded the way the language's runner
    takes them), else the language's own (for JavaScript, the runner package.json depends on)."""
    if template is None and language is languages.JAVASCRIPT:
        template = languages.node_template(_root_file(history, start, "package.json"))
    return language.verify(tests, template)


_IMPORT = re.compile(r"^\s*(?:from\s+(\.*[\w.]*)\s+import\s+([\w, ]+)|import\s+([\w.]+))", re.MULTILINE)


def _files_to_read(history: History, trees: list[dict[str, Entry]], touched: list[str]) -> int:
    """The files a change needs read: those it touches, and the repository modules they import
    before or after the change (Python imports resolved against the tree, `src/` layouts too)."""
    needed = set(touched)
    for files in trees:
        for path in touched:
            entry = files.get(path)
            if entry is None or not path.endswith(".py") or entry.mode == SYMLINK:
                continue
            text = history.blob(entry.sha).decode("utf-8", "replace")
            for name in _imported(path, text):
                resolved = _module_file(name, files)
                if resolved:
                    needed.add(resolved)
    return len(needed)


def _imported(path: str, text: str) -> list[str]:
    names = []
    for found in _IMPORT.finditer(text):
        module, imported, plain = found.group(1), found.group(2), found.group(3)
        if plain:
            names.append(plain)
        elif module is not None:
            base = _relative(path, module) if module.startswith(".") else module
            names.append(base)
            names += [f"{base}.{name.strip()}" for name in (imported or "").split(",") if name.strip()]
    return names


def _relative(path: str, module: str) -> str:
    dots = len(module) - len(module.lstrip("."))
    package = PurePosixPath(path).parent.parts
    package = package[: len(package) - (dots - 1)] if dots > 1 else package
    rest = module.lstrip(".")
    return ".".join([*package, *([rest] if rest else [])])


def _module_file(name: str, files: dict[str, Entry]) -> str | None:
    base = name.strip(".").replace(".", "/")
    if not base:
        return None
    for root in ("", "src/", "lib/"):
        for candidate in (f"{root}{base}.py", f"{root}{base}/__init__.py"):
            if candidate in files:
                return candidate
    return None


def _task_id(sha: str, subject: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", subject.lower()).strip("-")[:40].strip("-")
    return f"{sha[:8]}-{slug}" if slug else sha[:8]


def _task_text(message: str, tests: list[str]) -> str:
    """The commit message as a task: no diff, no code blocks, no trailers; then which tests decide."""
    lines = message.replace("\r\n", "\n").split("\n")
    kept: list[str] = []
    fenced = False
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("diff --git") or stripped == "---" or stripped.startswith(("+++ ", "--- a/", "@@ ")):
            break  # a patch pasted into the message: everything after it is the answer
        if stripped.startswith(("```", "~~~")):
            if not fenced:
                kept.append("[code left out]")
            fenced = not fenced
            continue
        if fenced or TRAILER.match(stripped):
            continue
        if line.startswith(("    ", "\t")) and stripped:
            if not kept or kept[-1] != "[code left out]":
                kept.append("[code left out]")
            continue
        kept.append(line.rstrip())
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(kept)).strip() or "(the commit has no message)"
    listed = ", ".join(tests[:10]) + (f" and {len(tests) - 10} more" if len(tests) > 10 else "")
    return (
        f"{text}\n\nThis change is checked by the tests in {listed}, which fail now. They are read-only: "
        "change the code so that they pass."
    )
