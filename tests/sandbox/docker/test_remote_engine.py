"""An engine on another machine, for real: a second Docker daemon with its own data root, in its own
UTS namespace (it answers as another host), mount namespace (a fresh /tmp: the controller's
workspaces are not there, as on another machine) and network namespace (its network set-up never
touches this machine's), reached on a TCP socket on 127.0.0.1 (a relay to its API socket). A bind
mount there would show a call an empty folder: nothing is bind-mounted, the workspace, the mounts and
the call stub travel as archives (sandbox.docker.transfer), a call's egress is carried to the proxy
here through the engine's API (sandbox.docker.tunnel). The daemon: tests/engine_elsewhere.py."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.docker.ids import unqualified
from tests import engine_elsewhere
from tests.cli_process import run_cli
from tests.engine_elsewhere import ELSEWHERE

pytestmark = [pytest.mark.docker, pytest.mark.timeout(180)]

HARNESS = str(Path(sys.executable).parent / "harness")
EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "calc"


@pytest.fixture(scope="module", autouse=True)
def no_warm_service(tmp_path_factory) -> Iterator[None]:
    """An empty warm folder for the module's harness commands: no warm service lends them containers
    (but the one a test starts of its own), and nothing is left in /tmp after."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HARNESS_WARM_DIR", str(tmp_path_factory.mktemp("warm-none")))
        yield


@pytest.fixture(scope="module")
def elsewhere() -> Iterator[str]:
    """DOCKER_HOST of a daemon that shares neither this machine's host name, nor its /tmp, nor its network."""
    if why := engine_elsewhere.can_start():
        pytest.skip(why)
    try:
        with engine_elsewhere.elsewhere() as host:
            yield host
    except engine_elsewhere.EngineNotStarted as error:
        pytest.fail(f"the second daemon did not start: {error}")


@pytest.fixture(scope="module")
def with_py311(elsewhere: str) -> str:
    """The elsewhere engine with the py311 image this machine built and its base (saved here, loaded
    there: it pulls nothing)."""
    import docker

    from sandbox.docker import images

    here = docker.from_env()
    try:
        ref = images.current_ref(here, "py311")
    finally:
        here.close()
    saved = subprocess.Popen(["docker", "save", images.BASE_REF, ref], stdout=subprocess.PIPE)
    loaded = subprocess.run(["docker", "-H", elsewhere, "load", "-q"], stdin=saved.stdout, capture_output=True)
    assert saved.wait(timeout=120) == 0 and loaded.returncode == 0, loaded.stderr
    there = docker.DockerClient(base_url=elsewhere)
    try:  # saved from Podman, the names are as it qualifies them (`localhost/harness/...`): named as given
        for wanted in (images.BASE_REF, unqualified(ref)):
            try:
                there.images.get(wanted)
            except docker.errors.ImageNotFound:
                repository, tag = wanted.rsplit(":", 1)
                assert there.images.get(f"localhost/{wanted}").tag(repository, tag)
    finally:
        there.close()
    return elsewhere


