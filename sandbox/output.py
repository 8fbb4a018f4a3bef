"""Bounded head+tail capture of a byte stream (pure: no I/O).

A command may write gigabytes; the controller keeps at most `cap` bytes of it (the first half and the
last half) and counts the rest, so memory stays bounded no matter how much is fed.
"""

from __future__ import annotations


def drop_marker(dropped: int) -> str:
    """The exact text put between head and tail when bytes were dropped."""
    return f"\n[... {dropped} bytes dropped ...]\n"


class CappedOutput:
    """Keeps the first cap//2 and the last cap - cap//2 bytes fed; counts everything."""

    def __init__(self, cap: int) -> None:
        if cap < 2:
            raise ValueError("cap must be at least 2 bytes")
        self._head_cap = cap // 2
        self._tail_cap = cap - self._head_cap
        self._head = bytearray()
        self._tail = bytearray()
        self.total = 0
        """Bytes fed so far."""

    def feed(self, data: bytes) -> None:
        """Add a chunk of output."""
        if not data:
            return
        self.total += len(data)
        room = self._head_cap - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        if not data:
            return
        if len(data) >= self._tail_cap:
            self._tail = bytearray(data[-self._tail_cap :])
            return
        self._tail += data
        excess = len(self._tail) - self._tail_cap
        if excess > 0:
            del self._tail[:excess]

    @property
    def dropped(self) -> int:
        """Bytes fed but not kept."""
        return self.total - len(self._head) - len(self._tail)

    @property
    def truncated(self) -> bool:
        """True when anything was dropped."""
        return self.dropped > 0

    def bytes(self) -> bytes:
        """Kept bytes without a marker (head followed by tail)."""
        return bytes(self._head) + bytes(self._tail)

    def text(self) -> str:
        """Decoded output; when bytes were dropped, an exact marker sits between head and tail."""
        head = self._head.decode("utf-8", errors="replace")
        tail = self._tail.decode("utf-8", errors="replace")
        if self.dropped:
            return head + drop_marker(self.dropped) + tail
        return head + tail
