"""Which changes of a batch touch the same files or the same lines: read from each task-run's patch
(its files and the line ranges of the original each hunk replaces), so a reviewer sees before landing
what will collide at merge time."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from harness.batch.plain import TaskRun

_FILE = re.compile(r"^diff --git a/(.+?) b/(.+)$")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+\d+(?:,\d+)? @@")


@dataclass(frozen=True)
class Touched:
    """The files of one change and, per file, the original's line ranges its hunks replace."""

    files: dict[str, list[tuple[int, int]]] = field(default_factory=dict)


@dataclass(frozen=True)
class Overlap:
    """Two changes that touch the same files (and whether the same lines)."""

    a: str
    b: str
    files: list[str]
    same_lines: list[str]
    starts: list[str] = field(default_factory=list)
    """The commits the two start from when they differ (mined tasks of several commits): their line
    numbers then count in different files, so `same_lines` is left empty and this says why."""


def touched(patch: str | None) -> Touched:
    found: dict[str, list[tuple[int, int]]] = {}
    current: str | None = None
    for line in (patch or "").splitlines():
        head = _FILE.match(line)
        if head:
            current = head[1]
            found.setdefault(current, [])
            continue
        hunk = _HUNK.match(line)
        if hunk and current is not None:
            start, count = int(hunk[1]), int(hunk[2] if hunk[2] is not None else 1)
            found[current].append((start, start + max(count, 1) - 1))
    return Touched(found)


def overlaps(records: Sequence[TaskRun]) -> list[Overlap]:
    """Every pair of verified changes that touch a file in common, by session id."""
    changes = [(r.session_id, touched(r.patch), start_of(r)) for r in records if r.verified and r.patch]
    found = []
    for i, (a, one, a_start) in enumerate(changes):
        for b, other, b_start in changes[i + 1 :]:
            common = sorted(set(one.files) & set(other.files))
            if not common:
                continue
            if a_start != b_start:
                found.append(Overlap(a=a, b=b, files=common, same_lines=[], starts=[a_start, b_start]))
                continue
            lines = [f for f in common if _intersect(one.files[f], other.files[f])]
            found.append(Overlap(a=a, b=b, files=common, same_lines=lines))
    return found


def start_of(record: TaskRun) -> str:
    """The commit a task-run's change is against: a mined task's start commit (its commit's parent, or
    the commit itself when the tags name no parent), else "" (the batch's one repository state)."""
    tags = record.tags or {}
    return str(tags.get("parent") or tags.get("commit") or "")


def by_session(pairs: Sequence[Overlap]) -> dict[str, list[str]]:
    """Each session's overlapping others."""
    found: dict[str, list[str]] = {}
    for pair in pairs:
        found.setdefault(pair.a, []).append(pair.b)
        found.setdefault(pair.b, []).append(pair.a)
    return found


def _intersect(one: list[tuple[int, int]], other: list[tuple[int, int]]) -> bool:
    return any(a0 <= b1 and b0 <= a1 for a0, a1 in one for b0, b1 in other)
