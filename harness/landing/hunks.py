"""Three-way merge of one text file by hunk (the diff3 way): the base's lines that both sides kept
split the file into regions; a region only one side changed takes that side's lines, one both
changed alike takes them once, and one both changed otherwise is a conflict. Two changes to one file
whose lines neither overlap nor touch merge cleanly, as git merges them."""

from __future__ import annotations

from collections.abc import Sequence
from difflib import SequenceMatcher

MAX_LINES = 200_000
"""Files longer than this (either side) are not merged by hunk: a change to them conflicts whole."""


def merge_lines(base: Sequence[bytes], ours: Sequence[bytes], theirs: Sequence[bytes]) -> list[bytes] | None:
    """The merged lines, or None when a region was changed differently on both sides."""
    if max(len(base), len(ours), len(theirs)) > MAX_LINES:
        return None
    merged: list[bytes] = []
    b = o = t = 0
    for b_end, o_end, t_end, length in _sync_regions(base, ours, theirs):
        chunk = _region(base[b:b_end], ours[o:o_end], theirs[t:t_end])
        if chunk is None:
            return None
        merged += chunk
        merged += base[b_end : b_end + length]
        b, o, t = b_end + length, o_end + length, t_end + length
    return merged


def merge_text(base: bytes, ours: bytes, theirs: bytes) -> bytes | None:
    """merge_lines on whole files' bytes (lines keep their endings)."""
    lines = merge_lines(
        base.splitlines(keepends=True), ours.splitlines(keepends=True), theirs.splitlines(keepends=True)
    )
    return None if lines is None else b"".join(lines)


def _region(base: Sequence[bytes], ours: Sequence[bytes], theirs: Sequence[bytes]) -> list[bytes] | None:
    if list(ours) == list(base):
        return list(theirs)
    if list(theirs) == list(base) or list(ours) == list(theirs):
        return list(ours)
    return None


def _sync_regions(
    base: Sequence[bytes], ours: Sequence[bytes], theirs: Sequence[bytes]
) -> list[tuple[int, int, int, int]]:
    """(base start, ours start, theirs start, length) of the runs of base lines both sides kept, in
    order, ending with an empty run at the three ends."""
    with_ours = SequenceMatcher(None, base, ours, autojunk=False).get_matching_blocks()
    with_theirs = SequenceMatcher(None, base, theirs, autojunk=False).get_matching_blocks()
    regions: list[tuple[int, int, int, int]] = []
    i = j = 0
    while i < len(with_ours) and j < len(with_theirs):
        a_base, a_other, a_len = with_ours[i]
        b_base, b_other, b_len = with_theirs[j]
        start = max(a_base, b_base)
        end = min(a_base + a_len, b_base + b_len)
        if start < end:
            regions.append((start, a_other + (start - a_base), b_other + (start - b_base), end - start))
        if a_base + a_len < b_base + b_len:
            i += 1
        else:
            j += 1
    regions = [r for r in regions if r[3] > 0]
    regions.append((len(base), len(ours), len(theirs), 0))
    return regions
