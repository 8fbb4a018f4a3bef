"""`harness env serve`: harness as an environment trainers drive over OpenEnv's protocol
(harness.rollouts.server)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from harness.cli import environment
from harness.cli.app import ALLOW_NET, ExitCode, app, err_console, fail, group, reported, state_dir

env_app = group("harness as an environment trainers drive (OpenEnv's protocol; docs/rollouts.md).")
app.add_typer(env_app, name="env")


@env_app.command("serve")
def serve(
    source: Path = typer.Argument(
        ..., metavar="TASKS_FILE|REPO", help="A tasks file (each entry a task to reset to), or one repository."
    ),
    task: str | None = typer.Option(None, "--task", help="With a repository: what its episodes are to do."),
    image: str | None = typer.Option(None, "--image", help="With a repository: sandbox image (default py311)."),
    verify: str | None = typer.Option(
        None, "--verify", help="With a repository: the command whose pass is reward 1 (default: detected)."
    ),
    setup: list[str] | None = typer.Option(None, "--setup", help="With a repository: setup command (repeatable)."),
    allow_net: list[str] | None = ALLOW_NET,
    max_steps: int | None = typer.Option(None, "--max-steps", help="Tool calls an episode may make (default 200)."),
    http: str = typer.Option(
        "127.0.0.1:0", "--http", metavar="127.0.0.1:PORT", help="Where to listen (PORT 0: any free one)."
    ),
    state_dir_opt: Path | None = typer.Option(None, "--state-dir", help="Where the episodes' sessions live."),
    config_file: Path | None = typer.Option(None, "--config", help="Config file (default: the per-user config.toml)."),
) -> None:
    """Serve episodes of a task to OpenEnv clients (openenv-core's own works unchanged) on 127.0.0.1: a
    reset makes a session of the task, each step is one tool call in a fresh container, `submit` ends
    the episode with the reward from verification. Prints the URL to give the client: the token that
    keeps others out is part of it. Every episode is a session afterwards (`harness show`, `view`)."""
    from harness.assembly import served
    from harness.assembly.runtime import Runtime
    from harness.cli.failure import sigterm_interrupts
    from harness.config import RunConfig, load_config
    from harness.rollouts.server import Environments, EnvTask, episode_config, serve, tasks_of_file

    sessions = state_dir(state_dir_opt)
    with reported():
        address = served.loopback(http)
        if source.is_dir():
            if not task:
                fail("a repository is served with --task TEXT (or give a tasks file)", ExitCode.USAGE)
            overrides: dict[str, Any] = {
                "image": image,
                "verify": verify,
                "setup": setup or None,
                "allow_net": allow_net or None,
                "limits.max_steps": max_steps,
            }
            config = load_config(config_file, overrides, repo=source)
            tasks = [
                EnvTask(source.name or "task", source.resolve(), task, episode_config(config, source, bool(max_steps)))
            ]
        elif source.is_file():
            given = [name for name, value in (("--task", task), ("--image", image), ("--verify", verify)) if value]
            if given or setup:
                fail(f"{', '.join(given) or '--setup'}: a tasks file says these per task", ExitCode.USAGE)
            tasks = tasks_of_file(source, sessions, max_steps)
        else:
            fail(f"no tasks file or repository at {source}", ExitCode.NOT_FOUND)

        def runtime_of(config: RunConfig) -> Runtime:
            return environment.runtime(config, interactive=False, spans=None)

        environments = Environments(tasks, sessions, runtime_of)

        def listening(url: str) -> None:
            print(json.dumps({"url": url, "tasks": [t.id for t in tasks]}), flush=True)
            err_console.print(
                f"harness env: {len(tasks)} task(s) at {url} (give the client this URL: the token is in it)",
                markup=False,
                soft_wrap=True,
            )

        try:
            with sigterm_interrupts():
                serve(environments, address, listening)
        except KeyboardInterrupt:
            pass
    err_console.print(f"harness env: stopped after {len(environments.episodes)} episode(s)", markup=False)
