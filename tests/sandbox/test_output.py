"""CappedOutput keeps head and tail, counts the rest, and stays bounded."""

from __future__ import annotations

import pytest

from sandbox.output import CappedOutput, drop_marker


def test_small_output_is_kept_whole() -> None:
    out = CappedOutput(16)
    out.feed(b"abc")
    out.feed(b"def")
    assert (out.text(), out.total, out.dropped, out.truncated) == ("abcdef", 6, 0, False)


def test_head_and_tail_kept_with_exact_marker() -> None:
    out = CappedOutput(10)
    for chunk in (b"01234", b"56789", b"abcdefghij", b"KLMNO"):
        out.feed(chunk)
    assert out.total == 25 and out.dropped == 15
    assert out.text() == "01234" + "\n[... 15 bytes dropped ...]\n" + "KLMNO"
    assert drop_marker(15) == "\n[... 15 bytes dropped ...]\n"


def test_one_huge_chunk_keeps_its_own_head_and_tail() -> None:
    out = CappedOutput(8)
    out.feed(b"H" * 4 + b"x" * 1000 + b"T" * 4)
    assert out.bytes() == b"HHHHTTTT" and out.dropped == 1000


def test_memory_stays_bounded_however_much_is_fed() -> None:
    out = CappedOutput(1024)
    chunk = bytes(range(256)) * 256
    for _ in range(2000):
        out.feed(chunk)
    assert len(out.bytes()) == 1024
    assert out.total == 2000 * len(chunk)


def test_invalid_utf8_is_replaced_not_raised() -> None:
    out = CappedOutput(64)
    out.feed(b"ok \xff\xfe")
    assert out.text().startswith("ok ")


def test_cap_must_be_positive() -> None:
    with pytest.raises(ValueError):
        CappedOutput(1)
