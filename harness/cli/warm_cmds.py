"""`harness warm start|serve|status|stop`: the warm service that takes the container start off a
one-shot `harness exec` (see `sandbox.warm`).

Exit codes: 0 done (also `start` with a service already running, and `status`/`stop` with none:
they say so); 64 bad flags, or `serve` with a service already running; 71 an image to keep warm is
missing; 125 no engine.
"""

from __future__ import annotations

import sys

import typer

from harness.cli import environment
from harness.cli.app import ExitCode, app, console, docker_host, fail, group, reported

warm_app = group("Keep sandbox containers started for one-shot `harness exec` (a resident service).")
app.add_typer(warm_app, name="warm")

IMAGES = typer.Option(["py311"], "--image", help="Image kept warm with the default limits (repeatable).")
PER_SPEC = typer.Option(
    2,
    "--per-spec",
    min=1,
    max=32,
    help="Ready containers per image and limits (a burst of calls at once wants as many).",
)
IDLE = typer.Option(900.0, "--idle", min=1.0, help="Seconds without a request after which the service exits.")
PER_RUN = typer.Option(
    6, "--per-run", min=0, max=16, help="Containers lent to a new `harness run` session (0: none are kept)."
)


@warm_app.command("start")
def start(image: list[str] = IMAGES, per_spec: int = PER_SPEC, idle: float = IDLE, per_run: int = PER_RUN) -> None:
    """Start the warm service in the background (one per user and engine) and wait until it answers."""
    from rich.markup import escape

    from harness.assembly import engine
    from sandbox.warm import daemon, protocol

    folder = environment.warm_dir()
    with reported():
        engine.check_images(docker_host(), image)
        try:
            running = protocol.status(folder)
        except protocol.Unavailable:
            running = None
        if running is not None:
            console.print(f"a warm service already runs for this engine (pid {running.pid})")
            return
        argv = [sys.executable, "-c", "from harness.cli import main; main()", "warm", "serve"]
        argv += [f"--image={name}" for name in image]
        argv += [f"--per-spec={per_spec}", f"--idle={idle:g}", f"--per-run={per_run}"]
        try:
            status = daemon.spawn(folder, argv, env=environment.warm_service_env())
        except RuntimeError as error:
            fail(f"the warm service did not start: {error}", ExitCode.SANDBOX)
    console.print(
        f"warm service running (pid {status.pid}, {', '.join(image)}; exits after {idle:g} s idle)", markup=False
    )
    console.print(f"[dim]{escape(str(folder))}[/]", soft_wrap=True)


@warm_app.command("serve")
def serve(image: list[str] = IMAGES, per_spec: int = PER_SPEC, idle: float = IDLE, per_run: int = PER_RUN) -> None:
    """Run the warm service in the foreground until it is idle, stopped or interrupted."""
    from harness.assembly import engine
    from sandbox.warm import daemon
    from sandbox.warm.service import WarmConfig

    folder = environment.warm_dir()
    with reported():
        engine.check_images(docker_host(), image)
        box = engine.one_shot_sandbox(docker_host(), environment.run_id("warm"))
        try:
            daemon.serve(
                folder,
                WarmConfig(images=image, per_spec=per_spec, idle_s=idle, per_run=per_run, runs=_default_runs(image)),
                box,
                ready=lambda: console.print(f"warm service serving at {folder}", soft_wrap=True, markup=False),
            )
        except daemon.AlreadyRunning as error:
            fail(str(error), ExitCode.USAGE)


@warm_app.command("status")
def status() -> None:
    """Whether a warm service runs for this engine, and what it has ready."""
    from sandbox.warm import protocol

    folder = environment.warm_dir()
    try:
        reply = protocol.status(folder)
    except protocol.Unavailable as why:
        console.print(f"no warm service: {why}", soft_wrap=True, markup=False)
        return
    ready = ", ".join(f"{image}: {count}" for image, count in reply.ready.items()) or "nothing yet"
    runs = reply.runs
    console.print(f"warm service running (pid {reply.pid}) at {folder}", soft_wrap=True, markup=False)
    console.print(f"one-shot containers ready: {ready}", soft_wrap=True)
    console.print(
        f"run slots: {runs.get('ready', 0)} ready, {runs.get('starting', 0)} starting, "
        f"{runs.get('out', 0)} lent now, {runs.get('lent', 0)} lent so far"
    )


@warm_app.command("stop")
def stop() -> None:
    """Stop the warm service for this engine; it removes every container it started."""
    from sandbox.warm import daemon

    stopped = daemon.stop(environment.warm_dir())
    console.print("warm service stopped" if stopped else "no warm service was running")


def _default_runs(images: list[str]) -> list[dict[str, object]]:
    """The run config a default `harness run --image NAME` on a repository with `tests/` asks for,
    per image (a request of another shape is kept warm after it is first asked for)."""
    import tempfile
    from pathlib import Path

    from harness.assembly import warm_run_request
    from harness.config import RunConfig

    with tempfile.TemporaryDirectory(prefix="harness-warm-shape-") as tmp:
        (Path(tmp) / "tests").mkdir()
        return [warm_run_request(RunConfig(image=name), Path(tmp)) for name in images]
