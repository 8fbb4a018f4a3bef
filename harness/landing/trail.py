"""The record of what was applied from a session folder or a batch directory (`applied.jsonl`), read
without the landing machinery (dulwich, the merge): `harness show` prints it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TRAIL = "applied.jsonl"
"""One JSON line per landed change, in the session folder and the batch directory."""


def trail(folder: Path) -> list[dict[str, Any]]:
    """What was applied from a session folder (or a batch directory), oldest first."""
    path = Path(folder) / TRAIL
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []
