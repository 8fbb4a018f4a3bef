"""MCP servers in the sandbox: a real server built here with the official SDK (its image: the py311
image plus the SDK copied from this environment), declared in a config file, started in a hardened
container of its own for the run. Its tools are listed in the menu, called by a scripted model,
gated and recorded; the server cannot reach the network or write the workspace (read-only by
default); one that dies is started again once, then its tools say so; nothing is left after the
run, nor after kill -9 of the controller once `harness sandbox prune` ran; resume starts it again."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import tarfile
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from harness.trajectory import ToolRecord, read_records
from sandbox.docker.engine import located
from tests.agent.conftest import Harness, turn

pytestmark = [pytest.mark.docker]
ROOT = Path(__file__).resolve().parents[2]

SERVER = '''
import os, socket, sys
from mcp.server.mcpserver import MCPServer

app = MCPServer("projtools")
RECEIVED = []


@app.tool()
def echo(text: str) -> str:
    """Say the text back."""
    RECEIVED.append("echo")
    return text


@app.tool()
def received() -> str:
    """Which of echo's calls reached this server."""
    return f"echo calls received: {len(RECEIVED)}"


@app.tool()
def word_count(path: str) -> str:
    """Count the words of a workspace file (path relative to the workspace root)."""
    with open(os.path.join("/workspace", path)) as handle:
        return f"{len(handle.read().split())} words in {path}"


@app.tool()
def try_write(path: str) -> str:
    """Try to write a file into the workspace."""
    try:
        with open(os.path.join("/workspace", path), "w") as handle:
            handle.write("written by the server")
        return "wrote it"
    except OSError as error:
        return f"could not write: {error.strerror}"


@app.tool()
def try_network() -> str:
    """Try to reach an address outside."""
    try:
        socket.create_connection(("192.0.2.1", 80), timeout=3)
        return "connected"
    except OSError as error:
        return f"no network: {error.strerror or error}"


@app.tool()
def fetch(url: str) -> str:
    """GET a URL through the proxy the container is given (its egress, when hosts are listed)."""
    import urllib.request

    for name in ("NO_PROXY", "no_proxy"):
        os.environ.pop(name, None)
    try:
        return urllib.request.urlopen(url, timeout=20).read().decode()
    except OSError as error:
        return f"no answer: {error}"


@app.tool()
def crash() -> str:
    """End the server process at once."""
    print("crashing on purpose", file=sys.stderr, flush=True)
    os._exit(3)


