"""Real API responses recorded by other projects' public test suites, read from `shared/recordings/`
beside the checkout (never copied into the repository), replayed by the wire server."""

from __future__ import annotations

import gzip
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.providers.wire_server import Reply

FOLDER = Path(__file__).resolve().parents[3] / "shared" / "recordings"


@dataclass(frozen=True)
class Recording:
    """One recorded answer: its manifest (status, headers, the request recorded with it) and body."""

    name: str
    meta: dict[str, Any]
    body: bytes

    def reply(self) -> Reply:
        """The answer as recorded: status, content type and encoding, the exact bytes."""
        headers = {key.lower(): value for key, value in self.meta.get("headers", {}).items()}
        return Reply(status=int(self.meta["status"]), headers=headers, body=self.body)

    @property
    def request(self) -> dict[str, Any]:
        """The JSON body of the request recorded with the answer."""
        return self.meta["request"]["json"]

    def decoded(self) -> Any:
        """The body as JSON (gunzipped where it was recorded gzip-encoded)."""
        raw = (
            gzip.decompress(self.body) if self.meta.get("headers", {}).get("content-encoding") == "gzip" else self.body
        )
        return json.loads(raw)


def recording(name: str) -> Recording:
    """The recording `name`; a missing folder fails in CI (it is always there) and skips elsewhere."""
    meta_path = FOLDER / f"{name}.json"
    if not meta_path.is_file():
        message = f"recording {name} not found in {FOLDER} (shared/ beside the checkout)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return Recording(name, json.loads(meta_path.read_text()), (FOLDER / f"{name}.body").read_bytes())
