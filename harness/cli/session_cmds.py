"""`harness session list|show|rm`, `harness diff`, `harness rollback`, `harness export`, and the
session side of `harness exec --session`."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from harness.cli import environment
from harness.cli.app import ExitCode, app, console, docker_host, err_console, fail, group, reported, state_dir
from harness.cli.listing import when
from harness.cli.terminal import literal

if TYPE_CHECKING:
    from harness.assembly.sessions import ExecStep, Session, SessionConfig
    from harness.config import Devcontainer
    from harness.steps import StepMap
    from sandbox.spec import SandboxSpec

session_app = group("List, show and remove sessions.")
app.add_typer(session_app, name="session")

_STATE = typer.Option(
    None, "--state-dir", help="Where sessions live (default: $HARNESS_STATE_DIR or the per-user data dir)."
)


@contextlib.contextmanager
def _opened(state: Path | None, session_id: str) -> Iterator[Session]:
    from harness.assembly import sessions

    with reported():  # StepOutOfRange is a usage error (64), an unknown session 66: see exit_code_for
        where, session_id = environment.session_at(state, session_id)
        session = sessions.open_session(where, session_id)
        with session:
            yield session


@session_app.command("list")
def session_list(
    state: Path | None = _STATE,
    long: bool = typer.Option(False, "--long", "-l", help="Also each one's repository and where it came from."),
    outcome: str | None = typer.Option(
        None, "--outcome", metavar="OUTCOME",
        help="Only sessions of this outcome: verified, stuck, limit (any limit:...), no run, unfinished, ...",
    ),
    limit: int = typer.Option(0, "--limit", "-n", min=0, metavar="N", help="Only the newest N (0: all)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:  # fmt: skip
    """Sessions in the state directory, oldest first, one line each: when, the session, its outcome, model
    and task (never cut: a long line wraps)."""
    from harness.cli.listing import chosen, render_sessions

    if not as_json:
        render_sessions(console, state_dir(state), long=long, outcome=outcome, limit=limit or None)
        return
    from harness.assembly.sessions import list_sessions

    shown = {info["id"]: run for info, run in chosen(state_dir(state), outcome, limit or None).shown}
    infos = [info for info in list_sessions(state_dir(state)) if info.id in shown]
    print(json.dumps([{**info.model_dump(mode="json"), **shown[info.id]} for info in infos]))


@session_app.command("show")
def session_show(
    session_id: str = typer.Argument(..., metavar="SESSION"),
    state: Path | None = _STATE,
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """The states of one session: the steps whose state each snapshot holds, tree, image, time, note."""
    from rich.table import Table

    with _opened(state, session_id) as session:
        steps = _steps(session)
        if as_json:
            records = [{**r.model_dump(), "after_steps": steps.steps_at(r.step)} for r in session.records]
            print(json.dumps({"session": session.info.model_dump(mode="json"), "steps": records}))
            return
        console.print(f"session {session.id}  repository {session.repo}  workspace {session.workspace}", markup=False)
        if session.info.setup:
            setup = session.info.setup
            console.print(
                f"setup: {len(session.config.setup)} command(s), network {setup.network_mode}, "
                f"{'cached' if setup.cached else 'built'} image {setup.image[:19]}"
            )
        table = Table("after step", "kind", "time", "tree", "image", "note")
        for record in session.records:
            table.add_row(
                _step_range(steps.steps_at(record.step)),
                record.kind,
                when(record.time),
                record.tree[:12],
                record.image.removeprefix("sha256:")[:12],
                literal(_note(record, steps)),
            )
        console.print(table)
        if steps.has_run:
            console.print("[dim]steps as `harness show` numbers them: `diff` and `rollback --to N` take these[/]")
        _network_lines(session.dir)


def _network_lines(folder: Path) -> None:
    """The session's requests through its egress proxy, one line each (none without --allow-net)."""
    from harness.cli.run_view import folded, network_requests, target_of

    requests = network_requests(folder)
    if not requests:
        return
    refused = sum(1 for r in requests if not r.get("allowed"))
    console.print(f"network: {len(requests)} request(s), {refused} refused")
    for request in folded(requests):
        target = target_of(request)
        verdict = (
            "[green]allowed[/]"
            if request.get("allowed")
            else f"[red]refused[/] {literal(str(request.get('reason', '')))}"
        )
        console.print(f"  [dim]{when(float(request.get('ts', 0)))}[/] {target} {verdict}")


