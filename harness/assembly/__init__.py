"""The composition root: the one place that builds sandboxes, sessions, providers, tool contexts and
agents from a `RunConfig`.

Every entry point calls these functions: `harness run`, `resume`, `replay`, `harness tool`, the
benches, the public API (`harness.api`) and the batch worker. Nothing here reads the environment or
prints: what comes from outside the config (the run id, the engine address, the API key, the
endpoint fallback, the crash hook) arrives in a `Runtime` that the caller fills in.

The root owns two doors beside `runs`: `engine` (every engine connection, the one way a
DockerSandbox is made, images, prunes) and `sessions` (sessions outside a run: list, remove, `harness
exec --session`, the integrations' box). Runs are in `runs`, side by side (STYLE.md 14); each
function is a few lines.

The package names `runs`' functions without importing it until one is used: `harness session list`,
`show` and `diff` reach `sessions` without loading the agent, the tools and the providers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harness.assembly.runs import *  # noqa: F403


def __getattr__(name: str) -> Any:
    import importlib

    if name in ("engine", "runs", "sessions") or name.startswith("__"):
        # a submodule not imported yet (`from harness.assembly import engine` asks here first): no
        # such attribute, so the import system loads the submodule itself
        raise AttributeError(name)

    runs = importlib.import_module("harness.assembly.runs")  # not `from . import`: that asks this hook
    try:
        return getattr(runs, name)
    except AttributeError:
        raise AttributeError(f"module 'harness.assembly' has no attribute {name!r}") from None
