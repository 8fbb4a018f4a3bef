"""Crash-safe files for session state: atomic JSON documents and an append-only JSONL log.

A document is written temp + fsync + rename (+ fsync of the directory), so readers see the old
or the new version, never a mix. The log is appended one fsynced line at a time; its reader
ignores a torn last line, and the next append cuts that torn tail off first.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox.errors import at_path


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
    try:
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except OSError as error:
        tmp.unlink(missing_ok=True)  # a failed write (disk full, I/O error) leaves the old file and no debris
        raise at_path(error, path) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def write_json(path: Path, data: Any) -> None:
    """Replace path atomically with data as JSON."""
    write_text_atomic(path, json.dumps(data, indent=1, sort_keys=True))


def read_json(path: Path) -> Any:
    """A JSON document; ValueError naming the file when it is not valid UTF-8 JSON (torn or damaged)."""
    raw = Path(path).read_bytes()
    try:
        return json.loads(raw.decode("utf-8"))
    except ValueError as error:  # UnicodeDecodeError and JSONDecodeError both
        raise ValueError(f"{path} is damaged ({len(raw)} bytes, {type(error).__name__}: {error})") from None


def read_lines(path: Path) -> list[dict[str, Any]]:
    """Every complete record of a JSONL log; a torn or garbled last line is ignored."""
    return read_log(path).records


@dataclass(frozen=True)
class Log:
    """What a JSONL log holds: its complete records, and the torn last line a crash left, if any."""

    records: list[Any]
    torn: bytes = b""
    """The bytes of an unfinished last line (cut anywhere, inside a UTF-8 sequence too)."""


def read_log(path: Path) -> Log:
    """Split on bytes, decode per line: a tear anywhere in the last line (a crash mid-write) drops
    only that line, and says so; a bad line before it is damage, reported as ValueError."""
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        return Log([])
    lines = raw.split(b"\n")
    records = []
    for index, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line.decode("utf-8")))
        except ValueError as error:  # invalid JSON or a UTF-8 sequence cut short
            if index == len(lines) - 1:  # no newline after it: the torn tail of a crashed append
                return Log(records, line)
            raise ValueError(f"{path}: line {index + 1} is damaged ({error})") from None
    return Log(records)


def append_line(path: Path, record: dict[str, Any]) -> None:
    """Append one record durably, cutting off a torn tail left by a crash first."""
    path = Path(path)
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    try:
        _append(path, line)
    except OSError as error:
        raise at_path(error, path) from None


def _append(path: Path, line: bytes) -> None:
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