def _note(record: Any, steps: StepMap) -> str:
    """A snapshot's note in run steps (a rollback made before rollbacks said so named a snapshot)."""
    if record.kind == "rollback" and record.rolled_back_to is not None and record.note.startswith("rollback to step "):
        held = steps.steps_at(record.rolled_back_to)
        return f"rollback to the state after step {_step_range(held)}" if steps.has_run else record.note
    if record.kind == "step" and record.note.startswith("agent step "):
        return ""  # the "after step" column says it
    return record.note


def _steps(session: Session) -> StepMap:
    from harness.steps import StepMap

    return StepMap.of(session.dir, session.id, session.step)


def _step_range(steps: list[int]) -> str:
    if not steps:
        return "-"
    return str(steps[0]) if len(steps) == 1 else f"{steps[0]}-{steps[-1]}"


@session_app.command("rm")
def session_rm(session_id: str = typer.Argument(..., metavar="SESSION"), state: Path | None = _STATE) -> None:
    """Delete a session: its workspace, snapshots, the images its steps committed, its sub-agents'
    sessions and what a crashed controller of it left running; or the folder of a create a crash cut
    short."""
    from rich.markup import escape

    from harness.assembly.sessions import collect_objects, remove_cut_short, remove_session

    with reported():
        if remove_cut_short(state_dir(state), session_id):
            console.print(f"removed session {session_id} (its create was cut short: it never had a step)", markup=False)
            return
    with _opened(state, session_id) as session:
        removed = remove_session(session, docker_host())
        if removed.warning:
            err_console.print(f"[yellow]warning:[/] {escape(removed.warning)}", soft_wrap=True)
    console.print(f"removed session {session_id}", markup=False)
    if removed.branches:
        console.print(f"removed its sub-agents' sessions: {', '.join(removed.branches)}", markup=False)
    if removed.containers:
        console.print(f"removed {removed.containers} container(s) a crashed controller of it had left", markup=False)
    with reported():
        say_collected(collect_objects(state_dir(state)))


def say_collected(done: Any) -> None:
    """One line on what a collection of the shared object store freed (or why it did not run)."""
    if done is None:
        err_console.print("the object store is busy with running sessions: `harness sandbox prune` collects it later")
    elif done.refused:
        err_console.print(f"warning: {done.refused}", markup=False, soft_wrap=True)
    elif done.removed_objects or done.removed_large:
        console.print(
            f"object store: {done.removed_objects} object(s) and {done.removed_large} large file(s) no session "
            f"references removed, {done.freed_bytes / 1e6:.1f} MB freed ({done.sessions} session(s) kept whole)",
            markup=False,
        )


@app.command("diff")
def diff_command(
    session_id: str = typer.Argument(..., metavar="SESSION"),
    from_step: int = typer.Option(
        0, "--from", help="Older step, as `harness show` numbers them [default: 0, the import]."
    ),
    to_step: int | None = typer.Option(None, "--to", help="Newer step [default: the latest state]."),
    state: Path | None = _STATE,
    as_json: bool = typer.Option(False, "--json", help="Print the changes as JSON."),
) -> None:
    """Unified diff of the workspace between the states after two steps, then binary and mode changes."""
    from dataclasses import asdict

    from harness.cli import changes

    with reported():  # StepOutOfRange is a usage error (64), an unknown session 66: see exit_code_for
        result = changes.diff(*environment.session_at(state, session_id), from_step, to_step)
    if as_json:
        print(json.dumps({"changes": [asdict(c) for c in result.changes], "text": result.text}))
        return
    changes.print_diff(console, result)


