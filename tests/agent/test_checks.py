"""Verification in layers: after verify passes, every --check must exit 0 too; a failing check goes
back to the model naming the layer, like a failing verify, and the outcome says which layer failed."""

from __future__ import annotations

from pathlib import Path

from harness.agent.outcome import RunState
from harness.batch.records import TaskRunKey
from harness.batch.tasks import load_tasks
from harness.batch.worker import TaskRunSpec, run_config
from harness.config import LimitsConfig, RunConfig
from harness.providers.scripted import ScriptedProvider, parse_script
from harness.report import pages
from harness.trajectory import read_records, read_state
from tests.inprocess import fake_run

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "calc"
FIX_LINT = "turns:\n  - text: done\n  - tool_calls: [{name: write_file, arguments: {path: lint.ok, content: x}}]\n  - text: fixed\n"


def run(tmp_path: Path, checks: list[str], script: str = "turns:\n  - text: done\n", rounds: int = 3):
    config = RunConfig(model="scripted:x", verify="true", checks=checks, limits=LimitsConfig(max_verify_rounds=rounds))
    return fake_run(EXAMPLE, tmp_path / "state", ScriptedProvider(parse_script(script)), config)


def test_every_layer_must_pass(tmp_path):
    result, folder = run(tmp_path, ["true", "sh -c 'exit 0'"])
    assert result.outcome == "verified" and "2 check(s) passed" in result.detail
    layers = [r.layer for r in read_records(folder) if r.kind == "verify"]
    assert layers == ["verify", "check 1 of 2", "check 2 of 2"]


def test_a_failing_check_goes_back_to_the_model_and_names_the_layer(tmp_path):
    result, folder = run(tmp_path, ["true", "test -f lint.ok"], script=FIX_LINT)
    assert result.outcome == "verified", result.detail
    rounds = [(r.round, r.layer, r.passed) for r in read_records(folder) if r.kind == "verify"]
    assert rounds[:3] == [(1, "verify", True), (1, "check 1 of 2", True), (1, "check 2 of 2", False)]
    feedback = [e.message.content for e in read_state(folder, RunState).context.entries if e.message.role == "user"]
    assert any(
        f.startswith("CHECK FAILED (check 2 of 2; the tests passed)") and "test -f lint.ok" in f for f in feedback
    )
    assert "check 2 of 2" in pages.session_page(folder)


def test_a_check_that_never_passes_ends_failed_verification_naming_it(tmp_path):
    result, _ = run(tmp_path, ["false"], script="turns:\n  - text: done\n  - text: still done\n", rounds=2)
    assert result.outcome == "failed_verification" and result.exit_code == 11
    assert result.detail == "`false` (check 1 of 1) still fails after 2 round(s)"


def test_tasks_set_their_own_checks(tmp_path):
    (tmp_path / "repo").mkdir()
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text(
        "defaults:\n  verify: 'true'\n  checks: ['ruff check .']\ntasks:\n"
        "  - {id: a, repo: repo, task: x}\n  - {id: b, repo: repo, task: y, checks: ['mypy .', 'bandit -r .']}\n"
    )
    loaded = load_tasks(tasks)
    configs = [
        run_config(
            TaskRunSpec(
                key=TaskRunKey(task_id=t.id, model="scripted:x", run_index=0),
                task=t,
                defaults=loaded.defaults,
                sessions=tmp_path,
                run_id="t",
            )
        )
        for t in loaded.tasks
    ]
    assert [c.checks for c in configs] == [["ruff check ."], ["mypy .", "bandit -r ."]]
