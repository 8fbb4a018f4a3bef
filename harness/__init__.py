"""harness: run an LLM coding agent on a repository you do not trust, every tool call in a
disposable hardened container.

The public API is `harness.run`, `harness.resume` and `harness.replay` (see `harness.api`), plus
the types they return. They are loaded on first use, so `import harness` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.api import replay, resume, run
    from harness.config import RunConfig
    from harness.outcome import RunResult

__all__ = ["RunConfig", "RunResult", "replay", "resume", "run"]

_WHERE = {
    "run": "harness.api",
    "resume": "harness.api",
    "replay": "harness.api",
    "RunConfig": "harness.config",
    "RunResult": "harness.outcome",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")
