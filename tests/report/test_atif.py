"""ATIF out and in: a scripted run with parallel calls, a refused call, two verify rounds and a
resume after kill -9, exported with `harness export --format atif` and checked by Harbor's own
validator (Harbor in its 3.12+ environment); its steps say what happened in order; `harness view
FILE.json` renders it (and any ATIF) as the trajectory page."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.agent.conftest import ADD_FIX, Harness, turn
from tests.harbor_venv import validate

pytestmark = [pytest.mark.docker]

TURNS = [
    turn(
        "Looking at add() and its callers.",
        ("read_file", {"path": "calc/ops.py"}),
        ("search_code", {"pattern": "add("}),
    ),
    turn("Listing with a shell.", ("run_command", {"command": "ls; echo hi"})),
    turn("Done, I think."),
    turn("The tests still fail: fixing add() and re-running them.", ("apply_patch", ADD_FIX), ("run_tests", {})),
    turn("I changed add() to return a + b; the tests pass."),
]


@pytest.fixture(scope="module")
def exported(tmp_path_factory, run_label) -> tuple[Harness, Path, dict]:
    import yaml

    folder = tmp_path_factory.mktemp("atif")
    (folder / "s.yaml").write_text(yaml.safe_dump({"turns": TURNS}))
    harness = Harness(folder / "sessions", run_label)
    crashed = harness.run(f"scripted:{folder / 's.yaml'}", session="s", env={"HARNESS_CRASH_AT": "model_answered:4"})
    assert crashed.code == -9, crashed.stderr
    resumed = harness("resume", "s", "--json")
    assert resumed.code == 0 and resumed.json()["outcome"] == "verified", resumed.stdout + resumed.stderr
    target = folder / "s.atif.json"
    done = harness("export", "s", "--format", "atif", "-o", str(target))
    assert done.code == 0, done.stderr
    return harness, target, json.loads(target.read_text())


def test_the_export_is_valid_atif_by_harbors_own_validator(exported, harbor_python):
    _, target, _ = exported
    assert validate(harbor_python, target) == {}


def test_the_steps_say_what_happened_in_order(exported):
    _, _, data = exported
    assert data["schema_version"] == "ATIF-v1.7" and data["session_id"] == "s" and data["agent"]["name"] == "harness"
    assert data["agent"]["model_name"].startswith("scripted:")
    names = {tool["function"]["name"] for tool in data["agent"]["tool_definitions"]}
    assert {"read_file", "apply_patch", "run_tests"} <= names
    assert all(tool["function"].get("parameters") for tool in data["agent"]["tool_definitions"])
    steps = data["steps"]
    assert [s["step_id"] for s in steps] == list(range(1, len(steps) + 1))
    assert steps[0]["source"] == "system" and steps[1]["source"] == "user" and "calc" in steps[1]["message"]
    agents = [s for s in steps if s["source"] == "agent"]
    parallel = agents[0]
    assert [c["function_name"] for c in parallel["tool_calls"]] == ["read_file", "search_code"]
    results = parallel["observation"]["results"]
    assert [r["source_call_id"] for r in results] == [c["tool_call_id"] for c in parallel["tool_calls"]]
    assert "return a - b" in results[0]["content"] and results[0]["extra"]["gate"] == "allow"
    refused = agents[1]["observation"]["results"][0]
    assert refused["extra"]["refused"] is True and refused["extra"]["rule"] == "command-syntax"
    assert "ERROR[denied]" in refused["content"]
    verify = [s for s in steps if (s.get("extra") or {}).get("harness_kind") == "verify"]
    assert [v["extra"]["passed"] for v in verify] == [False, True]
    assert "failed" in verify[0]["observation"]["results"][0]["content"]
    feedback = steps[steps.index(verify[0]) + 1]
    assert feedback["source"] == "user", "the verify feedback the model got is a user step"
    resume = [s for s in steps if (s.get("extra") or {}).get("harness_kind") == "resume"]
    assert len(resume) == 1
    texts = [s["message"] for s in agents]
    assert texts.count(TURNS[3]["text"]) == 1, "the turn asked again after the crash is one step"
    assert [m for m in (s["message"] for s in steps if s["source"] == "user")].count(steps[1]["message"]) == 1, (
        "the conversation sent again on resume adds no steps"
    )
    fix = next(s for s in agents if s["message"] == TURNS[3]["text"])
    assert fix["extra"]["snapshot"]["step"] >= 1 and "prompt_tokens" in fix["metrics"]
    final = data["final_metrics"]
    assert final["total_steps"] == len(steps)
    assert final["total_prompt_tokens"] == sum(s["metrics"]["prompt_tokens"] for s in agents)
    assert data["extra"]["outcome"]["outcome"] == "verified" and data["extra"]["image"] == "py311"


def test_any_atif_file_is_rendered_as_the_trajectory_page(exported, tmp_path):
    harness, target, data = exported
    shown = harness("view", str(target), "--no-open")
    assert shown.code == 0, shown.stderr
    page = target.with_suffix(".html").read_text()
    assert "Looking at add() and its callers." in page and "search_code" in page and "ERROR[denied]" in page
    broken = tmp_path / "broken.json"
    broken.write_text(json.dumps({"steps": "no"}))
    refused = harness("view", str(broken), "--no-open")
    assert refused.code == 64 and "is no ATIF trajectory" in refused.stderr and "Traceback" not in refused.stderr
    newer = tmp_path / "newer.json"
    newer.write_text(json.dumps({**data, "schema_version": "ATIF-v2.0"}))
    assert "is not ATIF-v1.x" in harness("view", str(newer), "--no-open").stderr


HARBOR_SHAPES = """
import json, sys
from harbor.models.trajectories import Trajectory
document = {
    "schema_version": "ATIF-v1.5",
    "session_id": "other-agent",
    "agent": {"name": "terminal-agent", "version": "2.0.0", "model_name": "openai/gpt-4o"},
    "steps": [
        {"step_id": 1, "source": "user", "message": "Create hello.txt with Hello, world!"},
        {"step_id": 2, "source": "agent", "message": "Creating it.",
         "tool_calls": [{"tool_call_id": "call_0", "function_name": "bash_command",
                         "arguments": {"keystrokes": "printf 'Hello' > hello.txt"}}],
         "observation": {"results": [{"content": "root@box:/app# printf 'Hello' > hello.txt"}]},
         "metrics": {"prompt_tokens": 682, "completion_tokens": 60, "cost_usd": 0.0023,
                     "prompt_token_ids": [1, 2, 3], "logprobs": [-0.1, -0.2]}},
        {"step_id": 3, "source": "system", "message": "Performed context summarization.",
         "observation": {"results": [{"subagent_trajectory_ref": [
             {"session_id": "summary-1", "trajectory_path": "trajectory.summary-1.json"}]}]}},
        {"step_id": 4, "source": "agent", "message": [{"type": "text", "text": "Done: the file is there."}]},
    ],
    "final_metrics": {"total_prompt_tokens": 682, "total_completion_tokens": 60, "total_cost_usd": 0.0023},
}
print(json.dumps(Trajectory.model_validate(document).to_json_dict()))
"""


def test_another_agents_atif_renders_with_its_own_shapes(exported, harbor_python, tmp_path):
    """A document made by Harbor's own models in shapes other agents write (results not linked to
    their call by id, a summarization step with subagent references, multimodal message parts)."""
    import subprocess

    harness, _, _ = exported
    made = subprocess.run([str(harbor_python), "-c", HARBOR_SHAPES], capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    other = tmp_path / "other.json"
    other.write_text(made.stdout)
    shown = harness("view", str(other), "--no-open")
    assert shown.code == 0, shown.stderr
    page = other.with_suffix(".html").read_text()
    assert "bash_command" in page and "printf &#x27;Hello&#x27; &gt; hello.txt" in page
    assert "subagent summary-1: trajectory.summary-1.json" in page and "Done: the file is there." in page


def test_a_document_nested_ten_thousand_deep_is_refused_in_one_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    deep = tmp_path / "deep.json"
    nested = "[" * 10_000 + "]" * 10_000
    deep.write_text('{"schema_version": "ATIF-v1.7", "agent": {"name": "x"}, "steps": [{"source": "agent", '
                    f'"message": "hi", "tool_calls": [{{"tool_call_id": "a", "function_name": "f", "arguments": {{"x": {nested}}}}}]}}]}}')  # fmt: skip
    done = subprocess.run([str(Path(sys.executable).parent / "harness"), "view", str(deep), "--no-open"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 64 and "nests deeper than a trajectory does" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not deep.with_suffix(".html").exists()
    shallow = tmp_path / "shallow.json"
    shallow.write_text(deep.read_text().replace(nested, "[[1]]"))
    assert subprocess.run([str(Path(sys.executable).parent / "harness"), "view", str(shallow), "--no-open"],
                          capture_output=True, timeout=60).returncode == 0  # fmt: skip
