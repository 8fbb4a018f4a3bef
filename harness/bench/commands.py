"""`harness bench commands`: what a person reading a night's work waits for, per command, side by side.

The read commands (`--help`, `--version`, `session list`, `show`, `diff`, `export`, `report` of a small
batch) each as a fresh process of this interpreter, against two floors run in the same rounds:
- `python -c "import typer, rich, pydantic"` (the issue's yardstick: the libraries any such CLI loads);
- the same interpreter running a one-command typer app (`typer_app`): what any typer command line
  pays before its command runs (typer's parameter adapters import pydantic's model machinery, which
  the bare import leaves lazy), so no typer command can beat it.

The fixture is real: the offline example run once (scripted model, real sandbox) and a batch of two
task-runs of it, in a private state directory the bench removes at the end, with their containers.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pydantic import BaseModel

from harness.assembly.engine import prune_containers
from harness.bench.measure import CLI, Latency, cli_env, latency, ratio, run_checked, side_by_side
from harness.bench.run import EXAMPLE, TASK, VERIFY

BARE = "import typer, rich, pydantic"
TYPER_APP = (
    "import typer, rich, pydantic\n"
    "app = typer.Typer(add_completion=False)\n"
    "@app.command()\n"
    "def main(name: str = typer.Option('x')) -> None:\n"
    "    print(name)\n"
    "app(['--name', 'y'], standalone_mode=False)\n"
)


class CommandTime(BaseModel):
    """One command's latency and its ratios to the two floors."""

    command: str
    latency: Latency
    over_bare: float
    """Over `python -c "import typer, rich, pydantic"`. Target: at most 1.5."""
    over_typer_app: float
    """Over a one-command typer app (the floor of any typer command)."""


class CommandsBench(BaseModel):
    """Result of `harness bench commands`."""

    rounds: int
    bare: Latency
    typer_app: Latency
    typer_app_over_bare: float
    """The floor's own ratio: the best any typer command can reach against the bare import."""
    commands: list[CommandTime]


def _fixture(tmp: Path, env: dict[str, str]) -> tuple[str, Path]:
    """A session of the offline example and a batch of two task-runs: (session id, batch dir)."""
    import json

    import yaml

    repo = tmp / "calc"
    shutil.copytree(EXAMPLE / "calc", repo)
    script = f"scripted:{EXAMPLE / 'calc-fix.yaml'}"
    run_checked(
        [*CLI, "run", "--image", "py311", "--model", script, str(repo), "--task", TASK, "--verify", VERIFY, "--json"],
        env,
    )
    listed = subprocess.run([*CLI, "session", "list", "--json"], capture_output=True, env=env, check=True)
    session = json.loads(listed.stdout)[-1]["id"]
    tasks = tmp / "tasks.yaml"
    tasks.write_text(
        yaml.safe_dump(
            {
                "defaults": {"verify": VERIFY, "model": [script], "image": "py311"},
                "tasks": [{"id": f"calc-{n}", "repo": str(repo), "task": TASK} for n in range(2)],
            }
        )
    )
    batch = tmp / "batch"
    run_checked([*CLI, "batch", str(tasks), "--out", str(batch), "--workers", "2", "--json"], env)
    return str(session), batch


def measure(*, docker_host: str | None, run_id: str, rounds: int = 10) -> CommandsBench:
    """Build the fixture, then time every command and both floors `rounds` times, interleaved."""
    with tempfile.TemporaryDirectory(prefix="harness-bench-commands-") as name:
        tmp = Path(name)
        env = cli_env(HARNESS_RUN_ID=run_id, HARNESS_STATE_DIR=str(tmp / "state"))
        try:
            session, batch = _fixture(tmp, env)
            commands = {
                "--help": ["--help"],
                "--version": ["--version"],
                "session list": ["session", "list"],
                "show SESSION": ["show", session],
                "diff SESSION": ["diff", session],
                "export SESSION": ["export", session, "-o", str(tmp / "export.json")],
                "report BATCH": ["report", str(batch)],
            }
            sides = {"bare": lambda: run_checked([sys.executable, "-c", BARE], env)}
            sides["typer_app"] = lambda: run_checked([sys.executable, "-c", TYPER_APP], env)
            for label, argv in commands.items():
                sides[label] = lambda argv=argv: run_checked([*CLI, *argv], env)  # type: ignore[misc]
            samples = side_by_side(sides, rounds=rounds)
        finally:  # the runs close their containers; this is the backstop
            prune_containers(docker_host, everything=True, run_id=run_id)
    bare, floor = latency(samples["bare"]), latency(samples["typer_app"])
    return CommandsBench(
        rounds=rounds,
        bare=bare,
        typer_app=floor,
        typer_app_over_bare=ratio(floor.median_ms, bare.median_ms),
        commands=[
            CommandTime(
                command=label,
                latency=latency(samples[label]),
                over_bare=ratio(latency(samples[label]).median_ms, bare.median_ms),
                over_typer_app=ratio(latency(samples[label]).median_ms, floor.median_ms),
            )
            for label in commands
        ],
    )
