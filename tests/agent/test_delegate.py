"""Sub-agents through the CLI, real containers and a scripted model (its children scripted under
`agents`): the shipped example ends verified with the child's change in the run's patch, and so does
the same run killed (-9) in the middle of its child and resumed; `show`, the spans, the ATIF export
(Harbor's validator) and `replay` carry the tree; a child that runs past its reserve stops with
`limit:` while the run goes on with the rest, the tree's totals are the sum of its parts and never
pass the run's limits; two children at once work on one base, one change applied and the other
reported as a conflict; the caps on children at once and on depth refuse with a clear error."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.trajectory import EVERY_AGENT, DelegateRecord, read_records
from tests.agent.conftest import ADD_FIX, EXAMPLE, ROOT, Harness, turn
from tests.harbor_venv import validate
from tests.telemetry.test_run_spans import spans_in

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]

EXAMPLE_SCRIPT = ROOT / "examples" / "delegate-fix.yaml"


def _usage(step: dict[str, Any], tokens: int = 100) -> dict[str, Any]:
    return {**step, "usage": {"input_tokens": tokens, "output_tokens": 0}, "cost_usd": 0.001}


def _script(folder: Path, name: str, turns: list[dict[str, Any]], agents: dict[str, list[dict[str, Any]]]) -> str:
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump({"turns": turns, "agents": {k: {"turns": v} for k, v in agents.items()}}))
    return f"scripted:{path}"


def _delegates(harness: Harness, session: str, phase: str = "end") -> dict[str, DelegateRecord]:
    every = read_records(harness.session_dir(session), EVERY_AGENT)
    return {r.child: r for r in every if isinstance(r, DelegateRecord) and r.phase == phase}


@pytest.fixture(scope="module")
def example(tmp_path_factory, run_label) -> tuple[Harness, Path]:
    """The shipped example twice: straight through (with spans), and killed in its child's second turn
    then resumed."""
    folder = tmp_path_factory.mktemp("delegate")
    harness = Harness(folder / "sessions", run_label)
    model = f"scripted:{EXAMPLE_SCRIPT}"
    ran = harness.run(model, "--delegate-depth", "1", "--otel-file", str(folder / "spans.jsonl"), session="straight")
    assert ran.code == 0, ran.stdout + ran.stderr
    crashed = harness.run(
        model, "--delegate-depth", "1", session="crashed", env={"HARNESS_CRASH_AT": "child_turn_recorded:2"}
    )
    assert crashed.code == -9, crashed.stdout + crashed.stderr
    return harness, folder


def test_the_example_ends_verified_with_the_childs_change_in_the_patch(example):
    harness, folder = example
    shown = harness("show", "straight", "--json").json()
    assert shown["outcome"] == "verified", shown
    assert shown["steps"] == 4 and shown["subagent_steps"] == 4
    patch = Path(shown["patch"]).read_text()
    assert "+    return a + b" in patch, "the child's fix is in the run's patch"
    [end] = _delegates(harness, "straight").values()
    assert end.child == "d1" and end.change == "applied" and end.paths == ["calc/ops.py"]
    assert end.outcome == "unverified" and "add() in calc/ops.py" in end.final
    state = json.loads((harness.session_dir("straight") / "state.json").read_text())
    assert state["spent"]["steps"] == shown["steps"] + shown["subagent_steps"], "the tree's steps, counted once"
    child = harness.state_dir / end.session
    assert child.is_dir() and not (child / "trajectory.jsonl").exists(), "its records are in the run's file"
    text = harness("show", "straight").stdout
    assert "sub-agent d1 started" in text and "d1 step 2" in text and "(+4 by sub-agents)" in text
    own = harness("show", end.session).stdout  # the child's session shows its part of the run's file
    assert "sub-agent d1 of session straight" in own and "add() subtracts" in own and "unverified" in own
    listed = harness("session", "list").stdout
    assert "sub-agent d1 of straight" in listed
    assert harness("view", "straight", "--no-open").code == 0
    page = (harness.session_dir("straight") / "view.html").read_text()
    assert "sub-agent <b>d1</b> · unverified" in page and "change applied: calc/ops.py" in page
    assert 'id="step-d1-2"' in page and "4 (+4 by sub-agents)" in page
    spans = spans_in(folder / "spans.jsonl")
    by_id = {s["span_id"]: s for s in spans}
    [child_span] = [s for s in spans if s["name"] == "invoke_agent d1"]
    assert by_id[child_span["parent_id"]]["name"] == "execute_tool delegate"
    assert by_id[by_id[child_span["parent_id"]]["parent_id"]]["name"] == "invoke_agent harness"
    under = [s["name"] for s in spans if s["parent_id"] == child_span["span_id"]]
    assert under.count("chat delegate-fix.yaml") == 4 and "execute_tool apply_patch" in under
    assert child_span["attributes"]["harness.outcome"] == "unverified"


def test_kill_9_in_the_child_then_resume_continues_the_child_then_the_run(example):
    harness, folder = example
    assert _delegates(harness, "crashed", "start") and not _delegates(harness, "crashed"), "killed inside d1"
    resumed = harness("resume", "crashed", "--json")
    assert resumed.code == 0 and resumed.json()["outcome"] == "verified", resumed.stdout + resumed.stderr
    every = read_records(harness.session_dir("crashed"), EVERY_AGENT)
    child = [r for r in every if r.agent == "d1"]
    assert any(r.kind == "event" and r.event == "resumed" for r in child), "the child picked up where it stopped"
    patches = [r for r in child if r.kind == "tool" and r.name == "apply_patch"]
    assert len(patches) == 1, "the child's turn cut short ran its call once"
    starts = [r for r in every if isinstance(r, DelegateRecord) and r.phase == "start"]
    assert len(starts) == 1, "the resume ran the same child, not a new one"
    result = resumed.json()
    state = json.loads((harness.session_dir("crashed") / "state.json").read_text())
    assert result["subagent_steps"] == 4 and state["spent"]["steps"] == result["steps"] + 4
    assert "+    return a + b" in Path(result["patch"]).read_text()
    # replay re-issues the tree: the run's calls and, where its delegate call was, the child's
    replayed = harness("replay", "crashed", "--json")
    assert replayed.code == 0, replayed.stdout + replayed.stderr
    report = replayed.json()
    assert report["diverged"] == 0
    assert [s["name"] for s in report["steps"] if s["agent"] == "d1"] == ["read_file", "apply_patch", "run_tests"]
    # the ATIF export embeds the child's trajectory, referenced from the delegate call's result
    target = folder / "crashed.atif.json"
    assert harness("export", "crashed", "--format", "atif", "-o", str(target)).code == 0
    document = json.loads(target.read_text())
    [embedded] = document["subagent_trajectories"]
    assert embedded["trajectory_id"] == "crashed/d1" and embedded["session_id"] == "crashed-d1"
    results = [r for s in document["steps"] for r in (s.get("observation") or {}).get("results", [])]
    refs = [r["subagent_trajectory_ref"] for r in results if "subagent_trajectory_ref" in r]
    assert refs == [[{"trajectory_id": "crashed/d1", "session_id": "crashed-d1"}]]
    assert any(c["function_name"] == "apply_patch" for s in embedded["steps"] for c in s.get("tool_calls", []))


def test_a_fork_keeps_the_tree_and_a_replayed_model_answers_each_child_as_it_was(example):
    harness, folder = example
    forked = harness("fork", "straight", "--at", "2", "--out", str(folder / "forks"), "--json")
    assert forked.code == 0, forked.stdout + forked.stderr
    lines = [json.loads(line) for line in forked.stdout.strip().splitlines()]
    [session] = [line["record"]["session_dir"] for line in lines if line.get("kind") == "finished"]
    records = read_records(Path(session), EVERY_AGENT)
    assert {r.agent for r in records} == {None, "d1"}, "the child's records came with the fork's prefix"
    assert json.loads(forked.stdout.strip().splitlines()[-1])["verified"] == 1
    # the recorded session as the model: the run delegates again and its child gets d1's recorded turns
    again = harness.run(f"replay:{harness.session_dir('straight')}", "--delegate-depth", "1", session="replayed")
    result = again.json()
    assert result["outcome"] == "verified" and result["subagent_steps"] == 4, again.stdout + again.stderr
    [end] = _delegates(harness, "replayed").values()
    assert end.change == "applied" and end.final == _delegates(harness, "straight")["d1"].final


def test_the_export_of_a_tree_is_valid_atif(example, harbor_python):
    harness, folder = example
    target = folder / "straight.atif.json"
    assert harness("export", "straight", "--format", "atif", "-o", str(target)).code == 0
    assert validate(harbor_python, target) == {}


def test_a_child_past_its_reserve_stops_and_the_run_goes_on_within_its_limits(harness: Harness, tmp_path):
    files = ["calc/ops.py", "calc/__init__.py", "tests/test_ops.py", "pyproject.toml", "README.md"]
    reading = [_usage(turn("Reading.", ("read_file", {"path": path}))) for path in files]
    listing = [_usage(turn("Listing.", ("list_dir", {"path": path}))) for path in (".", "calc", "tests")]
    model = _script(
        tmp_path,
        "reserve",
        [
            _usage(turn("Handing the reading over.", ("delegate", {"task": "Read calc/ops.py.", "steps": 2}))),
            _usage(turn("More than is left.", ("delegate", {"task": "Read everything.", "steps": 50}))),
            _usage(turn("Fixing it myself.", ("apply_patch", ADD_FIX))),
            _usage(turn("I changed add() to return a + b.")),
        ],
        {"d1": reading, "d2": reading + listing},
    )
    spans_file = tmp_path / "spans.jsonl"
    ran = harness.run(
        model, "--delegate-depth", "1", "--max-tokens", "1500", "--max-steps", "30", "--otel-file", str(spans_file),
        session="reserve",
    )  # fmt: skip
    result = ran.json()
    assert result["outcome"] == "verified", ran.stdout + ran.stderr
    ends = _delegates(harness, "reserve")
    assert ends["d1"].outcome == "limit:steps" and ends["d1"].steps == 2, "stopped at its reserve of 2 steps"
    starts = _delegates(harness, "reserve", "start")
    # d2 asked 50 steps: it got what was left (30 - 2 own - 2 of d1 = 26), and half the tokens left
    assert starts["d2"].reserve["max_steps"] == 26
    assert starts["d2"].reserve["max_tokens"] == (1500 - 400) // 2 == 550
    assert ends["d2"].outcome == "limit:tokens" and ends["d2"].steps == 6, "100 tokens a turn: past 550 at 600"
    own, children = result["steps"], result["subagent_steps"]
    assert (own, children) == (4, 8)
    assert result["tokens"]["input"] == 100 * (own + children) == 1200 <= 1500, "the tree's tokens, once each"
    assert result["cost_usd"] == pytest.approx(0.001 * 12)
    spans = spans_in(spans_file)
    chats = [s["attributes"]["gen_ai.usage.input_tokens"] for s in spans if s["name"].startswith("chat ")]
    [run] = [s for s in spans if s["name"] == "invoke_agent harness"]
    children = {s["name"]: s["attributes"] for s in spans if s["name"] in ("invoke_agent d1", "invoke_agent d2")}
    assert sum(chats) == run["attributes"]["gen_ai.usage.input_tokens"] == 1200, "the run's total is its parts'"
    assert (children["invoke_agent d1"]["gen_ai.usage.input_tokens"], children["invoke_agent d2"]["harness.steps"]) == (
        200,
        6,
    )
    shown = harness("show", "reserve").stdout
    assert "in 1200" in shown and "limit:steps" in shown and "limit:tokens" in shown
    said = [r.text for r in read_records(harness.session_dir("reserve")) if r.kind == "tool" and r.name == "delegate"]
    assert said[0].startswith("sub-agent d1 ended: limit:steps") and "it changed no file" in said[0]
    # the same run as a batch's task-run (the tasks file's defaults): the report counts the tree's use
    tasks = tmp_path / "tasks.yaml"
    defaults = {"model": [model], "verify": "python3 -m pytest -q", "delegate": {"depth": 1}}
    defaults["limits"] = {"max_tokens": 1500, "max_steps": 30}
    tasks.write_text(yaml.safe_dump({"defaults": defaults, "tasks": [{"id": "r", "repo": str(EXAMPLE), "task": "t"}]}))
    out = tmp_path / "batch"
    batch = harness("batch", str(tasks), "--out", str(out), "--workers", "1", "--json")
    assert batch.code == 0, batch.stdout + batch.stderr
    [report] = json.loads(harness("report", str(out), "--format", "json").stdout)
    assert report["overall"]["input_tokens_per_run"] == 1200
    assert report["overall"]["cost_total_usd"] == pytest.approx(0.012)
    [page] = (out / "pages").glob("*.html")
    assert "sub-agent <b>d2</b> · limit:tokens" in page.read_text(), "the task-run's page nests its children"


def test_children_at_once_share_a_base_a_conflict_is_reported_and_the_caps_refuse(harness: Harness, tmp_path):
    config = tmp_path / "delegate.toml"
    config.write_text("[delegate]\ndepth = 2\nat_once = 2\n")
    other_fix = {**ADD_FIX, "new_text": ADD_FIX["new_text"].replace("a + b", "b + a")}
    write = ("write_file", {"path": "NOTES.md", "content": "notes of d3\n"})
    model = _script(
        tmp_path,
        "tree",
        [
            turn(
                "Three pieces at once.",
                ("delegate", {"task": "Fix add()."}),
                ("delegate", {"task": "Fix add() your way."}),
                ("delegate", {"task": "A third piece."}),
            ),
            turn("Notes next.", ("delegate", {"task": "Write notes, and have a helper write more."})),
            turn("A draft I will not keep.", ("delegate", {"task": "Draft a change.", "apply": False})),
            turn("add() is fixed and the notes are written."),
        ],
        {
            "d1": [turn("Fixing.", ("apply_patch", ADD_FIX)), turn("Fixed add().")],
            "d2": [turn("Fixing.", ("apply_patch", other_fix)), turn("Fixed add() my way.")],
            "d3": [turn("Writing.", write, ("delegate", {"task": "Write more notes."})), turn("Notes written.")],
            "d4": [turn("Drafting.", ("write_file", {"path": "DRAFT.md", "content": "draft\n"})), turn("Drafted.")],
            "d3.d1": [
                turn("More.", ("write_file", {"path": "MORE.md", "content": "more\n"})),
                turn("Deeper?", ("delegate", {"task": "Even more."})),
                turn("Wrote MORE.md."),
            ],
        },
    )
    (harness.state_dir / "tree-d3").mkdir(parents=True)  # left by a crash between a fork and its record
    ran = harness.run(model, "--config", str(config), session="tree")
    result = ran.json()
    assert result["outcome"] == "verified", ran.stdout + ran.stderr
    starts, ends = _delegates(harness, "tree", "start"), _delegates(harness, "tree")
    assert set(ends) == {"d1", "d2", "d3", "d3.d1", "d4"}
    assert ends["d4"].change == "discarded" and ends["d4"].paths == ["DRAFT.md"], "kept out, as the parent asked"
    assert starts["d1"].base == starts["d2"].base, "children of one turn start from the same workspace"
    assert sorted(ends[name].change for name in ("d1", "d2")) == ["applied", "conflict"]
    [lost] = [ends[name] for name in ("d1", "d2") if ends[name].change == "conflict"]
    assert lost.conflicts == ["calc/ops.py"]
    records = read_records(harness.session_dir("tree"), EVERY_AGENT)
    told = {r.call_id: r.text for r in records if r.kind == "tool" and r.name == "delegate" and r.agent is None}
    assert "NOT applied" in told["call_1_0" if lost.child == "d1" else "call_1_1"]
    assert "delegate call 3 of the turn" in told["call_1_2"] and "2 sub-agent(s) at once" in told["call_1_2"]
    deeper = [r for r in records if r.agent == "d3.d1" and r.kind == "tool" and r.name == "delegate"]
    assert deeper and "2 level(s) deep" in deeper[0].text
    assert ends["d3.d1"].change == "applied" and ends["d3"].change == "applied"
    assert sorted(ends["d3"].paths) == ["MORE.md", "NOTES.md"], "the grandchild's change came up through d3"
    patch = Path(result["patch"]).read_text()
    assert "notes of d3" in patch and "+more" in patch and "DRAFT.md" not in patch
    assert result["subagent_steps"] == sum(ends[name].steps for name in ("d1", "d2", "d3", "d4"))
    shown = harness("show", "tree").stdout
    assert "d3.d1 step 1" in shown and "conflicts" in shown
    replayed = harness("replay", "tree", "--json").json()
    assert replayed["diverged"] == 0, replayed
    assert {s["agent"] for s in replayed["steps"]} == {None, "d1", "d2", "d3", "d3.d1", "d4"}


def test_ctrl_c_stops_children_running_at_once(harness: Harness, tmp_path, docker_client):
    import signal
    import subprocess
    import time

    from tests.agent.conftest import CLI, run_args

    slow = ("run_tests", {})
    model = _script(
        tmp_path,
        "slow",
        [turn("Two at once.", ("delegate", {"task": "Run the tests."}), ("delegate", {"task": "And you too."}))],
        {"d1": [turn("", slow)], "d2": [turn("", slow)]},
    )
    until = time.time() + 16  # the tests sleep until then: past the Ctrl-C, not past the resume
    args = run_args(
        model,
        "--delegate-depth",
        "1",
        "--test-cmd",
        f"python3 -c 'import time; time.sleep(max(0, {until} - time.time()))'",
        verify="true",
    )
    proc = subprocess.Popen(
        [*CLI, *args, "--session", "int"], cwd=ROOT, env=harness.env, stdout=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 60
        while not {"d1", "d2"} <= {r.agent for r in _turns(harness, "int")}:  # both children call the slow tests
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.2)
        time.sleep(2.0)
        # a machine too slow to reach both calls well before `until` is named, not taken for a stop that waited
        assert time.time() < until - 3, "the children's calls began too late to be cut short"
        proc.send_signal(signal.SIGINT)
        started = time.monotonic()
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and time.monotonic() - started < 30, "no waiting for the children's tests"
    assert json.loads(out)["outcome"] == "interrupted"
    label = harness.env["HARNESS_RUN_ID"]
    mine = docker_client.containers.list(all=True, filters={"label": f"harness.run={label}"}, ignore_removed=True)
    assert [c for c in mine if c.labels.get("harness.session", "").startswith("int")] == [], "no container left"
    every = read_records(harness.session_dir("int"), EVERY_AGENT)
    assert not [r for r in every if r.kind == "tool" and r.agent], "a call the stop cut short is not recorded"
    resumed = harness("resume", "int", "--json")
    assert resumed.code == 0 and resumed.json()["outcome"] == "verified", resumed.stdout + resumed.stderr
    ends = _delegates(harness, "int")
    assert set(ends) == {"d1", "d2"} and all(e.outcome == "unverified" for e in ends.values())


def _turns(harness: Harness, session: str) -> list[Any]:
    folder = harness.session_dir(session)
    return [r for r in read_records(folder, EVERY_AGENT) if r.kind == "turn"] if folder.is_dir() else []


def test_removing_a_run_removes_its_sub_agents_sessions(harness: Harness, tmp_path):
    """A sub-agent's session is a branch of its parent's run: `session rm` of the parent removes it (its
    workspace copy and store), and `session list` never shows a child of a session that is gone."""
    ran = harness.run(f"scripted:{EXAMPLE_SCRIPT}", "--delegate-depth", "1", session="parent")
    assert ran.code == 0, ran.stdout + ran.stderr
    children = [p for p in harness.state_dir.iterdir() if p.is_dir() and p.name.startswith("parent-")]
    assert children, list(harness.state_dir.iterdir())
    removed = harness("session", "rm", "parent")
    assert removed.code == 0, removed.stderr
    assert f"removed its sub-agents' sessions: {', '.join(sorted(c.name for c in children))}" in removed.stdout
    assert not any(p.exists() for p in children) and not (harness.state_dir / "parent").exists()
    listed = harness("session", "list")
    assert "parent" not in listed.stdout, listed.stdout


def test_a_scripted_cost_that_is_no_number_is_refused(harness: Harness, tmp_path):
    for value in (".nan", ".inf", "-1"):
        model = _script(tmp_path, f"cost{value}", [_usage({"text": "done"}) | {"cost_usd": value}], {})
        path = Path(model.removeprefix("scripted:"))
        path.write_text(path.read_text().replace(f"'{value}'", value))
        ran = harness.run(model, session=None)
        assert ran.code == 78 and "'cost_usd' must be a finite number, 0 or more" in ran.stderr, ran.stderr
