"""The `harness` command line. The CLI layer is the only place that reads environment variables,
prints, and wires components together; each command group lives in its own module.

`main` first offers the command to `quick` (a one-shot `harness exec` the warm service can answer,
without importing typer, rich or the docker SDK); everything else loads the full command line.
"""

from __future__ import annotations

import sys
from typing import Any

COMMAND_MODULES = (
    "apply_cmds",
    "batch_cmds",
    "bench_cmds",
    "model_cmds",
    "report_cmds",
    "run_cmds",
    "sandbox_cmds",
    "session_cmds",
    "tasks_cmds",
    "tool_cmds",
    "warm_cmds",
)
"""Importing a command module registers its commands on `app` / `bench_app`."""


def _load() -> Any:
    import importlib

    for name in COMMAND_MODULES:
        importlib.import_module(f"harness.cli.{name}")
    module = importlib.import_module("harness.cli.app")
    # As before: `harness.cli.app` names the Typer object (the submodule stays in sys.modules).
    globals().update(app=module.app, bench_app=module.bench_app)
    return module


def main() -> None:
    """Console-script entry."""
    from harness.cli import quick

    code = quick.run(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    _load().main()


def __getattr__(name: str) -> Any:
    if name in ("app", "bench_app"):  # the Typer objects, every command registered
        return getattr(_load(), name)
    raise AttributeError(f"module 'harness.cli' has no attribute {name!r}")
