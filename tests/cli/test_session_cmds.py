"""The session commands through the real CLI (subprocess): output, one-line errors, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.docker.ids import present_images
from sandbox.session.session import Session
from sandbox.spec import SandboxSpec
from tests.cli_process import run_cli
from tests.sandbox.snapshot.snapshot_trees import make_repo

HARNESS = str(Path(sys.executable).parent / "harness")
pytestmark = pytest.mark.timeout(180)


def harness(*args: str, run_label: str = "session-cli-test") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HARNESS_RUN_ID": run_label, "COLUMNS": "200"}
    return run_cli(args, env=env, timeout=150, console=True)


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), done.stderr
    return lines[0]


@pytest.fixture()
def made(tmp_path: Path) -> tuple[Path, Path]:
    repo = make_repo(tmp_path / "repo")
    state = tmp_path / "state"
    with Session.create(repo, state, spec=SandboxSpec(), session_id="cli") as session:
        (session.workspace / "src" / "app.py").write_text("def f():\n    return 99\n")
        (session.workspace / "data.bin").write_bytes(b"\0\0")
        session.commit_step("edit")
        (session.workspace / "later.txt").write_text("later\n")
        session.commit_step("add")
    return repo, state


def test_list_show_diff_rollback_export(made: tuple[Path, Path], tmp_path: Path) -> None:
    repo, state = made
    sd = ["--state-dir", str(state)]
    listed = json.loads(harness("session", "list", "--json", *sd).stdout)
    assert [s["id"] for s in listed] == ["cli"]
    shown = json.loads(harness("session", "show", "cli", "--json", *sd).stdout)
    assert [s["step"] for s in shown["steps"]] == [0, 1, 2]
    diff = harness("diff", "cli", "--from", "0", "--to", "1", *sd)
    assert diff.returncode == 0 and "+    return 99" in diff.stdout and "binary: data.bin" in diff.stdout
    assert "later.txt" not in diff.stdout
    done = harness("rollback", "cli", "--to", "1", *sd)
    assert done.returncode == 0, done.stderr
    assert not (state / "cli" / "workspace" / "later.txt").exists()
    out = tmp_path / "change.patch"
    done = harness("export", "cli", "-o", str(out), *sd)
    assert done.returncode == 0, done.stderr
    copy = tmp_path / "copy"
    subprocess.run(["cp", "-a", str(repo), str(copy)], check=True)
    applied = subprocess.run(["git", "apply", str(out)], cwd=copy, capture_output=True, text=True)
    assert applied.returncode == 0, applied.stderr
    assert (copy / "src" / "app.py").read_text() == "def f():\n    return 99\n"
    assert (copy / "data.bin").read_bytes() == b"\0\0"


def test_errors_are_one_line_with_distinct_codes_and_lose_nothing(made: tuple[Path, Path], tmp_path: Path) -> None:
    repo, state = made
    sd = ["--state-dir", str(state)]
    unknown = harness("rollback", "nope", "--to", "0", *sd)
    assert unknown.returncode == 66 and "no session" in one_line_error(unknown)
    out_of_range = harness("rollback", "cli", "--to", "9", *sd)
    assert out_of_range.returncode == 64 and "no step 9" in one_line_error(out_of_range)
    assert harness("diff", "cli", "--to", "9", *sd).returncode == 64
    for command in (["show", "cli", "--json"], ["resume", "cli"]):
        never_ran = harness(*command, *sd)
        assert never_ran.returncode == 66 and "Traceback" not in never_ran.stderr, never_ran.stderr
        assert never_ran.stdout == "", "nothing is printed before the error"
    commands = harness("show", "cli", *sd)  # a session without a run shows its commands
    assert commands.returncode == 0 and "no model run" in commands.stdout and "step 2" in commands.stdout
    (repo / "src" / "app.py").write_text("someone changed the original\n")
    out = tmp_path / "p.patch"
    conflict = harness("export", "cli", "-o", str(out), *sd)
    assert conflict.returncode == 65 and "no longer applies" in one_line_error(conflict)
    assert "return 99" in out.read_text(), "the patch is still written"
    assert Session.open(state, "cli").step == 2
    assert harness("session", "rm", "nope", *sd).returncode == 66


@pytest.mark.docker
def test_exec_session_steps_writable_root_and_setup(tmp_path: Path, run_label: str, docker_client) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.txt").write_text("a\n")
    sd = ["--state-dir", str(tmp_path / "state")]
    # The run label in the setup command keeps the setup cache image private to this run: another
    # run's cleanup (by its own label) must not remove the image this session's step 0 uses.
    first = harness(
        "exec",
        str(repo),
        "--session",
        "ex",
        "--writable-root",
        "--setup",
        f"touch /etc/setup-ran; true {run_label}",
        *sd,
        "--",
        "sh",
        "-c",
        "echo one > /var/tmp/v; echo b > a.txt",
        run_label=run_label,
    )
    assert first.returncode == 0, first.stderr
    second = harness(
        "exec",
        str(repo),
        "--session",
        "ex",
        *sd,
        "--",
        "sh",
        "-c",
        "cat /var/tmp/v /etc/setup-ran a.txt",
        run_label=run_label,
    )
    assert second.returncode == 0 and "one" in second.stdout and "b" in second.stdout, second.stdout + second.stderr
    session = Session.open(tmp_path / "state", "ex")
    assert session.step == 2 and session.info.setup is not None and session.info.setup.network_mode == "none"
    assert harness("rollback", "ex", "--to", "0", *sd).returncode == 0
    third = harness(
        "exec", str(repo), "--session", "ex", *sd, "--", "sh", "-c", "cat a.txt; cat /var/tmp/v", run_label=run_label
    )
    assert third.returncode != 0 and "a" in third.stdout
    assert harness("session", "rm", "ex", *sd).returncode == 0
    assert not (tmp_path / "state" / "ex").exists()


@pytest.mark.docker
def test_prune_removes_images_of_deleted_sessions_and_unfinished_creates(
    tmp_path: Path, run_label: str, docker_client, sandbox_image: str
) -> None:
    import time

    from sandbox.docker.images import current_ref
    from sandbox.docker.prune import UNFINISHED_AFTER_S

    repo = make_repo(tmp_path / "repo")
    state, other = (tmp_path / "state").resolve(), (tmp_path / "other").resolve()
    Session.create(repo, state, spec=SandboxSpec(), session_id="live").close()
    (state / "half" / "workspace").mkdir(parents=True)
    old = time.time() - UNFINISHED_AFTER_S - 10
    os.utime(state / "half", (old, old))
    ref = current_ref(docker_client, sandbox_image)

    def session_image(session_id: str, where: Path) -> str:
        container = docker_client.containers.create(
            ref, ["true"], labels={"harness.run": run_label}, network_mode="none"
        )
        try:
            labels = {"harness.run": run_label, "harness.session": session_id, "harness.state": str(where)}
            return container.commit(changes=[f'LABEL {k}="{v}"' for k, v in labels.items()]).id
        finally:
            container.remove(force=True)

    gone, live, elsewhere = session_image("gone", state), session_image("live", state), session_image("gone", other)
    done = harness("sandbox", "prune", "--run", run_label, "--state-dir", str(state), run_label=run_label)
    assert done.returncode == 0, done.stderr
    assert (
        f"removed session leftover {gone}" in done.stdout
        and f"removed session leftover {state / 'half'}" in done.stdout
    )
    assert "removed 2 session leftover(s)" in done.stdout
    remaining = {
        image.id for image in present_images(docker_client, all=True, filters={"label": f"harness.run={run_label}"})
    }
    assert gone not in remaining and {live, elsewhere} <= remaining, (
        "a live session's and another directory's images stay"
    )
    assert (state / "live" / "session.json").exists() and not (state / "half").exists()


def _full(*args: str) -> subprocess.CompletedProcess[str]:
    """The same command through the full command line (typer, the models), never the quick path."""
    probe = (
        f"import sys; from harness.cli import _load; sys.argv = ['harness', *{list(args)!r}]; _load(sys.argv[1]).main()"
    )
    env = {**os.environ, "HARNESS_RUN_ID": "session-cli-test", "COLUMNS": "200"}
    return subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, timeout=150)


def test_the_quick_read_path_says_what_the_full_command_line_says(made: tuple[Path, Path], tmp_path: Path) -> None:
    """`show`, `session list`, `diff` and `export` in their plain forms skip typer and the models: same
    output, same errors, same exit codes, same files."""
    _repo, state = made
    sd = ["--state-dir", str(state)]
    for argv in (
        ["show", "cli", *sd],
        ["session", "list", *sd],
        ["session", "list", "--long", "--outcome", "verified", "-n", "1", *sd],
        ["diff", "cli", *sd],
        ["diff", "cli", "--from", "1", f"--state-dir={state}"],
        ["diff", "cli", "--from=0", "--to", "1", *sd],
        ["export", "cli", *sd],
        ["export", "cli", "--no-check", *sd],
        ["show", "nope", *sd],
        ["diff", "cli", "--to", "9", *sd],
        ["export", "nope", *sd],
        ["session", "list", "--state-dir", str(tmp_path / "empty")],
    ):
        quick, full = harness(*argv), _full(*argv)
        assert (quick.returncode, quick.stdout, quick.stderr) == (full.returncode, full.stdout, full.stderr), argv
    written = {}
    for side, run in (("quick", harness), ("full", _full)):
        out = tmp_path / f"{side}.patch"
        done = run("export", "cli", "-o", str(out), *sd)
        assert done.returncode == 0 and done.stderr == f"wrote {out}\n", done.stderr
        written[side] = out.read_bytes()
    assert written["quick"] == written["full"] and b"data.bin" in written["quick"]
