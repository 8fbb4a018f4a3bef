"""Forks: a run over a real SDK client (a local wire server) forked after its second step into four
continuations with four models, as a batch. Each fork's first request carries exactly the parent's
messages up to that step (compared on the wire, byte for byte) and then the hint; each starts from
the parent's workspace then (same trees) and goes its own way; a fork of a fork; refusals (a step
that does not exist, a session still running) in one line with exit 64; the Python API; and a
client killed with -9 mid-batch, then the same command: each fork runs once."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from harness.batch.records import BatchDir
from harness.trajectory import ToolRecord, read_records
from tests.agent.conftest import ADD_FIX, CLI, ROOT, Harness, turn
from tests.providers.wire_server import Recorded, Reply, WireServer, openai_turn

pytestmark = [pytest.mark.docker, pytest.mark.timeout(600)]
KEY = "sk-fork-test-00112233445566"
HINT = "Try a different file name this time."
FORKS = ["fork-a", "fork-b", "fork-c", "fork-d"]


def _steps(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "steps.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def forked(tmp_path_factory, run_label):
    """The parent run, then `harness fork parent --at 2` with four models and a hint."""
    tmp = tmp_path_factory.mktemp("fork")
    harness = Harness(tmp / "sessions", f"{run_label}-fork")
    queues: dict[str, list[Reply]] = {
        "parent": [
            openai_turn("Reading.", [("c1", "read_file", json.dumps({"path": "calc/ops.py"}))]),
            openai_turn("Fixing.", [("c2", "apply_patch", json.dumps(ADD_FIX))]),
            openai_turn("Listing.", [("c3", "list_dir", json.dumps({"path": "calc"}))]),
            openai_turn("Done."),
        ],
        **{
            name: [
                openai_turn("Mine.", [("w1", "write_file", json.dumps({"path": f"{name}.txt", "content": name}))]),
                openai_turn("Done."),
            ]
            for name in FORKS
        },
    }

    def answer(request: Recorded) -> Reply | None:
        model = request.body.get("model") if isinstance(request.body, dict) else None
        return queues[model].pop(0) if queues.get(model) else None

    env = {"OPENAI_API_KEY": KEY}
    with WireServer() as server:
        server.require(answer)
        parent = harness.run("openai:parent", "--base-url", server.openai_base_url, session="parent", env=env)
        out = tmp / "forks"
        models = [arg for name in FORKS for arg in ("--model", f"openai:{name}")]
        forked = harness("fork", "parent", "--at", "2", *models, "--hint", HINT, "--out", str(out), "--json", env=env)
        bodies = [(r.body["model"], r.body) for r in server.requests if isinstance(r.body, dict)]
    assert parent.code == 0 and parent.json()["outcome"] == "verified", parent.stdout + parent.stderr
    assert forked.code == 0, forked.stdout + forked.stderr
    return harness, out, bodies


def test_each_fork_resends_the_parents_prefix_then_goes_its_own_way(forked, browser):
    harness, out, bodies = forked
    parent_requests = [body for model, body in bodies if model == "parent"]
    after_two = parent_requests[2]  # the request of the parent's step 3: everything through step 2
    records = {r.key.model: r for r in BatchDir(out).records()}
    assert sorted(records) == sorted([f"openai:{name}" for name in FORKS] + ["openai:parent (parent)"])
    parent_record = records["openai:parent (parent)"]
    assert parent_record.outcome == "verified" and parent_record.session_dir == str(harness.session_dir("parent"))
    parent_dir = harness.session_dir("parent")
    parent_steps = _steps(parent_dir)
    snap = next(r.snapshot_step for r in read_records(parent_dir) if r.kind == "step" and r.step == 2)
    finals = set()
    for name in FORKS:
        first = next(body for model, body in bodies if model == name)
        sent = first["messages"]
        prefix = after_two["messages"]
        assert json.dumps(sent[: len(prefix)]) == json.dumps(prefix), "the parent's messages, byte for byte"
        assert sent[len(prefix) :] == [{"role": "user", "content": HINT}]
        assert json.dumps(first["tools"]) == json.dumps(after_two["tools"])
        record = records[f"openai:{name}"]
        assert record.outcome == "verified", record
        folder = Path(record.session_dir)
        steps = _steps(folder)
        assert [s["tree"] for s in steps[: snap + 1]] == [s["tree"] for s in parent_steps[: snap + 1]]
        assert len(steps) == snap + 2, "the parent's steps through the fork point, then its own"
        assert not (folder / "workspace").exists(), "an ended fork keeps its snapshots, not a workspace"
        finals.add(steps[-1]["tree"])
        info = json.loads((folder / "session.json").read_text())
        assert info["parent"]["session"] == "parent" and info["parent"]["step"] == 2
        calls = [r for r in read_records(folder) if isinstance(r, ToolRecord)]
        assert [c.name for c in calls] == ["read_file", "apply_patch", "write_file"]
        diff = harness("diff", folder.name, "--state-dir", str(out / "sessions"))
        assert f"+{name}" in diff.stdout and "+    return a + b" in diff.stdout, diff.stderr
        shown = harness("show", folder.name, "--state-dir", str(out / "sessions"))
        assert shown.code == 0 and "write_file" in shown.stdout, shown.stderr
    assert len(finals) == 4, "four continuations, four different end states"
    first = Path(records["openai:fork-a"].session_dir)
    where = ("--state-dir", str(out / "sessions"))
    listed = harness("session", "list", *where, env={"COLUMNS": "300"})
    assert listed.stdout.count("parent at step 2") == 4, listed.stdout
    exported = harness("export", first.name, *where)
    assert exported.code == 0 and "+fork-a" in exported.stdout and "+    return a + b" in exported.stdout
    back = harness("rollback", first.name, "--to", "1", *where)
    assert back.code == 0 and not (first / "workspace" / "fork-a.txt").exists(), back.stdout + back.stderr
    assert "return a - b" in (first / "workspace" / "calc" / "ops.py").read_text(), "the parent's state then"
    replayed = harness("replay", first.name, "--json", *where)
    assert replayed.code == 0 and json.loads(replayed.stdout)["diverged"] == 0, replayed.stdout + replayed.stderr
    viewed = harness("view", first.name, "--state-dir", str(out / "sessions"), "--no-open")
    assert viewed.code == 0, viewed.stderr
    browser.get((first / "view.html").as_uri())
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == [], "the page's policy holds"
    family = [item.text.splitlines()[0] for item in browser.find_elements("css selector", "#family li")]
    assert len(browser.find_elements("css selector", "#family ul ul li")) == 4, "the forks under their parent"
    assert len(family) == 5 and family[0].startswith("the root · parent verified"), family
    assert sum("forked at step 2" in line for line in family) == 4
    assert any("(this session)" in line and first.name in line for line in family)
    report = (out / "report.md").read_text()
    assert (out / "report.html").is_file() and "fork-a" in report and "openai:parent (parent)" in report


def test_a_fork_of_a_fork_and_the_refusals(forked, tmp_path):
    harness, out, _ = forked
    child = next(r for r in BatchDir(out).records() if r.key.model == "openai:fork-a")
    script = tmp_path / "s.yaml"
    # another model takes the conversation over: its script's first turn answers first (no padding)
    script.write_text(yaml.safe_dump({"turns": [
        turn("Checking.", ("read_file", {"path": "fork-a.txt"})), turn("Done."),
    ]}))  # fmt: skip
    sessions = str(out / "sessions")
    again = harness(
        "fork", Path(child.session_dir).name, "--at", "3", "--model", f"scripted:{script}",
        "--state-dir", sessions, "--out", str(tmp_path / "grand"), "--json",
    )  # fmt: skip
    assert again.code == 0, again.stdout + again.stderr
    [grand] = [r for r in BatchDir(tmp_path / "grand").records() if not r.key.model.endswith("(parent)")]
    calls = [r for r in read_records(Path(grand.session_dir)) if isinstance(r, ToolRecord)]
    assert calls[-1].name == "read_file" and "fork-a" in calls[-1].text and not calls[-1].is_error
    assert grand.outcome == "verified"

    missing = harness("fork", "parent", "--at", "9", "--model", f"scripted:{script}", "--out", str(tmp_path / "x"))
    assert missing.code == 64 and "there is no step 9" in missing.stderr, missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1 and not (tmp_path / "x").exists()
    lock = os.open(harness.session_dir("parent") / "run.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(lock, fcntl.LOCK_EX)  # as a controller running the session holds it
    try:
        running = harness("fork", "parent", "--at", "1", "--model", f"scripted:{script}", "--out", str(tmp_path / "y"))
    finally:
        os.close(lock)
    assert running.code == 64 and "still running" in running.stderr, running.stderr
    assert len(running.stderr.strip().splitlines()) == 1

    # a parent whose snapshot is damaged: refused in one line (65), nothing made, no reference added
    copy = tmp_path / "damaged"
    shutil.copytree(harness.state_dir, copy, symlinks=True)
    info = json.loads((copy / "parent" / "session.json").read_text())
    (copy / "parent" / "session.json").write_text(json.dumps({**info, "objects": str(copy / ".objects")}))
    tree = _steps(copy / "parent")[1]["tree"]
    objects = copy / ".objects" / "git" / "objects"
    loose = objects / tree[:2] / tree[2:]
    if loose.is_file():
        loose.chmod(0o644)
        loose.write_bytes(b"not an object")
    else:  # packed when the run ended: the packs go (every object of the copy is missing then)
        for pack in (objects / "pack").iterdir():
            pack.unlink()
    refs = sorted((copy / ".objects" / "sessions").iterdir())
    damaged = harness("fork", "parent", "--at", "2", "--model", f"scripted:{script}", "--state-dir", str(copy),
                      "--out", str(tmp_path / "z"))  # fmt: skip
    assert damaged.code == 65 and "cannot be read" in damaged.stderr, damaged.stderr
    assert len(damaged.stderr.strip().splitlines()) == 1 and not (tmp_path / "z").exists()
    assert sorted((copy / ".objects" / "sessions").iterdir()) == refs and not list(copy.glob("*/workspace.building-*"))


def test_the_python_api_and_a_killed_fork_batch_runs_each_fork_once(forked, tmp_path, run_label):
    import harness as api

    harness, _, _ = forked
    slow, after_two = tmp_path / "slow.yaml", tmp_path / "after-two.yaml"
    slow.write_text(yaml.safe_dump({"turns": [
        turn("Waiting.", ("run_command", {"command": "sleep 4"})), turn("Done."),
    ]}))  # fmt: skip
    after_two.write_text(yaml.safe_dump({"turns": [turn("Done.")]}))
    out = tmp_path / "killed"
    args = [*CLI, "fork", "parent", "--at", "1", "-n", "4", "--model", f"scripted:{slow}", "--out", str(out),
            "--workers", "2", "--json"]  # fmt: skip
    env = {**harness.env, "HARNESS_RUN_ID": f"{run_label}-fork"}
    client = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and len(list((out / "runs").glob("*/*/*.json"))) < 2:
        time.sleep(0.2)
    client.send_signal(signal.SIGKILL)
    client.wait(timeout=30)
    before = len(BatchDir(out).records()) - 1  # the parent's record is written first
    assert 1 <= before < 4
    rest = subprocess.run(args, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)
    assert rest.returncode == 0, rest.stderr
    result = json.loads(rest.stdout.strip().splitlines()[-1])
    assert result["ran"] == 4 - before and result["skipped"] == before
    records = [r for r in BatchDir(out).records() if not r.key.model.endswith("(parent)")]
    assert len(records) == 4 and len({r.session_id for r in records}) == 4
    for record in records:
        starts = [r for r in read_records(Path(record.session_dir)) if r.kind == "event" and r.event == "fork"]
        assert len(starts) == 1, "each fork made once"

    made = api.fork(
        "parent", at=2, model=f"scripted:{after_two}", state_dir=harness.state_dir, out=tmp_path / "api",
        run_id=f"{run_label}-fork",
    )  # fmt: skip
    assert [r.outcome for r in made] == ["verified"]
    assert sys.modules["harness"].fork is api.fork


@pytest.mark.slow
def test_forks_run_on_a_worker_that_lacks_the_parents_objects(tmp_path, run_label):
    """The forks' worker cannot see the client's folder (as on another machine): the parent session
    (its files and one pack of its objects) is shipped once, made a session of the worker's store,
    and each fork continues from it there."""
    from tests.batch.test_cluster import hiding, serving

    client_side, store = tmp_path / "client", tmp_path / "worker-store"
    label = f"{run_label}-forkworker"
    harness = Harness(client_side / "state", label)
    parent_script, fork_script = client_side / "parent.yaml", client_side / "fork.yaml"
    client_side.mkdir()
    parent_script.write_text(yaml.safe_dump({"turns": [
        turn("Reading.", ("read_file", {"path": "calc/ops.py"})), turn("Fixing.", ("apply_patch", ADD_FIX)),
        turn("Done."),
    ]}))  # fmt: skip
    fork_script.write_text(yaml.safe_dump({"turns": [
        turn("Mine.", ("write_file", {"path": "remote.txt", "content": "made on the worker\n"})), turn("Done."),
    ]}))  # fmt: skip
    assert harness.run(f"scripted:{parent_script}", session="parent").code == 0
    out = client_side / "forks"
    with serving(label, wrap=hiding(client_side), extra=["--store", str(store)]) as (address, _):
        done = harness(
            "fork", "parent", "--at", "2", "-n", "2", "--model", f"scripted:{fork_script}", "--out", str(out),
            "--cluster", address, "--json",
        )  # fmt: skip
    assert done.code == 0, done.stdout + done.stderr
    records = [r for r in BatchDir(out).records() if not r.key.model.endswith("(parent)")]
    assert [r.outcome for r in records] == ["verified", "verified"], records
    assert sorted(r.repo_source for r in records) == ["cached", "fetched"], "the parent shipped once"
    for record in records:
        assert record.patch and "+made on the worker" in record.patch and "return a + b" in record.patch
        assert record.worker_session.split(":", 1)[1].startswith(str(store.resolve()))
    adopted = list((store / "sessions").glob("*/parent-*-parent"))
    assert len(adopted) == 1 and (adopted[0] / "steps.jsonl").is_file()