def _harness(host: str, *args: str, state: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DOCKER_HOST": host, "HARNESS_RUN_ID": "remote-engine-test", "COLUMNS": "200"}
    if state is not None:
        env["HARNESS_STATE_DIR"] = str(state)
    return run_cli(args, env=env, timeout=120, console=True)


def _left_on(host: str) -> list[str]:
    """The running containers and the volumes on the engine at host, each with what made it (its kind,
    or the process and run its labels name), so that a leftover says where it came from."""
    found = []
    for what, shown in (("ps", '{{.ID}} {{.Label "harness.kind"}}'), ("volume ls", "{{.Name}} {{.Labels}}")):
        listed = subprocess.run(
            ["docker", "-H", host, *what.split(), "--format", shown], capture_output=True, text=True, check=True
        )
        found += listed.stdout.splitlines()
    return found


def test_doctor_says_the_engine_is_elsewhere_and_what_travels_as_archives(elsewhere):
    doctor = _harness(elsewhere, "doctor")
    assert f"engine location: another machine (it answers over TCP as host '{ELSEWHERE}'" in doctor.stdout
    assert "travel as archives (nothing bind-mounted), egress through the engine's API" in doctor.stdout
    assert "cannot take this machine's folders" not in doctor.stderr, "the engine's place is no problem of its own"
    assert "free disk at" in doctor.stdout and "not checked" in doctor.stdout
    assert "Traceback" not in doctor.stderr


def test_a_run_on_an_engine_that_cannot_see_this_machine_fixes_the_example(with_py311, tmp_path):
    """The README's demo, on the engine elsewhere: the workspace, the tool runner and the stub reach
    each call as archives, the change comes back, the snapshot store records it, and the patch says it."""
    state = tmp_path / "state"
    done = _harness(
        with_py311, "run", "--image", "py311", "--model", "scripted:examples/calc-fix.yaml", "examples/calc",
        "--task", "Fix the failing tests in calc.", "--verify", "python3 -m pytest -q", state=state,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "verified" in done.stdout and "Traceback" not in done.stderr
    patch = next(state.glob("*/change.patch")).read_text()
    assert "-    return a - b\n+    return a + b" in patch
    assert "tests/" not in patch, "the protected tests came back unchanged"
    assert _left_on(with_py311) == [], "no container and no volume is left on the engine"


def test_session_steps_come_back_roll_back_and_what_needs_this_machine_is_refused(with_py311, tmp_path):
    state = tmp_path / "state"
    repo = tmp_path / "repo"
    (repo / "sub").mkdir(parents=True)
    (repo / "marker.txt").write_text("on the controller's disk\n")
    (repo / "sub" / "gone.txt").write_text("removed by the call\n")
    first = _harness(
        with_py311, "exec", str(repo), "--session", "far", "--", "sh", "-c",
        "cat marker.txt && echo made > made.txt && rm sub/gone.txt && mkdir -p deep/er && chmod 700 deep "
        "&& ln -s /etc/passwd deep/link && ln made.txt twin.txt",
        state=state,
    )  # fmt: skip
    assert first.returncode == 0 and "on the controller's disk" in first.stdout, first.stdout + first.stderr
    workspace = state / "far" / "workspace"
    assert (workspace / "made.txt").read_text() == "made\n" and not (workspace / "sub" / "gone.txt").exists()
    assert os.readlink(workspace / "deep" / "link") == "/etc/passwd"
    assert (workspace / "deep").stat().st_mode & 0o777 == 0o700
    assert os.path.samefile(workspace / "made.txt", workspace / "twin.txt")
    second = _harness(
        with_py311, "exec", str(repo), "--session", "far", "--", "sh", "-c", "echo more >> made.txt", state=state
    )
    assert second.returncode == 0, second.stderr
    diff = _harness(with_py311, "diff", "far", "--from", "1", "--to", "2", state=state)
    assert "+more" in diff.stdout, diff.stdout + diff.stderr
    assert _harness(with_py311, "rollback", "far", "--to", "1", state=state).returncode == 0
    back = _harness(with_py311, "exec", str(repo), "--session", "far", "--", "cat", "made.txt", state=state)
    assert back.stdout.count("made") == 1 and "more" not in back.stdout, back.stdout

    assert _left_on(with_py311) == []


def test_egress_goes_through_the_engine_to_the_proxy_here(with_py311, tmp_path):
    """The session's proxy is on this machine and its socket cannot be bound there: each connection
    a call makes is carried through the engine's API. A listed host answers over HTTPS (the proxy
    here reaches this machine's 127.0.0.1), a host off the list gets the proxy's 403, a direct
    connection and a lookup get nothing, a tunnel whose TLS names another host is cut: as on this
    machine's engine. Three hundred requests, a hundred at a time and within the call's default limits,
    all arrive, and 20 MiB arrive whole; nothing is left on that engine."""
    from tests.sandbox.network.servers import Server, make_ca
    from tests.sandbox.network.test_egress_docker import PROBE, check_probe

    repo = tmp_path / "repo"
    repo.mkdir()
    _, cert, key = make_ca(repo / "tls")
    (repo / "probe.py").write_text(PROBE)
    (repo / "many.py").write_text(
        "import concurrent.futures, hashlib, os, sys, urllib.request\n"
        "for name in ('NO_PROXY', 'no_proxy'):\n    os.environ.pop(name, None)\n"
        "url = f'http://127.0.0.1:{sys.argv[1]}/hello'\n"
        "with concurrent.futures.ThreadPoolExecutor(100) as pool:\n"
        "    got = list(pool.map(lambda _: urllib.request.urlopen(url, timeout=60).read(), range(300)))\n"
        "big = urllib.request.urlopen(url.replace('hello', 'big'), timeout=60).read()\n"
        "print(len(got), len(set(got)), hashlib.sha256(big).hexdigest())\n"
    )
    blob = os.urandom(20 * 1024 * 1024)
    with Server(cert=(cert, key)) as secure, Server(files={"/big": blob}) as plain:
        ran = _harness(
            with_py311, "exec", "--allow-net", f"localhost:{secure.port}", "--allow-net",
            f"127.0.0.1:{secure.port}", str(repo), "--", "python3", "probe.py", str(secure.port), "tls/ca.pem",
        )  # fmt: skip
        many = _harness(
            with_py311, "exec", "--allow-net", f"127.0.0.1:{plain.port}", str(repo), "--",
            "python3", "many.py", str(plain.port),
        )  # fmt: skip
    check_probe(ran, secure.port)
    said = many.stdout.strip().splitlines()[-1]
    assert many.returncode == 0 and said == f"300 1 {hashlib.sha256(blob).hexdigest()}", many.stdout + many.stderr
    assert _left_on(with_py311) == []


def test_setup_runs_on_the_engine_elsewhere_with_the_workspace_sent_to_it(with_py311, tmp_path):
    """A session's setup command sees the workspace (sent as an archive before its container starts,
    a climbing link made in it) and its image is what the session's calls start from; with egress its
    commands reach the proxy here through the engine."""
    state = tmp_path / "state"
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    (repo / "requirements.txt").write_text("# nothing to install\n")
    (repo / "pkg" / "up").symlink_to("..")
    setup = "test -f requirements.txt && test -L pkg/up && cp requirements.txt /usr/local/share/seen-by-setup"
    done = _harness(
        with_py311, "exec", str(repo), "--session", "set", "--setup", setup, "--",
        "sh", "-c", "cat /usr/local/share/seen-by-setup && readlink pkg/up",
        state=state,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "# nothing to install" in done.stdout and "\n..\n" in done.stdout + "\n"

    # Setup with egress: pip there installs from an index on this machine, through the proxy here.
    from tests.sandbox.network.servers import Server
    from tests.sandbox.network.test_egress_docker import _wheel

    wheel = _wheel(tmp_path)
    files = {
        "/simple/egress-probe/": f'<a href="/files/{wheel.name}">{wheel.name}</a>'.encode(),
        f"/files/{wheel.name}": wheel.read_bytes(),
    }
    with Server(files=files) as index:
        install = (
            f"env -u NO_PROXY -u no_proxy pip install --index-url http://localhost:{index.port}/simple/ egress-probe"
        )
        done = _harness(
            with_py311, "exec", str(repo), "--session", "netset", "--setup", install, "--allow-net",
            f"localhost:{index.port}", "--allow-net", f"127.0.0.1:{index.port}", "--", "python3", "-c", "import egress_probe; print(egress_probe.WORDS)",
            state=state,
        )  # fmt: skip
    assert done.returncode == 0 and "installed through the allowlist" in done.stdout, done.stdout + done.stderr
    assert _left_on(with_py311) == []


def test_a_writable_roots_step_image_is_never_another_sessions_start(with_py311, tmp_path):
    """A step image is committed from a container of the derived image and inherits its labels: it
    must never be found as the derived image itself (a later session would start from another's
    changes). Found on rootless Podman."""
    state = tmp_path / "state"
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.txt").write_text("a\n")
    first = _harness(
        with_py311, "exec", str(repo), "--session", "one", "--writable-root", "--",
        "sh", "-c", "echo from-one > /var/tmp/left-by-one", state=state,
    )  # fmt: skip
    assert first.returncode == 0, first.stderr
    again = _harness(
        with_py311, "exec", str(repo), "--session", "one", "--", "cat", "/var/tmp/left-by-one", state=state
    )
    assert "from-one" in again.stdout, again.stdout + again.stderr
    other = _harness(
        with_py311, "exec", str(repo), "--session", "two", "--writable-root", "--",
        "sh", "-c", "test ! -e /var/tmp/left-by-one", state=state,
    )  # fmt: skip
    assert other.returncode == 0, "the second session starts from py311, not from the first one's step"


def test_mcp_servers_and_a_service_run_on_the_engine_elsewhere(with_py311, tmp_path):
    """A run's MCP servers and service on the engine elsewhere, where nothing of this machine can be
    bound: each server's workspace is a copy in its own volume, brought up to date before each of its
    calls (a call's change and a call's removal seen by the next server call), a read-only server cannot
    write it, a writable server's change comes back here after its call (the next call sees it, the
    session records it), the service is reached by name and serves the workspace as it is at each call
    (its copy sent what the calls changed); nothing is left on that engine."""

    import docker
    import yaml

    from harness.trajectory import ToolRecord, read_records
    from tests.agent.conftest import turn
    from tests.sandbox.network.servers import Server
    from tests.tools.test_mcp import SERVER, mcp_context

    there = docker.DockerClient(base_url=with_py311)
    web: Server | None = None
    try:
        from sandbox.docker import images

        here = docker.from_env()
        try:
            base = images.current_ref(here, "py311")
        finally:
            here.close()
        image = "harness-test/mcp-elsewhere:1"
        there.images.build(fileobj=mcp_context(base), custom_context=True, tag=image, rm=True, pull=False)
        repo = tmp_path / "repo"
        (repo / "tools").mkdir(parents=True)
        (repo / "tools" / "server.py").write_text(SERVER)
        tools = SERVER.split("@app.tool()")  # the writer: two of the server's tools, on a menu of its own
        kept = [part for part in tools[1:] if part.lstrip().startswith(("def try_write", "def fetch", "def crash"))]
        (repo / "tools" / "writer.py").write_text(
            tools[0] + "".join("@app.tool()" + part for part in kept) + "\napp.run()\n"
        )
        (repo / "notes.txt").write_text("one two three four five\n")
        (repo / "extra.txt").write_text("to be removed\n")
        server = (
            'command = ["python3", "/workspace/tools/{}.py"]\nimage = "{}"\nenv = {{ PYTHONPATH = "/opt/mcp-site" }}\n'
        )
        serve = "import http.server as h; h.ThreadingHTTPServer(('', 8000), h.SimpleHTTPRequestHandler).serve_forever()"
        probe = "import socket; socket.create_connection(('127.0.0.1', 8000), timeout=2)"
        web = Server().__enter__()  # what the reader's egress may reach, on this machine
        config = tmp_path / "config.toml"
        config.write_text(
            "[mcp.reader]\n" + server.format("server", image) + f'allow_net = ["127.0.0.1:{web.port}"]\n'
            "\n[mcp.writer]\n" + server.format("writer", image) + "writable = true\n\n"
            f'[services.web]\nimage = "py311"\ncommand = ["python3", "-c", "{serve}"]\n'
            f'health = ["python3", "-c", "{probe}"]\nports = [8000]\n'
        )
        fetch = (
            "import urllib.request as u; print(*(u.urlopen('http://web:8000/' + p, timeout=10).read() "
            "for p in ('notes.txt', 'sub/new.txt', 'by-server.txt')))"
        )
        script = tmp_path / "script.yaml"
        script.write_text(yaml.safe_dump({"turns": [
            turn("Counting.", ("reader__word_count", {"path": "notes.txt"}), ("reader__try_write", {"path": "x.txt"})),
            turn("Changing.", ("write_file", {"path": "notes.txt", "content": "one two three four five six seven\n",
                                              "overwrite": True}),
                 ("write_file", {"path": "sub/new.txt", "content": "a b\n"}), ("run_command", {"command": "rm extra.txt"})),
            turn("Again.", ("reader__word_count", {"path": "notes.txt"}), ("reader__word_count", {"path": "extra.txt"}),
                 ("reader__word_count", {"path": "sub/new.txt"})),
            turn("Writing.", ("writer__try_write", {"path": "by-server.txt"})),
            turn("Reading it.", ("run_command", {"command": "cat by-server.txt"})),
            turn("The service.", ("run_command", {"command": f'python3 -c "{fetch}"'})),
            turn("Egress.", ("reader__fetch", {"url": f"http://127.0.0.1:{web.port}/hello"}),
                 ("reader__try_network", {}), ("writer__fetch", {"url": f"http://127.0.0.1:{web.port}/hello"})),
            turn("Crash the writer.", ("writer__crash", {})),
            turn("Write again.", ("writer__try_write", {"path": "after-crash.txt"})),
            turn("Done."),
        ]}))  # fmt: skip
        state = tmp_path / "state"
        ran = _harness(
            with_py311, "run", "--image", "py311", "--model", f"scripted:{script}", str(repo), "--task", "Use them.",
            "--no-verify", "--config", str(config), "--session", "m", "--json", state=state,
        )  # fmt: skip
        assert ran.returncode in (0, 1, 10), ran.stdout[-3000:] + ran.stderr[-3000:]
        calls = [r for r in read_records(state / "m") if isinstance(r, ToolRecord)]
        said = {(c.name, c.step): c.text for c in calls}
        assert said[("reader__word_count", 1)].startswith("5 words in notes.txt"), said
        assert said[("reader__try_write", 1)].startswith("could not write: Permission denied"), said
        counted = [c.text for c in calls if c.name == "reader__word_count" and c.step == 3]
        assert counted[0].startswith("7 words in notes.txt"), "a call's change reaches the server before its call"
        assert counted[1].startswith("ERROR[tool_error]"), "a call's removal too (3 words before it)"
        assert counted[2].startswith("2 words in sub/new.txt"), "and a new folder's file"
        assert said[("writer__try_write", 4)] == "wrote it"
        assert "written by the server" in said[("run_command", 5)], "the writable server's change came back"
        served = said[("run_command", 6)]  # the service's copy of the workspace kept up to date, as a bind mount
        assert "one two three four five six seven" in served and "a b" in served, served
        assert "written by the server" in served, "what another server wrote, once it came back here"
        assert said[("reader__fetch", 7)] == "hello from the test's own internet\n", (
            "through the engine to the proxy here"
        )
        assert said[("reader__try_network", 7)].startswith("no network"), "a direct connection gets nothing"
        assert said[("writer__fetch", 7)].startswith("no answer"), "a server with no hosts listed has no egress"
        crashed = next(c for c in calls if c.name == "writer__crash")
        assert crashed.error_kind == "mcp_server_down" and "crashing on purpose" in crashed.text, crashed.text
        assert "started again for the next call" in crashed.text, "the crash is said, not the gone container's copy"
        assert said[("writer__try_write", 9)] == "wrote it", "the writer started again with a copy of its own"
        assert (state / "m" / "workspace" / "after-crash.txt").exists() or "after-crash.txt" in (
            state / "m" / "change.patch"
        ).read_text()
        patch = (state / "m" / "change.patch").read_text() if (state / "m" / "change.patch").exists() else ""
        assert "by-server.txt" in patch or (state / "m" / "workspace" / "by-server.txt").exists()
        assert json.loads(ran.stdout)["outcome"] != "infra_error"
        assert _left_on(with_py311) == [], "no server, service, volume or network of the run is left there"
        assert [n.name for n in there.networks.list() if n.name.startswith("harness-svc-")] == []
    finally:
        if web is not None:
            web.__exit__(None, None, None)
        with contextlib.suppress(Exception):
            there.images.remove("harness-test/mcp-elsewhere:1", force=True)
        there.close()


GVISOR_PROBE = """
import os, stat
print("sees", open("marker.txt").read().strip())
open("made-under-gvisor.txt", "w").write("yes")
print(open("/proc/version").read().split()[0])
for path in ("/dev/net/tun", "/dev/fuse"):
    try:
        os.close(os.open(path, os.O_RDWR))
        print(path, "opened")
    except OSError as error:
        print(path, "refused", error.errno)
with open("/dev/fuse", "rb") as fuse:
    print("fuse reads", len(fuse.read(16)), "bytes")
for where, number in (("/tmp/fuse", (10, 229)), ("/workspace/tun", (10, 200))):
    try:
        os.mknod(where, 0o666 | stat.S_IFCHR, os.makedev(*number))
        print(where, "made")
    except OSError as error:
        print(where, "refused", error.errno)
"""


def test_a_call_under_gvisor_on_the_engine_elsewhere_keeps_its_posture(with_py311, tmp_path):
    """gVisor there (registered as here): nothing of this machine is bound, so its FUSE device is hidden
    by that engine's own null device (read-only: opening it for writing is refused, reading it gives
    nothing) and the program that refuses device nodes travels with the workspace; the call sees the
    workspace, its write comes back, and no device node can be made."""
    if not engine_elsewhere.runsc_here():
        pytest.skip("gVisor (runsc) is not registered with this machine's engine")
    state = tmp_path / "state"
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "marker.txt").write_text("the controller's workspace\n")
    (repo / "probe.py").write_text(GVISOR_PROBE)
    ran = _harness(
        with_py311, "exec", "--runtime", "runsc", str(repo), "--session", "g", "--", "python3", "probe.py", state=state
    )
    said = ran.stdout + ran.stderr
    assert ran.returncode == 0, said
    assert "sees the controller's workspace" in said and "\nLinux" in said, said
    assert "/dev/net/tun refused 2" in said, "no TUN device (a read-only empty /dev/net)"
    assert "/dev/fuse refused 30" in said and "fuse reads 0 bytes" in said, said
    assert "/tmp/fuse refused 1" in said and "/workspace/tun refused 1" in said, "no device node (EPERM)"
    assert (state / "g" / "workspace" / "made-under-gvisor.txt").read_text() == "yes"
    assert _left_on(with_py311) == []


def test_a_warm_run_slot_there_is_lent_to_a_session_there_and_never_to_one_here(with_py311, tmp_path):
    """The warm service of the engine elsewhere keeps a run slot there (its containers have volumes where
    a bind would be) and lends it over its socket: a session on that engine takes them as its first
    containers and sends them its workspace at each call; a session on this machine's engine pointed
    at the same service gives the loan back (its calls would reach containers it never sends a
    workspace to) and starts its own."""
    import time

    from harness import assembly
    from harness.config import RunConfig
    from sandbox.warm import protocol

    label = f"remote-warm-{os.getpid()}"
    env = {**os.environ, "DOCKER_HOST": with_py311, "HARNESS_WARM_DIR": str(tmp_path / "warm"), "HARNESS_RUN_ID": label}
    started = run_cli(["warm", "start", "--per-spec", "1", "--per-run", "3"], env=env, timeout=120, console=True)
    assert started.returncode == 0, started.stderr
    folder = protocol.engine_folder(tmp_path / "warm", with_py311)

    def slot_ready() -> dict[str, int]:
        deadline = time.monotonic() + 90
        while (runs := protocol.status(folder).runs)["out"] or runs["starting"] or not runs["ready"]:
            assert time.monotonic() < deadline, f"no run slot became ready: {runs}"
            time.sleep(0.2)
        return runs

    config = RunConfig(model="scripted:/dev/null")
    try:
        slot_ready()
        for round_, (engine, lent) in enumerate(((None, 0), (with_py311, 3)), start=1):
            runtime = assembly.Runtime(run_id=f"{label}-session", warm_dir=folder, docker_host=engine)
            with assembly.open_sandbox(runtime, None) as sandbox:
                session = assembly.create_session(EXAMPLE, tmp_path / f"sessions-{lent}", config, sandbox, None, folder)
                assert sandbox.adopted == lent, engine
                spec, mounts = assembly.call_spec(session.spec), assembly.tool_mounts(session.workspace, config)
                done = sandbox.run(
                    ["sh", "-c", "head -1 calc/ops.py; echo made > made.txt"],
                    workspace=session.workspace,
                    spec=spec,
                    mounts=mounts,
                )
                assert (
                    done.exit_code == 0 and done.stdout == (EXAMPLE / "calc" / "ops.py").read_text().splitlines(True)[0]
                )
                assert (session.workspace / "made.txt").read_text() == "made\n", "the call's change came back"
            assert slot_ready()["lent"] == round_, "lent each time, came back, and a new slot is ready"
    finally:
        run_cli(["warm", "stop"], env=env, timeout=120, console=True)
    assert _left_on(with_py311) == [], "no container and no volume is left on the engine"