@app.command("rollback")
def rollback_command(
    session_id: str = typer.Argument(..., metavar="SESSION"),
    to: int = typer.Option(..., "--to", help="Restore the state after this step (as `harness show` numbers them)."),
    state: Path | None = _STATE,
) -> None:
    """Restore the workspace and image as they were after step N (recorded as a new snapshot); a run's
    session goes on from there with `harness resume SESSION --follow-up TEXT`."""
    from harness.assembly.sessions import rolled_back

    with _opened(state, session_id) as session:
        snapshot = _steps(session).snapshot(to)
        record = session.rollback(snapshot, note=f"rollback to the state after step {to}")
        ran = rolled_back(session, to)
    going_on = (
        f"`harness resume {literal(session_id)} --follow-up TEXT` goes on from there; diff, export and apply take it"
        if ran
        else "the next step continues from there"
    )
    console.print(
        f"session {literal(session_id)}: restored the state after step {to} (image {record.image[:19]}); {going_on}"
    )


@app.command("export")
def export_command(
    target: str = typer.Argument(..., metavar="SESSION|BATCH_DIR"),
    output: Path | None = typer.Option(
        None, "-o", "--output", help="Write here (default: stdout); for a batch, the folder of its files."
    ),
    form: str = typer.Option(
        "patch",
        "--format",
        help="patch (for `git apply`), atif (the trajectory as ATIF JSON: Harbor, NeMo Relay) or rollout "
        "(tokens, log-probabilities and the reward in Harbor's shapes, for trainers).",
    ),
    check: bool = typer.Option(True, "--check/--no-check", help="Verify the patch applies to the original repository."),
    state: Path | None = _STATE,
) -> None:
    """The session's change as a patch for `git apply` on the original repository, or its trajectory as
    ATIF (`--format atif`; for a batch directory, one file per task-run in -o DIR)."""
    if form not in ("patch", "atif", "rollout"):
        fail(f"--format must be patch, atif or rollout, not {form!r}", ExitCode.USAGE)
    if form == "atif":
        _export_atif(target, output, state)
        return
    if form == "rollout":
        _export_rollout(target, output, state)
        return
    from harness.cli import changes

    with reported():
        patch = changes.export(*environment.session_at(state, target), output, check=check)
    if output is None:
        changes.print_patch(patch)
    else:
        changes.say_written(output)


def _export_rollout(target: str, output: Path | None, state: Path | None) -> None:
    from harness.rollouts.records import rollout

    with reported():
        where, session_id = environment.session_at(state, target)
        text = json.dumps(rollout(where / session_id), indent=1, ensure_ascii=False)
    if output is None:
        typer.echo(text)
    else:
        output.write_text(text + "\n", encoding="utf-8")
        err_console.print(f"wrote {output}", soft_wrap=True, markup=False)


def _export_atif(target: str, output: Path | None, state: Path | None) -> None:
    from harness.batch.records import BatchDir
    from harness.report import atif
    from harness.report.pages import session_dir

    with reported():
        batch = Path(target).expanduser()
        if (batch / "runs").is_dir():
            if output is None:
                fail("exporting a batch as ATIF needs -o DIR (one file per task-run)", ExitCode.USAGE)
            output.mkdir(parents=True, exist_ok=True)
            written = 0
            for record in BatchDir(batch).records():
                folder = session_dir(BatchDir(batch), record)
                if folder is None:
                    continue
                document = atif.to_atif(folder, _info(folder), _tools(folder))
                document["extra"]["task_run"] = {
                    "task_id": record.key.task_id, "model": record.key.model, "run_index": record.key.run_index,
                    "outcome": record.outcome, "verified": record.verified,
                }  # fmt: skip
                path = output / f"{record.key.session_id}.json"
                path.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
                written += 1
            err_console.print(f"wrote {written} ATIF trajectories to {output}", soft_wrap=True, markup=False)
            return
        folder = Path(target) if "/" in target or target.startswith(".") else state_dir(state) / target
        if not (folder / "trajectory.jsonl").is_file():
            fail(f"{target} is no session with a trajectory (see: harness session list) and no batch directory",
                 ExitCode.NOT_FOUND)  # fmt: skip
        text = json.dumps(atif.to_atif(folder, _info(folder), _tools(folder)), indent=1, ensure_ascii=False)
    if output is None:
        typer.echo(text)
    else:
        output.write_text(text + "\n", encoding="utf-8")
        err_console.print(f"wrote {output}", markup=False)


