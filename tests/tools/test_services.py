"""Services in the sandbox: a small HTTP service (the py311 image serving a page) declared in a
config file is started before the run's first step on the session's network with no route out;
the task's tests reach it by name from their call container, the model reads its logs with
service_logs; it is started again on resume after kill -9 (prune removes what the dead controller
left: the container and the network), and nothing is left after the run."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from harness.trajectory import ToolRecord, read_records
from sandbox.docker.engine import engine_kind
from sandbox.docker.ids import present_images, unqualified
from tests.agent.conftest import Harness, turn

pytestmark = [pytest.mark.docker]
ROOT = Path(__file__).resolve().parents[2]
SERVE = "import http.server as h; h.ThreadingHTTPServer(('', 8000), h.SimpleHTTPRequestHandler).serve_forever()"
PROBE = "import socket; socket.create_connection(('127.0.0.1', 8000), timeout=2)"
TEST = """import urllib.request


def test_the_service_answers_by_name():
    page = urllib.request.urlopen("http://web:8000/", timeout=10).read().decode()
    assert "Directory listing" in page


def test_the_service_network_has_no_route_out():
    import socket

    try:
        socket.create_connection(("192.0.2.1", 80), timeout=3)
    except OSError:
        return
    raise AssertionError("reached an outside address")
"""


HOST_TEST = """import socket


def test_no_host_listener_is_reached_through_the_services_network():
    mine = socket.gethostbyname(socket.gethostname())
    bridge = mine.rsplit(".", 2)[0] + ".0.1"  # where an internal bridge's host address would be
    for address in (bridge, mine.rsplit(".", 1)[0] + ".1"):
        try:
            socket.create_connection((address, PORT), timeout=3).close()
        except OSError:
            continue
        raise AssertionError(f"reached the host at {address}")


def test_the_network_gives_no_ipv6_address_that_reaches_this_machines_bridge():
    try:
        rows = open("/proc/net/if_inet6").read().splitlines()
    except FileNotFoundError:  # no IPv6 at all
        rows = []
    held = [row.split()[-1] for row in rows if row.split() and row.split()[-1] != "lo"]
    assert not held, f"IPv6 on {held}: a link-local address there reaches the bridge's, and every listener on ::"
