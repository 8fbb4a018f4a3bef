"""Crash-safe files for session state: atomic JSON documents and an append-only JSONL log.

A document is written temp + fsync + rename (+ fsync of the directory), so readers see the old
or the new version, never a mix. The log is appended one fsynced line at a time; its reader
ignores a torn last line, and the next append cuts that torn tail off first.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_text_atomic(path: Path, text: str) -> None:
    """Replace path atomically with text: temp file, fsync, rename, fsync the directory."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def write_json(path: Path, data: Any) -> None:
    """Replace path atomically with data as JSON."""
    write_text_atomic(path, json.dumps(data, indent=1, sort_keys=True))


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def read_lines(path: Path) -> list[dict[str, Any]]:
    """Every complete record of a JSONL log; a torn or garbled last line is ignored."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    lines = raw.split(b"\n")
    records = []
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if index >= len(lines) - 2 and not raw.endswith(b"\n"):
                break  # torn tail of a crashed append
            raise
    return records


def append_line(path: Path, record: dict[str, Any]) -> None:
    """Append one record durably, cutting off a torn tail left by a crash first."""
    path = Path(path)
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    with open(path, "ab+") as handle:
        size = handle.seek(0, os.SEEK_END)
        if size:
            handle.seek(max(0, size - (1 << 16)))
            tail = handle.read()
            if not tail.endswith(b"\n"):
                cut = size - len(tail) + tail.rfind(b"\n") + 1
                handle.truncate(cut)
        handle.seek(0, os.SEEK_END)
        handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())
