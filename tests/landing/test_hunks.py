"""Merging one text file by hunk: changes that neither overlap nor touch merge; the same lines
changed two ways do not; identical changes are taken once."""

from __future__ import annotations

from harness.landing.hunks import merge_text

BASE = b"".join(b"line %d\n" % n for n in range(1, 21))


def edit(text: bytes, number: int, new: bytes) -> bytes:
    lines = text.splitlines(keepends=True)
    lines[number - 1] = new
    return b"".join(lines)


def test_changes_apart_merge_and_the_same_lines_conflict() -> None:
    ours, theirs = edit(BASE, 3, b"ours\n"), edit(BASE, 15, b"theirs\n")
    merged = merge_text(BASE, ours, theirs)
    assert merged == edit(edit(BASE, 3, b"ours\n"), 15, b"theirs\n")
    assert merge_text(BASE, edit(BASE, 3, b"ours\n"), edit(BASE, 3, b"theirs\n")) is None
    assert merge_text(BASE, edit(BASE, 3, b"same\n"), edit(BASE, 3, b"same\n")) == edit(BASE, 3, b"same\n")
    assert merge_text(BASE, edit(BASE, 3, b"a\n"), edit(BASE, 4, b"b\n")) is None, "touching lines conflict, as git"
    added = merge_text(BASE, b"header\n" + BASE, BASE + b"footer\n")
    assert added == b"header\n" + BASE + b"footer\n"
    assert merge_text(BASE, BASE, BASE.replace(b"line 7\n", b"")) == BASE.replace(b"line 7\n", b"")
