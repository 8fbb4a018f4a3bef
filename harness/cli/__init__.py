"""The `harness` command line. The CLI layer is the only place that reads environment variables,
prints, and wires components together; each command group lives in its own module.

`main` first offers the command to `quick` (a one-shot `harness exec` the warm service can answer,
without importing typer, rich or the docker SDK) or to `reads` (`show`, `session list`, `diff`,
`export`, `report` without typer or pydantic models); everything else loads the full command line.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing's, without importing it (the quick paths start here)
if TYPE_CHECKING:
    from typing import Any

MODULE_OF = {
    "acp": "serve_cmds",
    "apply": "apply_cmds",
    "batch": "batch_cmds",
    "fork": "batch_cmds",
    "worker": "batch_cmds",
    "approvals": "batch_cmds",
    "bench": "bench_cmds",
    "env": "env_cmds",
    "mcp": "serve_cmds",
    "models": "model_cmds",
    "report": "report_cmds",
    "view": "report_cmds",
    "run": "run_cmds",
    "resume": "run_cmds",
    "show": "run_cmds",
    "replay": "run_cmds",
    "exec": "sandbox_cmds",
    "doctor": "sandbox_cmds",
    "images": "sandbox_cmds",
    "sandbox": "sandbox_cmds",
    "diff": "session_cmds",
    "rollback": "session_cmds",
    "export": "session_cmds",
    "session": "session_cmds",
    "tasks": "tasks_cmds",
    "tool": "tool_cmds",
    "tools": "tool_cmds",
    "warm": "warm_cmds",
}
"""The module that registers each top-level command or group (a test keeps this whole): a command
line loads only its command's module, so typer builds that module's commands, not all of them."""

COMMAND_MODULES = tuple(sorted(set(MODULE_OF.values())))
"""Importing a command module registers its commands on `app` / `bench_app`."""


def _load(command: str | None = None) -> Any:
    import importlib

    everything = command not in MODULE_OF
    for name in COMMAND_MODULES if everything else [MODULE_OF[str(command)]]:
        importlib.import_module(f"harness.cli.{name}")
    module = importlib.import_module("harness.cli.app")
    if everything:  # as before: `harness.cli.app` names the Typer object with every command on it
        globals().update(app=module.app, bench_app=module.bench_app)
    return module


def typer_app() -> Any:
    """The Typer application with every command registered. `harness.cli.app` names it too, until
    something imports the module `harness.cli.app` (Python then sets the package's `app` to the
    module): code that must get the application, a test's CliRunner, asks here."""
    return _load().app


def main() -> None:
    """Console-script entry."""
    if sys.argv[1:2] in (["exec"], ["--version"]):  # the only forms quick may take: others skip its imports
        from harness.cli import quick

        code = quick.run(sys.argv[1:])
        if code is not None:
            sys.exit(code)
    if sys.argv[1:2] in (["show"], ["session"], ["diff"], ["export"], ["report"]):  # plain reads: no typer, no models
        from harness.cli import reads

        code = reads.run(sys.argv[1:])
        if code is not None:
            sys.exit(code)
    # the command's module alone (help, a typo, an option first: every module, for typer to list them)
    first = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else None
    _load(first).main()


def __getattr__(name: str) -> Any:
    if name in ("app", "bench_app"):  # the Typer objects, every command registered
        return getattr(_load(), name)
    raise AttributeError(f"module 'harness.cli' has no attribute {name!r}")