def _info(folder: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((folder / "session.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _tools(folder: Path) -> list[Any]:
    """The tool menu the session's model had (its saved config's registry), or [] when unreadable."""
    from harness import assembly
    from harness.errors import HarnessError

    try:
        return assembly.registry(assembly.saved_config(folder, {})).schemas()
    except (HarnessError, OSError, ValueError):
        return []


def session_config(
    path: Path, *, setup: list[str], writable_root: bool, **options: Any
) -> tuple[SessionConfig, Devcontainer | None]:
    """The config of a session `harness exec --session` creates (`--setup auto` expanded, said on
    stderr), and the repository's devcontainer when its setup is `devcontainer` (or `auto` and the
    repository declares one, as `harness run` reads it): its lifecycle commands in place of the word, its
    image built when the session is made; options: setup_network, setup_ca, setup_proxy, setup_mounts,
    allow_net, allow_net_tools, workspace_quota."""
    from pydantic import ValidationError

    from harness.assembly.sessions import session_config as config_of
    from harness.config import said
    from harness.environment.detect import expand_setup
    from harness.errors import UsageError
    from sandbox.settings import SessionSettings

    found = None
    from harness.assembly import DEVCONTAINER, declares_devcontainer

    if DEVCONTAINER in setup or ("auto" in setup and declares_devcontainer(path)):
        from harness.assembly import devcontainer_lines
        from harness.config import load_config
        from harness.environment.devcontainer import read

        found = read(path, load_config(None).devcontainer_features)
        if found.services:
            raise UsageError(
                f"{found.path} starts services ({', '.join(found.services)}): `harness exec` runs one command in "
                "one container; use `harness run` or a tasks file for a devcontainer with services"
            )
        setup = [part for word in setup for part in (found.commands if word in (DEVCONTAINER, "auto") else [word])]
        err_console.print(f"setup: devcontainer {found.path}", soft_wrap=True, markup=False)
        for line in devcontainer_lines(found):
            err_console.print(line, soft_wrap=True, markup=False)
    setup, why = expand_setup(setup, path)
    if why:
        err_console.print(f"setup: `{' && '.join(setup)}` (detected: {why})", soft_wrap=True, markup=False)
    try:
        settings = SessionSettings(setup=setup, **options)
    except ValidationError as error:
        raise UsageError(said(error, "flags")) from None
    return config_of(settings, writable_root=writable_root), found


def exec_in_session(
    path: Path,
    command: list[str],
    spec: SandboxSpec,
    *,
    session_id: str,
    state: Path | None,
    config: SessionConfig,
    run_id: str,
    devcontainer: Devcontainer | None = None,
) -> ExecStep:
    """`harness exec --session ID`: the command as the session's next step (the session made from
    PATH first when it does not exist, from its devcontainer's image when it has one), with what
    happened said on stderr."""
    from harness.assembly import bound_secrets
    from harness.assembly.sessions import exec_step
    from harness.cli.environment import secret_values

    secrets = bound_secrets(config.secrets, secret_values(config.secrets))
    done = exec_step(
        path,
        command,
        spec,
        session_id=session_id,
        sessions=state_dir(state),
        config=config,
        docker_host=docker_host(),
        run_id=run_id,
        secrets=secrets,
        devcontainer=devcontainer,
    )
    if done.settings_ignored:
        err_console.print(
            f"[yellow]note:[/] session {session_id} exists; the --setup options and "
            "--writable-root apply only when it is created",
            soft_wrap=True,
        )
    if done.created_image is not None:
        err_console.print(f"created session {done.session_id} (step 0, image {done.created_image[:19]})", markup=False)
    image = f", image {done.image[:19]}" if done.envelope.committed_image else ""
    err_console.print(f"session {done.session_id}: step {done.step}{image}", markup=False)
    return done
