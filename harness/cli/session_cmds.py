"""`harness session list|show|rm`, `harness diff`, `harness rollback`, `harness export`, `bench snapshot`."""

from __future__ import annotations

import contextlib
import datetime
import json
from pathlib import Path
from typing import Iterator, Optional

import typer
from rich.table import Table

from harness.cli.app import ExitCode, app, bench_app, console, docker_host, err_console, fail, reported, state_dir
from sandbox.errors import EngineUnavailable

session_app = typer.Typer(help="List, show and remove sessions.", no_args_is_help=True)
app.add_typer(session_app, name="session")

_STATE = typer.Option(None, "--state-dir", help="Where sessions live (default: $HARNESS_STATE_DIR or the per-user data dir).")


@contextlib.contextmanager
def _opened(state: Optional[Path], session_id: str) -> Iterator:
    from sandbox.session import Session

    with reported():  # StepOutOfRange is a usage error (64), an unknown session 66: see exit_code_for
        session = Session.open(state_dir(state), session_id)
        with session:
            yield session


def _when(stamp: float) -> str:
    return datetime.datetime.fromtimestamp(stamp).strftime("%Y-%m-%d %H:%M:%S")


@session_app.command("list")
def session_list(state: Optional[Path] = _STATE, as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Sessions in the state directory, oldest first."""
    from sandbox.session import list_sessions

    infos = list_sessions(state_dir(state))
    if as_json:
        print(json.dumps([info.model_dump(mode="json") for info in infos]))
        return
    table = Table("session", "created", "repository", "setup")
    for info in infos:
        table.add_row(info.id, _when(info.created), info.repo, "cached" if info.setup and info.setup.cached
                      else "yes" if info.setup else "-")
    console.print(table)


@session_app.command("show")
def session_show(session_id: str = typer.Argument(..., metavar="SESSION"), state: Optional[Path] = _STATE,
                 as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Steps of one session: tree, image, time, note."""
    with _opened(state, session_id) as session:
        if as_json:
            print(json.dumps({"session": session.info.model_dump(mode="json"),
                              "steps": [r.model_dump() for r in session.records]}))
            return
        console.print(f"session {session.id}  repository {session.repo}  workspace {session.workspace}")
        if session.info.setup:
            setup = session.info.setup
            console.print(f"setup: {len(session.config.setup)} command(s), network {setup.network_mode}, "
                          f"{'cached' if setup.cached else 'built'} image {setup.image[:19]}")
        table = Table("step", "kind", "time", "tree", "image", "note")
        for record in session.records:
            table.add_row(str(record.step), record.kind, _when(record.time), record.tree[:12],
                          record.image.removeprefix("sha256:")[:12], record.note)
        console.print(table)


@session_app.command("rm")
def session_rm(session_id: str = typer.Argument(..., metavar="SESSION"), state: Optional[Path] = _STATE) -> None:
    """Delete a session: its workspace, snapshots and the images its steps committed."""
    from sandbox.docker import connect

    with _opened(state, session_id) as session:
        try:
            client = connect(docker_host())
        except EngineUnavailable as error:
            client = None
            err_console.print(f"[yellow]warning:[/] images not removed ({error}); `harness sandbox prune` finds them later",
                              soft_wrap=True)
        session.delete(client)
    console.print(f"removed session {session_id}")


@app.command("diff")
def diff_command(session_id: str = typer.Argument(..., metavar="SESSION"),
                 from_step: int = typer.Option(0, "--from", help="Older step [default: 0, the import]."),
                 to_step: Optional[int] = typer.Option(None, "--to", help="Newer step [default: the latest]."),
                 state: Optional[Path] = _STATE,
                 as_json: bool = typer.Option(False, "--json", help="Print the changes as JSON.")) -> None:
    """Unified diff of the workspace between two steps, then binary and mode changes."""
    with _opened(state, session_id) as session:
        result = session.diff(from_step, to_step)
    if as_json:
        print(json.dumps({"changes": [c.model_dump() for c in result.changes], "text": result.text}))
        return
    console.out(result.text.rstrip("\n"), highlight=False) if result.text else None
    for path in result.binary:
        console.print(f"binary: {path}")
    for change in result.mode_changes:
        console.print(f"mode: {change.path} {change.old_mode:o} -> {change.new_mode:o}")
    for change in result.changes:
        if change.path.endswith("/") and change.kind in ("added", "deleted"):
            console.print(f"empty directory {change.kind}: {change.path}")


@app.command("rollback")
def rollback_command(session_id: str = typer.Argument(..., metavar="SESSION"),
                     to: int = typer.Option(..., "--to", help="Step to restore (workspace and image)."),
                     state: Optional[Path] = _STATE) -> None:
    """Restore the workspace and image of step N; the next step continues from there."""
    with _opened(state, session_id) as session:
        record = session.rollback(to)
    console.print(f"session {session_id}: step {record.step} restores step {to} (image {record.image[:19]})")


@app.command("export")
def export_command(session_id: str = typer.Argument(..., metavar="SESSION"),
                   output: Optional[Path] = typer.Option(None, "-o", "--output", help="Write the patch here (default: stdout)."),
                   check: bool = typer.Option(True, "--check/--no-check", help="Verify it applies to the original repository."),
                   state: Optional[Path] = _STATE) -> None:
    """The session's change as a patch for `git apply` on the original repository."""
    with _opened(state, session_id) as session:
        patch = session.export_patch()
        if output is not None:
            output.write_bytes(patch.encode("utf-8", "surrogateescape"))  # written even if it conflicts
        if check:
            session.check_patch(patch)
    if output is None:
        typer.echo(patch, nl=False)
    else:
        err_console.print(f"wrote {output}")


@bench_app.command("snapshot")
def bench_snapshot(files: int = typer.Option(10_000, min=100, help="Files in the generated repository."),
                   steps: int = typer.Option(15, min=3, help="One-file-change steps measured."),
                   big: int = typer.Option(100_000, min=1000, help="Files in the scale case."),
                   as_json: bool = typer.Option(False, "--json", help="Print one JSON object.")) -> None:
    """Snapshot and rollback cost per step, incremental vs full, and 100k vs 10k files."""
    from sandbox import snapshot_bench

    result = snapshot_bench.run(files=files, steps=steps, big_files=big,
                                log=lambda line: err_console.print(f"[dim]{line}[/]"))
    if as_json:
        print(result.model_dump_json())
        return
    table = Table("measure", "value", "target", title=f"{result.files} files, {result.megabytes} MB, {result.steps} steps")
    table.add_row("first full snapshot", f"{result.full_snapshot_ms:.0f} ms", "")
    table.add_row("one-change snapshot (median)", f"{result.snapshot_ms:.1f} ms", "<= 100 ms")
    table.add_row("session step: snapshot + record (median)", f"{result.step_ms:.1f} ms", "")
    table.add_row("rollback one step (median)", f"{result.rollback_ms:.1f} ms", "<= 100 ms")
    table.add_row("one-change snapshot, stat walk (fresh process)", f"{result.walk_snapshot_ms:.0f} ms", "")
    table.add_row("incremental / full", f"{result.incremental_over_full:.3f}", "<= 0.2")
    table.add_row(f"{big} files / {files} files (one change)", f"{result.scale_100k_over_10k:.2f}", "<= 3")
    console.print(table)


def exec_in_session(path: Path, command: list[str], spec, *, session_id: str, state: Optional[Path],
                    setup: list[str], setup_network: bool, writable_root: bool, run_id: str):
    """`harness exec --session ID`: create the session from PATH (running --setup once) or continue
    it; run the command on its workspace and image; record the result as the next step."""
    from sandbox.docker import DockerSandbox, connect
    from sandbox.session import Session, SessionConfig
    from sandbox.setup import create_session

    sessions = state_dir(state)
    client = connect(docker_host())
    with DockerSandbox(client, run_id=run_id, pool_size=0, session_id=session_id, share_netns=False) as box:
        if (sessions / session_id / "session.json").exists():
            if setup or setup_network or writable_root:
                err_console.print(f"[yellow]note:[/] session {session_id} exists; --setup, --setup-network and "
                                  "--writable-root apply only when it is created", soft_wrap=True)
            session = Session.open(sessions, session_id)
        else:
            if setup_network and not setup:
                fail("--setup-network needs at least one --setup command", ExitCode.USAGE)
            config = SessionConfig(setup=setup, setup_network=setup_network, writable_root=writable_root)
            session = create_session(path, sessions, spec=spec, config=config, sandbox=box, session_id=session_id)
            err_console.print(f"created session {session.id} (step 0, image {session.image[:19]})")
        with session:
            session.attach_engine(client)
            envelope = box.run(command, workspace=session.workspace, spec=session.spec,
                               commit_changes=session.config.writable_root)
            record = session.commit_step(f"exec {' '.join(command)}"[:200], committed_image=envelope.committed_image)
            err_console.print(f"session {session.id}: step {record.step}"
                              + (f", image {record.image[:19]}" if envelope.committed_image else ""))
    return envelope
