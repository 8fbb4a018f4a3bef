"""`harness apply SESSION|BATCH_DIR`: land changes as branches of the original repository (see
harness.landing). Exit codes: 0 every chosen change landed; 64 one could not (the line says why, and
nothing of it was written); 66 no such session or batch directory."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from harness.cli import environment
from harness.cli.app import ExitCode, app, console, err_console, fail, reported


@app.command("apply")
def apply_command(
    target: str = typer.Argument(..., metavar="SESSION|BATCH_DIR", help="A session id, or a batch directory."),
    branch: str | None = typer.Option(None, "--branch", help="The new branch (a session; default harness/<id>)."),
    branch_prefix: str = typer.Option("harness", "--branch-prefix", help="A batch: prefix/<task>/<model>[-run]."),
    only: str = typer.Option(
        "verified",
        "--only",
        help="A batch: which task-runs land: verified, completed, or accepted (marked in the served report).",
    ),
    pick: list[str] = typer.Option([], "--pick", help="A batch: only these task ids or session ids (repeatable)."),
    onto: str | None = typer.Option(
        None, "--onto", help="Land on this ref instead of the commit the session started from (a three-way merge)."
    ),
    force: bool = typer.Option(False, "--force", help="Replace a branch of that name if harness made it."),
    combine: bool = typer.Option(
        False,
        "--combine",
        help="A batch: one branch (--branch, default harness/combined) stacking the changes that do not conflict.",
    ),
    repo: Path | None = typer.Option(
        None,
        "--repo",
        help="The repository to write (default: the one each session was made from, or its task was mined from).",
    ),
    state: Path | None = typer.Option(None, "--state-dir", help="Where sessions live."),
    json_out: bool = typer.Option(False, "--json", help="One JSON object per landed change."),
) -> None:
    """Each change as one commit on a new branch (parent: the commit the session started from); only new
    objects and a new ref are written: no git binary, no hook, filter, attribute or config of the
    repository, its working tree, index and current branch untouched."""
    from harness.landing.land import apply_batch, apply_session, combine_batch

    if only not in ("verified", "completed", "accepted"):
        fail(f"--only {only!r}: verified, completed or accepted", ExitCode.USAGE)
    folder = Path(target)
    with reported():
        if (folder / "runs").is_dir() and (folder / "sessions").is_dir() and combine:
            name = branch or "harness/combined"
            landed, skipped = combine_batch(folder, name, only=only, pick=pick, onto=onto, force=force, repo=repo)
        elif (folder / "runs").is_dir() and (folder / "sessions").is_dir():
            landed, skipped = apply_batch(
                folder, prefix=branch_prefix, only=only, pick=pick, onto=onto, force=force, repo=repo
            )
        else:
            if combine:
                fail("--combine is for a batch directory", ExitCode.USAGE)
            where, ident = environment.session_at(state, target)
            session = where / ident
            if not session.is_dir():
                fail(f"no session {target} in {session.parent} and no batch directory {target}", ExitCode.NOT_FOUND)
            landed = [apply_session(session, branch or f"harness/{ident}", onto=onto, force=force, repo=repo)]
            skipped = []
    for done in landed:
        if json_out:
            print(json.dumps(done.__dict__))
        else:
            console.print(
                f"{done.session_id}: branch {done.branch} at {done.commit[:12]} (parent {done.parent[:12]}, "
                f"{done.files} file(s)) in {done.repo}",
                markup=False,
                soft_wrap=True,
            )
    for session_id, why in skipped:
        err_console.print(f"{session_id}: not landed: {why}", markup=False, soft_wrap=True)
    left_out = [why for _, why in skipped if not why.startswith(("not verified", "not completed", "not accepted"))]
    if left_out and not (combine and landed):  # --combine leaves out what conflicts by design
        raise typer.Exit(int(ExitCode.USAGE))