"""


@pytest.fixture
def project(tmp_path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "test_service.py").write_text(TEST)
    return repo


def _config(folder: Path) -> Path:
    path = folder / "config.toml"
    path.write_text(
        f'[services.web]\nimage = "py311"\ncommand = ["python3", "-c", "{SERVE}"]\n'
        f'health = ["python3", "-c", "{PROBE}"]\nports = [8000]\n'
    )
    return path


def test_a_service_is_reached_by_name_its_logs_read_and_it_ends_with_the_run(
    tmp_path, project, run_label, docker_client
):
    label = f"{run_label}-svc"
    harness = Harness(tmp_path / "sessions", label)
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump({"turns": [
        turn("Running the tests.", ("run_tests", {})),
        turn("Its logs.", ("service_logs", {"name": "web", "lines": 50})),
        turn("Done."),
    ]}))  # fmt: skip
    import socket

    host = socket.create_server(("0.0.0.0", 0))  # a host listener on every address, the bridge's among them
    (project / "test_host.py").write_text(HOST_TEST.replace("PORT", str(host.getsockname()[1])))
    try:
        ran = harness(
            "run", "--image", "py311", "--model", f"scripted:{script}", str(project), "--task", "Check the service.",
            "--verify", "python3 -m pytest -q test_service.py test_host.py", "--config", str(_config(tmp_path)),
            "--session", "s", "--json",
        )  # fmt: skip
    finally:
        host.close()
    assert ran.code == 0 and ran.json()["outcome"] == "verified", ran.stdout + ran.stderr
    calls = {c.name: c for c in read_records(harness.session_dir("s")) if isinstance(c, ToolRecord)}
    assert calls["run_tests"].text.startswith("exit_code=0") and "..  " in calls["run_tests"].text
    assert (
        calls["service_logs"].text.startswith("OK service_logs web")
        and '"GET / HTTP/1.1" 200' in calls["service_logs"].text
    )
    assert docker_client.containers.list(all=True, filters={"label": f"harness.run={label}"}) == []
    assert docker_client.networks.list(filters={"label": f"harness.run={label}"}) == []


def test_kill_9_then_prune_then_resume_starts_the_service_again(tmp_path, project, run_label, docker_client):
    label = f"{run_label}-svckill"
    harness = Harness(tmp_path / "sessions", label)
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump({"turns": [
        turn("Running the tests.", ("run_tests", {})),
        turn("Again.", ("run_tests", {})),
        turn("Done."),
    ]}))  # fmt: skip
    args = [
        "run", "--image", "py311", "--model", f"scripted:{script}", str(project), "--task", "Check the service.",
        "--verify", "python3 -m pytest -q test_service.py", "--config", str(_config(tmp_path)), "--session", "k",
        "--json",
    ]  # fmt: skip
    crashed = harness(*args, env={"HARNESS_CRASH_AT": "model_answered:2"})
    assert crashed.code == -9, crashed.stderr
    mine = {"label": [f"harness.run={label}", "harness.kind=service"]}
    assert docker_client.containers.list(all=True, filters=mine), "the dead controller's service is still there"
    pruned = harness("sandbox", "prune")
    assert pruned.code == 0, pruned.stderr
    left = docker_client.containers.list(all=True, filters={"label": f"harness.run={label}"})
    assert left == [], [(c.status, c.labels.get("harness.kind"), c.labels.get("harness.pid")) for c in left]
    assert docker_client.networks.list(filters={"label": f"harness.run={label}"}) == []
    resumed = harness("resume", "k", "--json")
    assert resumed.code == 0 and resumed.json()["outcome"] == "verified", resumed.stdout + resumed.stderr
    runs = [c for c in read_records(harness.session_dir("k")) if isinstance(c, ToolRecord) and c.name == "run_tests"]
    assert runs[-1].text.startswith("exit_code=0"), "the service answered the resumed run"
    assert docker_client.containers.list(all=True, filters={"label": f"harness.run={label}"}) == []
    assert docker_client.networks.list(filters={"label": f"harness.run={label}"}) == []


DB = """import os, pathlib, pwd, http.server as h
data = pathlib.Path("/var/lib/db/data")
data.mkdir()
(data / "PG_VERSION").write_text("16")
me = pwd.getpwuid(os.getuid()).pw_name


