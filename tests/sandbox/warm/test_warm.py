"""The warm service with the real CLI and engine: a one-shot `harness exec` served by a container
started before it, the same envelope as the cold path, and nothing left behind however it ends."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.cli import quick
from sandbox.docker.engine import connect, located
from sandbox.docker.prune import find_containers
from sandbox.warm import messages, protocol
from sandbox.warm.messages import ErrorReply, ExecRequest, LendRequest, request_of
from tests.cli_process import run_cli

HARNESS = str(Path(sys.executable).parent / "harness")
pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    (path / "data.txt").write_text("payload\n")
    return path


class Warm:
    """The CLI with this test's warm folder and run label."""

    def __init__(self, folder: Path, label: str) -> None:
        # the service's folder for the engine the tests use (DOCKER_HOST: Podman's socket, say)
        self.label, self.folder = label, protocol.engine_folder(folder, os.environ.get("DOCKER_HOST") or None)
        self.env = {**os.environ, "HARNESS_WARM_DIR": str(folder), "HARNESS_RUN_ID": label, "COLUMNS": "200"}

    def __call__(self, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        env = {**self.env, **extra}
        return run_cli(args, env=env, timeout=180, console=True)


@pytest.fixture
def warm(tmp_path: Path, run_label: str, sandbox_image: str, docker_client):
    """A warm service of this test in its own folder; stopped (and checked gone) at the end."""
    cli = Warm(tmp_path / "warm", f"{run_label}-warm-{time.monotonic_ns()}")
    yield cli
    cli("warm", "stop")
    deadline = time.monotonic() + 20
    while find_containers(docker_client, {"harness.run": cli.label}) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = find_containers(docker_client, {"harness.run": cli.label})
    for container in left:  # removed either way: the session's cleanup knows only its own label
        container.remove(force=True)
    assert not left, "the service left containers behind"


def _ready(cli, count: int = 1, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        reply = protocol.status(cli.folder)
        if sum(reply.ready.values()) >= count:
            return
        time.sleep(0.1)
    raise AssertionError("the warm service never had a container ready")


@pytest.mark.docker
def test_one_shot_exec_is_served_by_a_container_started_before_it(warm, repo: Path) -> None:
    started = warm("warm", "start", "--per-spec", "1")
    assert started.returncode == 0, started.stderr
    assert "running" in started.stdout
    assert stat.S_IMODE(warm.folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((warm.folder / "warm.sock").stat().st_mode) == 0o600
    assert warm("warm", "start").stdout.startswith("a warm service already runs")
    _ready(warm)

    # The client is an interpreter, the standard library's socket and json, and the wire: nothing
    # that costs a one-shot call milliseconds (typing, pathlib, dataclasses, pydantic, the docker SDK).
    probe = (
        "import atexit, json, sys\n"
        "atexit.register(lambda: sys.__stderr__.write('MODULES ' + json.dumps(sorted(sys.modules)) + '\\n'))\n"
        f"sys.argv = ['harness', 'exec', {str(repo)!r}, '--', 'cat', 'data.txt']\n"
        "from harness.cli import main\n"
        "main()\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=warm.env, timeout=60)
    assert done.returncode == 0 and done.stdout.endswith("payload\n"), done.stderr
    modules = json.loads(next(line for line in done.stderr.splitlines() if line.startswith("MODULES "))[8:])
    heavy = (
        "typing",
        "pathlib",
        "dataclasses",
        "inspect",
        "pydantic",
        "docker",
        "typer",
        "rich",
        "sandbox.warm.messages",
    )
    assert [m for m in modules if m.split(".")[0] in heavy or m in heavy] == []
    assert "sandbox.warm.wire" in modules
    _ready(warm)

    done = warm(
        "exec", str(repo), "--json", "--", "sh", "-c", "cat data.txt; echo changed > data.txt; echo e >&2; exit 3"
    )
    assert done.returncode == 3, done.stderr
    envelope = json.loads(done.stdout)
    assert envelope["stdout"] == "payload\n" and envelope["stderr"] == "e\n"
    assert envelope["status"] == "exit_nonzero" and envelope["call_path"] == "stub"
    assert (repo / "data.txt").read_text() == "payload\n", "the repository itself is never touched"

    # Without the service (another folder) the same command gives the same envelope but for timings.
    cold = warm(
        "exec",
        str(repo),
        "--json",
        "--",
        "sh",
        "-c",
        "cat data.txt; echo e >&2; exit 3",
        HARNESS_WARM_DIR=str(warm.folder.parent.parent / "none"),
    )
    cold_envelope = json.loads(cold.stdout)
    for key in ("exit_code", "status", "stdout", "stderr", "limits", "image_id", "call_path", "truncated"):
        assert envelope[key] == cold_envelope[key], key

    # Each call gets a fresh container: nothing one call leaves is seen by the next.
    _ready(warm)
    first = warm("exec", str(repo), "--", "sh", "-c", "hostname; touch /tmp/mark")
    _ready(warm)
    second = warm("exec", str(repo), "--", "sh", "-c", "hostname; ls /tmp/mark || echo fresh")
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert first.stdout.splitlines()[2] != second.stdout.splitlines()[2]
    assert "fresh" in second.stdout and second.stdout.startswith("exit_code=0 status=ok duration=")

    # Flags the quick path does not take go through the full command line, to the same service.
    timed_out = warm(
        "exec",
        str(repo),
        "--timeout",
        "1",
        "--json",
        "--keep",
        str(repo.parent / "kept"),
        "--",
        "sh",
        "-c",
        "echo kept > k; sleep 30",
    )
    assert timed_out.returncode == 124, timed_out.stderr
    assert json.loads(timed_out.stdout)["status"] == "timeout"
    assert (repo.parent / "kept" / "k").read_text() == "kept\n"

    missing = warm("exec", str(repo / "nope"), "--", "true")
    assert (
        missing.returncode == 66 and missing.stderr.strip() == f"error: repository path does not exist: {repo / 'nope'}"
    )
    status = warm("warm", "status").stdout
    assert "running" in status and "one-shot containers ready" in status and "run slots:" in status
    assert "warm service: running" in warm("doctor").stdout


@pytest.mark.docker
def test_a_client_that_hangs_up_ends_its_call(warm, repo: Path, docker_client) -> None:
    assert warm("warm", "start", "--per-spec", "1").returncode == 0
    _ready(warm)
    client = subprocess.Popen([HARNESS, "exec", str(repo), "--", "sleep", "77"], env=warm.env)
    deadline = time.monotonic() + 30
    while not _sleeping(docker_client, warm.label) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _sleeping(docker_client, warm.label), "the call never started"
    client.send_signal(signal.SIGKILL)
    client.wait()
    deadline = time.monotonic() + 20
    while _sleeping(docker_client, warm.label) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _sleeping(docker_client, warm.label), "the call outlived its client"


def _sleeping(client, label: str) -> bool:
    for container in find_containers(client, {"harness.run": label}):
        try:
            if any("sleep 77" in " ".join(row) for row in container.top().get("Processes") or []):
                return True
        except Exception:  # noqa: BLE001 - a container removed under us is not sleeping
            continue
    return False


@pytest.mark.docker
def test_a_killed_service_is_replaced_and_its_containers_pruned(warm, repo: Path, docker_client) -> None:
    assert warm("warm", "start", "--per-spec", "1").returncode == 0
    _ready(warm)
    pid = protocol.status(warm.folder).pid
    # its containers, listed before the kill: after it they are orphans, which any service's start
    # (another test's, beside this one) may prune at once
    theirs = {c.id for c in find_containers(docker_client, {"harness.run": warm.label, "harness.kind": "warm"})}
    assert theirs
    os.kill(pid, signal.SIGKILL)

    cold = warm("exec", str(repo), "--", "cat", "data.txt")  # a dead socket: the cold path, no error
    assert cold.returncode == 0 and "payload" in cold.stdout, cold.stderr
    assert "no warm service" in warm("warm", "status").stdout

    assert warm("warm", "start", "--per-spec", "1").returncode == 0
    leftovers = [
        c
        for c in find_containers(docker_client, {"harness.run": warm.label, "harness.kind": "warm"})
        if c.labels.get("harness.pid") == str(pid) or c.id in theirs
    ]
    assert not leftovers, "the new service removes the killed one's containers"
    assert warm("exec", str(repo), "--", "cat", "data.txt").stdout.endswith("payload\n")


@pytest.mark.docker
def test_the_service_ends_when_idle_and_follows_a_rebuilt_image(warm, repo: Path, docker_client, tmp_path) -> None:
    from sandbox.docker.engine import resolve_image

    base, _ = resolve_image(docker_client, "py311")
    tag = f"harness-warm-test:{warm.label.rsplit('-', 1)[1]}"
    docker_client.api.tag(base, *tag.split(":"))
    try:
        assert warm("warm", "start", "--image", tag, "--per-spec", "1", "--idle", "6").returncode == 0
        _ready(warm)
        (tmp_path / "ctx").mkdir()
        (tmp_path / "ctx" / "Dockerfile").write_text(f"FROM {base}\nLABEL harness.run={warm.label}\n")
        rebuilt, _ = docker_client.images.build(path=str(tmp_path / "ctx"), tag=tag, rm=True)
        done = warm("exec", str(repo), "--image", tag, "--json", "--", "true")
        assert json.loads(done.stdout)["image_id"] == rebuilt.id, "a container of the old image was used"

        deadline = time.monotonic() + 30
        while (warm.folder / "warm.sock").exists() and time.monotonic() < deadline:
            time.sleep(0.3)
        assert not (warm.folder / "warm.sock").exists(), "the idle service did not exit"
        assert not find_containers(docker_client, {"harness.run": warm.label})
    finally:
        docker_client.api.remove_image(tag)


@pytest.mark.docker
def test_the_image_watch_counts_the_engines_image_events(docker_client, sandbox_image: str) -> None:
    """The warm service asks the engine which id an image names only when its image events say
    something changed (a tag here; other tests' commits count too); a closed watch says nothing is known."""
    from sandbox.docker.engine import resolve_image
    from sandbox.warm.service import ImageWatch

    image, _ = resolve_image(docker_client, sandbox_image)
    watch = ImageWatch(docker_client)
    tag = f"harness-watch-test:{time.monotonic_ns()}"
    try:
        deadline = time.monotonic() + 10
        while watch.mark() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        before = watch.mark()
        assert before is not None, "the engine's event stream never opened"
        docker_client.api.tag(image, *tag.split(":"))
        deadline = time.monotonic() + 10
        while watch.mark() == before and time.monotonic() < deadline:
            time.sleep(0.02)
        after = watch.mark()
        assert after is not None and after > before, "a tag is a change"
    finally:
        watch.close()
        with contextlib.suppress(Exception):
            docker_client.api.remove_image(tag)
    assert watch.mark() is None


def test_the_quick_path_takes_only_the_plain_form() -> None:
    assert quick.parse(["exec", "repo", "--", "true"]) == ("repo", "py311", False, ["true"])
    assert quick.parse(["exec", "repo", "--json", "--image", "node", "--", "ls", "-l"]) == (
        "repo",
        "node",
        True,
        ["ls", "-l"],
    )
    assert quick.parse(["exec", "repo", "--image=go", "--", "go", "--json"]) == ("repo", "go", False, ["go", "--json"])
    for argv in (
        ["exec", "repo", "true"],  # no --
        ["exec", "--json", "repo", "--", "true"],  # options first
        ["exec", "repo", "--keep", "x", "--", "true"],
        ["exec", "repo", "--session", "s", "--", "true"],
        ["exec", "repo", "--image", "--", "true"],
        ["exec", "repo", "--help", "--", "x"],
        ["exec", "repo", "--"],
        ["run", "repo", "--", "true"],
    ):
        assert quick.parse(argv) is None, argv


def test_a_folder_others_can_enter_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "warm"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    with pytest.raises(protocol.Unavailable, match="chmod 700"):
        protocol.status(folder)
    folder.chmod(0o700)
    with pytest.raises(protocol.Unavailable, match="no warm service answers"):
        protocol.status(folder)


def test_messages_are_typed_both_ways_and_a_malformed_one_names_its_field() -> None:
    request = ExecRequest(path="/repo", argv=["true"], spec={"image": "py311"})
    assert request_of(messages.wire(request)) == request
    assert request_of({"op": "lend", "run": {"spec": {}, "mounts": []}}) == LendRequest(run={"spec": {}, "mounts": []})
    for bad, field in [
        ({"op": "exec", "path": "/repo", "argv": "true"}, "argv"),
        ({"op": "exec", "path": 7, "argv": ["true"]}, "path"),
        ({"op": "exec", "path": "/repo", "argv": ["true"], "keep": 1}, "keep"),
        ({"op": "lend", "run": {"spec": {}}}, "spec and mounts"),
        ({"op": "rm -rf"}, "unknown request"),
    ]:
        with pytest.raises(ValueError, match=field):
            request_of(bad)
    assert messages.exec_reply_of({"error": "no engine", "exit_code": 125}) == ErrorReply("no engine", 125)
    with pytest.raises(ValueError, match="exit code"):
        messages.exec_reply_of({"envelope": {"status": "ok"}, "headline": "ok"})
    with pytest.raises(ValueError, match="pid"):
        messages.status_reply_of({"ready": {}})


def test_messages_are_framed_and_bounded() -> None:
    left, right = socket.socketpair()
    with left, right:
        protocol.send(left, {"op": "status", "x": "\x00\n" * 3})
        assert protocol.receive(right) == {"op": "status", "x": "\x00\n" * 3}
        left.sendall((protocol.MAX_MESSAGE + 1).to_bytes(4, "big"))
        with pytest.raises(ValueError):
            protocol.receive(right)
        left.sendall(b"\x00\x00\x00\x02[]")
        with pytest.raises(ValueError):
            protocol.receive(right)
        left.close()
        with pytest.raises(EOFError):
            protocol.receive(right)


ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "calc"


def _runs(cli: Warm) -> dict[str, int]:
    return protocol.status(cli.folder).runs


@functools.cache
def _engine_elsewhere() -> str | None:
    """Why the engine under test cannot take this machine's folders (rootless, or another machine's)."""
    client = connect(os.environ.get("DOCKER_HOST") or None)
    try:
        return located(client)[1]
    finally:
        client.close()


def _run_slot_ready(cli: Warm, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = _runs(cli)
        if runs["ready"] and not runs["out"] and not runs["starting"]:
            return
        time.sleep(0.1)
    raise AssertionError(f"no run slot became ready: {_runs(cli)}")


@pytest.mark.docker
def test_a_new_session_borrows_its_first_containers_and_they_keep_the_posture(warm, tmp_path, docker_client) -> None:
    from harness import assembly
    from harness.config import RunConfig

    assert warm("warm", "start", "--per-spec", "1", "--per-run", "3").returncode == 0
    _run_slot_ready(warm)
    own = f"{warm.label}-session"
    runtime = assembly.Runtime(run_id=own, warm_dir=warm.folder, docker_host=os.environ.get("DOCKER_HOST") or None)
    config = RunConfig(model="scripted:/dev/null", verify="python3 -m pytest -q")
    with assembly.open_sandbox(runtime, None) as sandbox:
        session = assembly.create_session(EXAMPLE, tmp_path / "sessions", config, sandbox, None, warm.folder)
        assert sandbox.adopted == 3 and _runs(warm)["out"] == 1
        spec, mounts = assembly.call_spec(session.spec), assembly.tool_mounts(session.workspace, config)
        assert any(m.target == "/workspace/tests" for m in mounts)
        first = sandbox.run(
            ["sh", "-c", "head -1 calc/ops.py; touch tests/planted"],
            workspace=session.workspace,
            spec=spec,
            mounts=mounts,
        )
        # (on an engine that takes archives a read-only mount is a copy without write bits)
        refused = "Permission denied" if _engine_elsewhere() else "Read-only file system"
        assert first.exit_code != 0 and refused in first.stderr, first
        assert first.stdout and first.call_path == "stub" and first.limits.network == "none"
        assert not (session.workspace / "tests" / "planted").exists()
        assert not [
            c for c in find_containers(docker_client, {"harness.run": own}) if c.labels["harness.kind"] != "netns"
        ], "the session started containers of its own while it had borrowed ones"
        second = sandbox.run(
            ["sh", "-c", "echo made > made.txt"], workspace=session.workspace, spec=spec, mounts=mounts
        )
        assert second.exit_code == 0 and (session.workspace / "made.txt").read_text() == "made\n"
    assert not find_containers(docker_client, {"harness.run": own})
    _run_slot_ready(warm)  # the loan came back (its unused container removed) and a new slot is ready
    assert _runs(warm)["lent"] == 1


@pytest.mark.docker
def test_harness_run_borrows_and_a_dead_borrower_gives_everything_back(warm, tmp_path, docker_client) -> None:
    assert warm("warm", "start", "--per-spec", "1", "--per-run", "3").returncode == 0
    _run_slot_ready(warm)
    done = warm(
        "run",
        str(EXAMPLE),
        "--task",
        "Fix the failing tests in calc.",
        "--model",
        f"scripted:{ROOT / 'examples' / 'calc-fix.yaml'}",
        "--verify",
        "python3 -m pytest -q",
        "--state-dir",
        str(tmp_path / "sessions"),
        "--json",
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["outcome"] == "verified"
    _run_slot_ready(warm)
    assert _runs(warm)["lent"] == 1

    code = (
        "import sys, time; from pathlib import Path; from sandbox.warm.loans import borrow\n"
        "from sandbox.warm.loans import run_request\n"
        "import json; request = json.loads(sys.argv[1])\n"
        "loan = borrow(Path(sys.argv[2]), request, Path(sys.argv[3]))\n"
        "print(json.dumps([cid for cid, _ in loan.containers]), flush=True); time.sleep(300)\n"
    )
    from harness import assembly
    from harness.config import RunConfig

    shape = tmp_path / "shape"
    (shape / "tests").mkdir(parents=True)
    request = assembly.warm_run_request(RunConfig(), shape)
    borrower = subprocess.Popen(
        [sys.executable, "-c", code, json.dumps(request), str(warm.folder), str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        env=warm.env,
    )
    lent = json.loads(borrower.stdout.readline())
    assert len(lent) == 3 and _runs(warm)["out"] == 1
    borrower.kill()
    borrower.wait()
    borrower.stdout.close()
    deadline = time.monotonic() + 20
    while any(c.id in lent for c in find_containers(docker_client, {"harness.run": warm.label})):
        assert time.monotonic() < deadline, "a dead borrower's containers were not removed"
        time.sleep(0.2)
    _run_slot_ready(warm)


@pytest.mark.docker
def test_the_detached_service_inherits_no_secret(warm) -> None:
    started = warm(
        "warm",
        "start",
        "--per-spec",
        "1",
        "--per-run",
        "0",
        OPENAI_API_KEY="sk-planted-1",
        HARNESS_API_KEY="sk-planted-2",
        DOCKER_PASSWORD="sk-planted-3",
    )
    assert started.returncode == 0, started.stderr
    pid = protocol.status(warm.folder).pid
    environ = Path(f"/proc/{pid}/environ").read_bytes()
    assert b"sk-planted" not in environ
    assert f"HARNESS_RUN_ID={warm.label}".encode() in environ and b"PATH=" in environ


def test_a_slot_of_mount_points_becomes_a_workspace(tmp_path: Path) -> None:
    from sandbox.errors import WorkspaceError
    from sandbox.session.session import Session
    from sandbox.session.workspace import copy_repository
    from sandbox.spec import SandboxSpec

    slot = tmp_path / "slot"
    (slot / "tests").mkdir(parents=True)
    inode = slot.stat().st_ino
    session = Session.create(EXAMPLE, tmp_path / "sessions", spec=SandboxSpec(), workspace_from=slot)
    assert not slot.exists() and session.workspace.stat().st_ino == inode, "the slot itself is the workspace"
    assert (session.workspace / "tests" / "test_ops.py").read_text() == (EXAMPLE / "tests" / "test_ops.py").read_text()
    assert (session.workspace / "calc" / "ops.py").is_file()

    # Only empty directories may be waiting there: a file (or a link) is never copied over.
    for planted in ("file", "link"):
        busy = tmp_path / f"busy-{planted}"
        (busy / "tests").mkdir(parents=True)
        if planted == "file":
            (busy / "tests" / "x").write_text("x")
        else:
            (busy / "tests" / "x").symlink_to("/etc")
        with pytest.raises(WorkspaceError, match="already exists"):
            copy_repository(EXAMPLE, busy)


def test_run_requests_name_workspace_mounts_relatively_and_stay_inside(tmp_path: Path) -> None:
    from sandbox.spec import Mount, SandboxSpec
    from sandbox.warm.loans import run_key, run_request, slot_mounts

    mounts = [
        Mount(source=Path("/opt/runner.py"), target="/opt/harness/runner.py"),
        Mount(source=tmp_path / "ws" / "tests", target="/workspace/tests"),
    ]
    spec = SandboxSpec(labels={"harness.session": "s1"})
    request = run_request(spec, mounts, tmp_path / "ws")
    assert request["mounts"][1] == {"target": "/workspace/tests", "read_only": True, "workspace": "tests"}
    assert "labels" not in request["spec"]
    # The same run elsewhere (another session, other labels) names the same slot.
    other = run_request(
        spec.model_copy(update={"labels": {}}),
        [mounts[0], Mount(source=tmp_path / "elsewhere" / "tests", target="/workspace/tests")],
        tmp_path / "elsewhere",
    )
    assert run_key(other) == run_key(request)
    made = slot_mounts(request, tmp_path / "slot")
    assert made[1].source == tmp_path / "slot" / "tests" and (tmp_path / "slot" / "tests").is_dir()
    for bad in ("../escape", "/etc"):
        hostile = {**request, "mounts": [{"target": "/workspace/x", "read_only": True, "workspace": bad}]}
        with pytest.raises(ValueError, match="inside the workspace"):
            slot_mounts(hostile, tmp_path / "slot2")


@pytest.mark.docker
def test_containers_that_died_waiting_are_never_used(warm, repo: Path, tmp_path, docker_client) -> None:
    from harness import assembly
    from harness.config import RunConfig

    assert warm("warm", "start", "--per-spec", "1", "--per-run", "2").returncode == 0
    _run_slot_ready(warm)
    _ready(warm)
    for container in find_containers(docker_client, {"harness.run": warm.label, "harness.kind": "warm"}):
        container.kill()  # as an engine restart or `docker kill` would
    done = warm("exec", str(repo), "--", "cat", "data.txt")
    assert done.returncode == 0 and done.stdout.endswith("payload\n"), done.stderr

    runtime = assembly.Runtime(
        run_id=f"{warm.label}-session", warm_dir=warm.folder, docker_host=os.environ.get("DOCKER_HOST") or None
    )
    with assembly.open_sandbox(runtime, None) as sandbox:
        config = RunConfig(model="scripted:/dev/null")
        session = assembly.create_session(EXAMPLE, tmp_path / "sessions", config, sandbox, None, warm.folder)
        assert sandbox.adopted == 0, "a slot of dead containers was lent"
        spec, mounts = assembly.call_spec(session.spec), assembly.tool_mounts(session.workspace, config)
        assert sandbox.run(["true"], workspace=session.workspace, spec=spec, mounts=mounts).exit_code == 0
    _run_slot_ready(warm)  # the dead slot was replaced
    assert _runs(warm)["lent"] == 0


def test_run_slots_are_lent_only_over_a_plain_socket_to_the_engine() -> None:
    from sandbox.docker.engine import streams_pass

    # the SDK's spellings: a Unix socket (Docker's, rootless Podman's), TCP without and with TLS, SSH
    assert streams_pass("http+docker://localhost") and streams_pass("http://127.0.0.1:2375")
    assert not streams_pass("https://engine.example.invalid:2376")
    assert not streams_pass("http+docker://ssh") and not streams_pass("http+docker://localnpipe")
