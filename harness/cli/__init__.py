"""The `harness` command line. The CLI layer is the only place that reads environment variables,
prints, and wires components together; each command group lives in its own module."""

from __future__ import annotations

# Importing the command modules registers their commands on `app` / `bench_app`.
from harness.cli import (  # noqa: F401
    batch_cmds,
    bench_cmds,
    model_cmds,
    report_cmds,
    run_cmds,
    sandbox_cmds,
    session_cmds,
    tasks_cmds,
    tool_cmds,
)
from harness.cli.app import app, bench_app, main  # noqa: F401