app.run()
'''


def _closure(name: str, seen: dict[str, metadata.Distribution], extras: frozenset[str] = frozenset()) -> None:
    """name's distribution and everything it requires here (markers evaluated, extras followed)."""
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return
    key = dist.metadata["Name"].lower().replace("_", "-")
    if key in seen and not extras:
        return
    seen[key] = dist
    for text in dist.requires or []:
        requirement = Requirement(text)
        wanted = requirement.marker is None or any(
            requirement.marker.evaluate({"extra": extra}) for extra in ("", *extras)
        )
        if wanted:
            _closure(requirement.name, seen, frozenset(requirement.extras))


@pytest.fixture(scope="module")
def mcp_image(docker_client, run_label) -> str:
    """harness-test/mcp-server: the py311 image with the MCP SDK (and what it needs) from this venv."""
    listed = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "harness"), "images", "list", "--json"], capture_output=True, text=True
    )
    base = next(row["ref"] for row in json.loads(listed.stdout) if row["name"] == "py311")
    tag = f"harness-test/mcp-server:{run_label.lower()}"
    docker_client.images.build(fileobj=mcp_context(base), custom_context=True, tag=tag, rm=True, pull=False)
    yield tag
    docker_client.images.remove(tag, force=True)


def mcp_context(base: str) -> io.BytesIO:
    """The build context of an MCP server's image: base with the SDK (and what it needs) from this venv."""
    dists: dict[str, metadata.Distribution] = {}
    _closure("mcp", dists)
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as context:
        dockerfile = f"FROM {base}\nCOPY site /opt/mcp-site\n".encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile)
        context.addfile(info, io.BytesIO(dockerfile))
        for dist in dists.values():
            for file in dist.files or []:
                source = Path(str(dist.locate_file(file)))
                if source.is_file() and "__pycache__" not in file.parts and not str(file).startswith(".."):
                    context.add(str(source), arcname=f"site/{file}")
    archive.seek(0)
    return archive


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("mcp") / "repo"
    shutil.copytree(ROOT / "examples" / "calc", repo)
    (repo / "tools").mkdir()
    (repo / "tools" / "server.py").write_text(SERVER)
    (repo / "notes.txt").write_text("one two three four five\n")
    return repo


def _config(folder: Path, image: str, extra: str = "") -> Path:
    path = folder / "config.toml"
    path.write_text(
        f'[mcp.projtools]\ncommand = ["python3", "/workspace/tools/server.py"]\nimage = "{image}"\n'
        'env = { PYTHONPATH = "/opt/mcp-site" }\ntimeout_s = 60\n\n'
        '[[gate.rules]]\nname = "no-echo"\naction = "deny"\ntools = ["projtools__echo"]\n' + extra
    )
    return path


def test_an_mcp_servers_tools_are_listed_called_gated_and_recorded(
    tmp_path, project, mcp_image, run_label, docker_client
):
    harness = Harness(tmp_path / "sessions", f"{run_label}-mcp")
    config = _config(tmp_path, mcp_image)
    script = tmp_path / "script.yaml"
    import yaml

    script.write_text(yaml.safe_dump({"turns": [
        turn("Counting.", ("projtools__word_count", {"path": "notes.txt"}), ("projtools__try_write", {"path": "calc/x.txt"})),
        turn("Network?", ("projtools__try_network", {}), ("projtools__echo", {"text": "hi"})),
        turn("Did echo arrive?", ("projtools__received", {})),
        turn("Crash it.", ("projtools__crash", {})),
        turn("Again after the restart.", ("projtools__word_count", {"path": "notes.txt"})),
        turn("Crash it again.", ("projtools__crash", {})),
        turn("And now?", ("projtools__word_count", {"path": "notes.txt"})),
        turn("Done."),
    ]}))  # fmt: skip
    ran = harness(
        "run", "--image", "py311", "--model", f"scripted:{script}", str(project), "--task", "Use the project tools.",
        "--no-verify", "--config", str(config), "--session", "m", "--json",
    )  # fmt: skip
    assert ran.code in (0, 1, 10, 11), ran.stdout + ran.stderr
    calls = [r for r in read_records(harness.session_dir("m")) if isinstance(r, ToolRecord)]
    said = {(c.name, c.step): c for c in calls}
    assert said[("projtools__word_count", 1)].text.startswith("5 words in notes.txt")
    refused = "Permission denied" if located(docker_client)[1] else "Read-only file system"  # a copy elsewhere
    assert said[("projtools__try_write", 1)].text.startswith(f"could not write: {refused}")
    assert not (harness.session_dir("m") / "workspace" / "calc" / "x.txt").exists()
    assert said[("projtools__try_network", 2)].text.startswith("no network")
    denied = said[("projtools__echo", 2)]
    assert denied.error_kind == "denied" and denied.decision.rule == "no-echo"
    assert said[("projtools__received", 3)].text == "echo calls received: 0", "a denied call never reaches it"
    crashed = said[("projtools__crash", 4)]
    assert crashed.error_kind == "mcp_server_down" and "crashing on purpose" in crashed.text
    assert "started again for the next call" in crashed.text
    assert said[("projtools__word_count", 5)].text.startswith("5 words"), "restarted once after it died"
    again = said[("projtools__crash", 6)]
    assert again.error_kind == "mcp_server_down" and "started again" not in again.text
    down = said[("projtools__word_count", 7)]
    assert down.is_error and down.error_kind == "mcp_server_down" and "cannot be started again" in down.text
    assert all(c.decision is not None for c in calls) and len(calls) == 9
    left = docker_client.containers.list(all=True, filters={"label": f"harness.run={run_label}-mcp"})
    assert left == [], "the servers end with the run"
    listed = harness("tools", "list", "--session", "m", "--json")
    menu = {tool["function"]["name"]: tool["function"] for tool in json.loads(listed.stdout)}
    assert {"read_file", "run_command", "projtools__word_count", "projtools__crash"} <= menu.keys(), listed.stderr
    assert "Count the words" in menu["projtools__word_count"]["description"], "the server's own description"
    assert menu["projtools__word_count"]["parameters"]["required"] == ["path"]


def test_kill_9_leaves_nothing_after_prune_and_resume_starts_the_server_again(
    tmp_path, project, mcp_image, run_label, docker_client
):
    import yaml

    label = f"{run_label}-mcpkill"
    harness = Harness(tmp_path / "sessions", label)
    config = _config(tmp_path, mcp_image)
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"turns": [
        turn("Counting.", ("projtools__word_count", {"path": "notes.txt"})),
        turn("Counting again.", ("projtools__word_count", {"path": "README.md"})),
        turn("Done."),
    ]}))  # fmt: skip
    args = [
        "run", "--image", "py311", "--model", f"scripted:{script}", str(project), "--task", "Count.",
        "--no-verify", "--config", str(config), "--session", "k", "--json",
    ]  # fmt: skip
    crashed = harness(*args, env={"HARNESS_CRASH_AT": "model_answered:2"})
    assert crashed.code == -9, crashed.stderr
    servers = docker_client.containers.list(all=True, filters={"label": [f"harness.run={label}", "harness.kind=mcp"]})
    assert servers, "the killed controller's server is still there"
    pruned = harness("sandbox", "prune")
    assert pruned.code == 0, pruned.stderr
    assert docker_client.containers.list(all=True, filters={"label": f"harness.run={label}"}) == []
    resumed = harness("resume", "k", "--json")
    assert resumed.code in (0, 1, 10), resumed.stdout + resumed.stderr
    calls = [r for r in read_records(harness.session_dir("k")) if isinstance(r, ToolRecord)]
    assert calls[-1].name == "projtools__word_count" and not calls[-1].is_error, calls[-1].text
    assert "words in README.md" in calls[-1].text, "the server was started again for the resumed run"
    assert docker_client.containers.list(all=True, filters={"label": f"harness.run={label}"}) == []


def test_replay_issues_the_mcp_calls_again(tmp_path, project, mcp_image, run_label):
    import yaml

    harness = Harness(tmp_path / "sessions", f"{run_label}-mcpreplay")
    config = _config(tmp_path, mcp_image)
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"turns": [
        turn("Counting.", ("projtools__word_count", {"path": "notes.txt"})), turn("Done."),
    ]}))  # fmt: skip
    ran = harness(
        "run", "--image", "py311", "--model", f"scripted:{script}", str(project), "--task", "Count.",
        "--no-verify", "--config", str(config), "--session", "r", "--json",
    )  # fmt: skip
    assert ran.code in (0, 1, 10), ran.stdout + ran.stderr
    replayed = harness("replay", "r", "--json")
    assert replayed.code == 0, replayed.stdout + replayed.stderr
    report = json.loads(replayed.stdout)
    assert report["diverged"] == 0 and len(report["steps"]) == 1, report


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_worker_machine_runs_a_tasks_mcp_server_and_service(tmp_path, project, mcp_image, run_label, docker_client):
    """A batch on a cluster whose worker cannot see the client's folder (as on another machine): the
    task's repository is shipped to it, its MCP server and its service run beside the session there,
    the task's tests reach the service by name, and nothing is left on the worker's engine after."""
    import yaml

    from harness.batch.records import BatchDir
    from sandbox.tree import copy_tree
    from tests.batch.test_batch_run import _batch, _result
    from tests.batch.test_cluster import hiding, serving
    from tests.tools.test_services import PROBE, SERVE, TEST

    label = f"{run_label}-mcpworker"
    client_side = tmp_path / "client"
    copy_tree(project, client_side / "repo")
    (client_side / "repo" / "test_service.py").write_text(TEST)
    (client_side / "script.yaml").write_text(yaml.safe_dump({"turns": [
        turn("Counting.", ("projtools__word_count", {"path": "notes.txt"})),
        turn("Testing.", ("run_command", {"command": "python3 -m pytest -q test_service.py"})),
        turn("Done."),
    ]}))  # fmt: skip
    (client_side / "tasks.yaml").write_text(yaml.safe_dump({
        "defaults": {"image": "py311", "read_only": [], "model": [f"scripted:{client_side / 'script.yaml'}"]},
        "tasks": [{
            "id": "both", "repo": str(client_side / "repo"), "task": "Count and check the service.",
            "verify": "python3 -m pytest -q test_service.py",
            "mcp": {"projtools": {"command": ["python3", "/workspace/tools/server.py"], "image": mcp_image,
                                  "env": {"PYTHONPATH": "/opt/mcp-site"}}},
            "services": {"web": {"image": "py311", "command": ["python3", "-c", SERVE], "health": ["python3", "-c", PROBE]}},
        }],
    }))  # fmt: skip
    out = client_side / "out"
    with serving(label, wrap=hiding(client_side), extra=["--store", str(tmp_path / "worker-store")]) as (
        address,
        _,
    ):
        done = _batch(str(client_side / "tasks.yaml"), "--out", str(out), "--cluster", address, label=label)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _result(done)["verified"] == 1, done.stdout
    [record] = BatchDir(out).records()
    assert record.repo_source == "fetched", "the worker could not see the repository: it was shipped"
    calls = [r for r in read_records(Path(record.session_dir)) if isinstance(r, ToolRecord)]
    assert calls[0].name == "projtools__word_count" and calls[0].text.startswith("5 words"), calls[0].text
    assert calls[1].text.startswith("exit_code=0") and "2 passed" in calls[1].text, calls[1].text
    assert docker_client.containers.list(all=True, filters={"label": f"harness.run={label}"}) == []
    assert docker_client.networks.list(filters={"label": f"harness.run={label}"}) == []


@pytest.fixture(scope="module")
def mcp_site(tmp_path_factory) -> Path:
    """The MCP SDK and what it needs, as files a setup command copies into the image's virtual
    environment (what `pip install mcp` from an index leaves there; the tests reach no index)."""
    site = tmp_path_factory.mktemp("mcp-site") / "site"
    dists: dict[str, metadata.Distribution] = {}
    _closure("mcp", dists)
    for dist in dists.values():
        for file in dist.files or []:
            source = Path(str(dist.locate_file(file)))
            if source.is_file() and "__pycache__" not in file.parts and not str(file).startswith(".."):
                target = site / file
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(source, target)
    return site


def test_an_mcp_server_starts_from_the_image_setup_made_and_one_that_exits_is_said_at_once(
    tmp_path, project, mcp_site, run_label, docker_client
):
    """The server declares no image: it starts from the session's image after setup, which installed
    the SDK it imports (before, it started from the base image and the run waited 60 s for nothing).
    A server that exits as it starts is reported in seconds, with what it wrote on stderr."""
    import time

    import yaml

    harness = Harness(tmp_path / "sessions", f"{run_label}-mcpsetup")
    install = "cp -r /mnt/mcp-site/. $(python3 -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])')/"
    config = tmp_path / "config.toml"
    config.write_text('[mcp.projtools]\ncommand = ["python3", "/workspace/tools/server.py"]\ntimeout_s = 60\n')
    script = tmp_path / "script.yaml"
    script.write_text(yaml.safe_dump({"turns": [
        turn("Counting.", ("projtools__word_count", {"path": "notes.txt"})), turn("Done."),
    ]}))  # fmt: skip
    ran = harness(
        "run", "--image", "py311", "--model", f"scripted:{script}", str(project), "--task", "Count.", "--no-verify",
        "--config", str(config), "--session", "s", "--setup", install, "--setup-mount", f"{mcp_site}:/mnt/mcp-site",
        "--json",
    )  # fmt: skip
    assert ran.code == 10, ran.stdout + ran.stderr
    calls = [r for r in read_records(harness.session_dir("s")) if isinstance(r, ToolRecord)]
    assert calls[0].text.startswith("5 words in notes.txt"), calls[0].text

    broken = tmp_path / "broken.toml"
    broken.write_text('[mcp.gone]\ncommand = ["python3", "-c", "import no_such_module_here"]\n')
    started = time.monotonic()
    failed = harness(
        "run", "--image", "py311", "--model", f"scripted:{script}", str(project), "--task", "Count.", "--no-verify",
        "--config", str(broken), "--session", "b",
    )  # fmt: skip
    took = time.monotonic() - started
    assert failed.code == 78 and "MCP server gone exited as it started" in failed.stderr, failed.stderr
    assert "No module named 'no_such_module_here'" in failed.stderr and took < 40, (took, failed.stderr)
    assert docker_client.containers.list(all=True, filters={"label": f"harness.run={run_label}-mcpsetup"}) == []
