"""harness: run an LLM coding agent on a repository you do not trust, every tool call in a
disposable hardened container.

The public API is `harness.run`, `harness.resume`, `harness.replay`, `harness.fork` and `harness.apply` (see
`harness.api`), plus the types they return. They are loaded on first use, so `import harness` stays cheap.

The folders are the layers, top down (an import-linter contract keeps the order): `cli/`, `bench/`,
`integrations/`, `api`, `landing/` (changes landed as branches), `history/` and `report/`, `batch/`, `assembly/` (the composition root),
`agent/` (the loop and what it decides with), `config`, `providers/`, `trajectory` and `steps`,
`tools/`, `policy/`, and the primitives `deadline`, `storage`, `errors`, `types`.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing's, without importing it: every command imports this package first
if TYPE_CHECKING:
    from typing import Any

    from harness.agent.outcome import RunResult
    from harness.api import apply, fork, replay, resume, run
    from harness.config import RunConfig

__all__ = ["RunConfig", "RunResult", "apply", "fork", "replay", "resume", "run"]

_WHERE = {
    "run": "harness.api",
    "resume": "harness.api",
    "replay": "harness.api",
    "apply": "harness.api",
    "fork": "harness.api",
    "RunConfig": "harness.config",
    "RunResult": "harness.agent.outcome",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'harness' has no attribute {name!r}")
