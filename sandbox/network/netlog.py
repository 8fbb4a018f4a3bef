"""A session's network log (network.jsonl, one line per request through its egress proxy), read
without the proxy's own machinery: the views that show it import only this."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_log(path: Path) -> list[dict[str, Any]]:
    """The network log's records (a torn last line dropped)."""
    if not Path(path).is_file():
        return []
    records = []
    for line in Path(path).read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            found = json.loads(line)
        except ValueError:
            continue
        if isinstance(found, dict):
            records.append(found)
    return records