class Answer(h.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(f"{me} {(data / 'PG_VERSION').read_text()}".encode())


h.ThreadingHTTPServer(("", 5432), Answer).serve_forever()
"""
DB_TEST = """import urllib.request


def test_the_database_runs_as_its_own_user_with_its_data_on_tmpfs():
    assert urllib.request.urlopen("http://db:5432/", timeout=10).read().decode() == "dbuser 16"
"""


@pytest.fixture
def db_image(docker_client, run_label, tmp_path) -> str:
    """An image like a database's: its own user (not the sandbox's), a data directory it must write."""
    base = next(  # (Podman names it localhost/harness/py311:...)
        i for i in present_images(docker_client) if any(unqualified(t).startswith("harness/py311:") for t in i.tags)
    )
    (tmp_path / "ctx").mkdir()
    (tmp_path / "ctx" / "server.py").write_text(DB)
    (tmp_path / "ctx" / "Dockerfile").write_text(
        f"FROM {base.id}\nUSER root\nRUN useradd --uid 999 --no-create-home dbuser && mkdir -p /var/lib/db"
        " && useradd --uid 0 --non-unique --no-create-home toor\n"  # a name for root
        "VOLUME /var/lib/db\n"  # as Postgres' image declares its data directory: each container gets a volume
        'COPY server.py /srv/server.py\nUSER dbuser\nCMD ["python3", "/srv/server.py"]\n'
    )
    tag = f"harness-test/db:{run_label.lower()}"
    docker_client.images.build(
        path=str(tmp_path / "ctx"), tag=tag, rm=True, pull=False, labels={"harness.run": run_label}
    )
    return tag


def _unlabelled_volumes(client) -> set[str]:
    """The engine's volumes that no container uses and that carry no label: an image's VOLUME makes one
    for each container (harness's own carry its labels on Docker; other tests make and remove volumes
    meanwhile, each with its container: one listed twice a second apart is no such passer-by)."""

    def listed() -> set[str]:
        return {v.name for v in client.volumes.list(filters={"dangling": True}) if not v.attrs.get("Labels")}

    first = listed()
    time.sleep(1.0)
    return first & listed()


def test_a_service_runs_as_its_images_own_user_with_a_writable_data_directory(
    tmp_path, db_image, run_label, docker_client
):
    """What a database image needs (Postgres: its own user, a data directory it declares a VOLUME) without
    root or capabilities, leaving no volume behind; root itself is refused in one line; a missing image is
    named, never pulled."""
    volumes = _unlabelled_volumes(docker_client)
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "test_db.py").write_text(DB_TEST)
    probe = "import socket; socket.create_connection(('127.0.0.1', 5432), timeout=2)"
    config = tmp_path / "db.toml"
    config.write_text(
        f'[services.db]\nimage = "{db_image}"\nuser = "dbuser"\ntmpfs = ["/var/lib/db"]\n'
        f'health = ["python3", "-c", "{probe}"]\n'
    )
    harness = Harness(tmp_path / "sessions", f"{run_label}-svcdb")
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump({"turns": [turn("Done.")]}))
    ran = harness(
        "run", "--image", "py311", "--model", f"scripted:{script}", str(repo), "--task", "Check the database.",
        "--verify", "python3 -m pytest -q test_db.py", "--config", str(config), "--json",
    )  # fmt: skip
    assert ran.code == 0 and ran.json()["outcome"] == "verified", ran.stdout + ran.stderr
    assert _unlabelled_volumes(docker_client) - volumes == set(), "the user's lookup and the service remove theirs"
    written = config.read_text()
    for spelling in ("0:0", "00", "+0", "-0", "000:000"):  # each is uid 0 as the engine reads it
        config.write_text(written.replace('user = "dbuser"', f'user = "{spelling}"'))
        refused = harness(
            "run",
            "--image",
            "py311",
            "--model",
            f"scripted:{script}",
            str(repo),
            "--task",
            "x",
            "--config",
            str(config),
        )
        assert refused.code == 78 and "never runs as root" in refused.stderr, (spelling, refused.stderr)
        assert "Traceback" not in refused.stderr
    config.write_text(written.replace('user = "dbuser"', 'user = "toor"'))  # the image's own name for uid 0
    named = harness(
        "run", "--image", "py311", "--model", f"scripted:{script}", str(repo), "--task", "x", "--config", str(config)
    )
    assert named.code != 0 and "is uid 0 (root)" in named.stderr and "Traceback" not in named.stderr, named.stderr
    config.write_text(written.replace(db_image, f"harness-test/absent:{run_label.lower()}"))  # a name: looked up in it
    absent = harness(
        "run", "--image", "py311", "--model", f"scripted:{script}", str(repo), "--task", "x", "--config", str(config)
    )
    assert absent.code != 0 and "is not present" in absent.stderr and "never pulled" in absent.stderr, absent.stderr
    assert "Traceback" not in absent.stderr


def test_a_batch_task_declares_its_services(tmp_path, project, run_label, docker_client):
    label = f"{run_label}-svcbatch"
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump({"turns": [turn("Running the tests.", ("run_tests", {})), turn("Done.")]}))
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text(yaml.safe_dump({
        "defaults": {"image": "py311", "read_only": []},
        "tasks": [{
            "id": "svc", "repo": str(project), "task": "Check the service.", "verify": "python3 -m pytest -q test_service.py",
            "services": {"web": {"image": "py311", "command": ["python3", "-c", SERVE], "health": ["python3", "-c", PROBE]}},
        }],
    }))  # fmt: skip
    harness = Harness(tmp_path / "sessions", label)
    ran = harness("batch", str(tasks), "--out", str(tmp_path / "out"), "--model", f"scripted:{script}", "--json")
    assert ran.code == 0, ran.stdout + ran.stderr
    [record] = [json.loads(p.read_text()) for p in (tmp_path / "out" / "runs").rglob("*.json")]
    assert record["verified"] is True, record
    assert docker_client.networks.list(filters={"label": f"harness.run={label}"}) == []


def test_a_service_that_ends_at_once_is_named_with_its_exit_status(tmp_path, project, run_label, docker_client):
    """A service that ends before it is ready and says nothing (started with the run's first call, the
    verification here): the one line gives its exit status."""
    config = tmp_path / "quick.toml"
    config.write_text(  # (never healthy: it is waited for until it ends)
        '[services.quick]\nimage = "py311"\ncommand = ["sh", "-c", "sleep 1; exit 3"]\nhealth = ["false"]\n'
    )
    label = f"{run_label}-svcquick"
    harness = Harness(tmp_path / "sessions", label)
    script = tmp_path / "s.yaml"
    script.write_text(yaml.safe_dump({"turns": [turn("Done.")]}))
    ran = harness(
        "run", "--image", "py311", "--model", f"scripted:{script}", str(project), "--task", "Check.",
        "--verify", "true", "--config", str(config),
    )  # fmt: skip
    assert ran.code == 75, ran.stdout + ran.stderr
    assert ran.stderr.strip() == "error: service quick stopped before it was ready (it exited with 3 and wrote nothing)"
    assert docker_client.containers.list(all=True, filters={"label": f"harness.run={label}"}) == []


@pytest.mark.docker
def test_a_firewall_that_drops_the_bridges_traffic_is_named_at_the_start(docker_client, run_label, tmp_path):
    """On rootful Podman the services network's bridge carries its traffic through this machine's
    firewall: one that drops it (here a rule of the test's own, first in the chain) is named as the
    services start, not left to every call's connection timing out; without it they start. (In this
    file: the rule drops what every Podman bridge carries, and this file's tests run one at a time.)"""
    kind, rootless = engine_kind(docker_client.version(), docker_client.info())
    if kind != "Podman" or rootless:
        pytest.skip(
            "rootful Podman's network only: on Docker and rootless Podman no firewall of this machine is between"
        )
    if os.geteuid() != 0 or shutil.which("iptables") is None:
        pytest.skip("needs root and iptables to add the dropping rule")
    from harness.assembly.engine import start_services
    from harness.config import ServiceConfig
    from sandbox.errors import SetupError
    from sandbox.spec import SandboxSpec

    host = os.environ.get("DOCKER_HOST")
    services = {"web": ServiceConfig(image="py311", command=["python3", "-c", SERVE])}
    spec = SandboxSpec(image="py311")
    chain = (
        "DOCKER-USER"
        if subprocess.run(["iptables", "-S", "DOCKER-USER"], capture_output=True).returncode == 0
        else "FORWARD"
    )
    drop = ["-i", "podman+", "-o", "podman+", "-m", "comment", "--comment", f"harness-test-{run_label}", "-j", "DROP"]
    subprocess.run(["iptables", "-I", chain, "1", *drop], check=True)
    try:
        with pytest.raises(SetupError, match=r"reached no answer from web: this machine's firewall drops") as named:
            start_services(host, run_label, "dropped", spec, tmp_path, services)
        assert "make podman" in str(named.value)
    finally:
        subprocess.run(["iptables", "-D", chain, *drop], check=True)
    running = start_services(host, run_label, "carried", spec, tmp_path, services)
    try:
        assert list(running.joining["extra_hosts"]) == ["web"]
    finally:
        running.stop()
    left = [
        n.name
        for n in docker_client.networks.list(filters={"label": f"harness.run={run_label}"})
        if n.name.startswith("harness-svc-")
    ]
    assert left == []
