"""The second demo end to end in the real sandbox: mine the example's history, check the tasks
(unsound ones dropped with why), run a batch with the reference model offline, and the report says
100% completion."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import yaml

from harness.batch.records import BatchDir
from tests.agent.conftest import Harness
from tests.harbor_venv import validate
from tests.history.conftest import BUNDLE

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_mine_check_batch_with_the_reference_model_and_report(
    tmp_path: Path, run_label: str, docker_client, harbor_python: Path
) -> None:
    label = f"{run_label}-mined-{uuid.uuid4().hex[:6]}"  # this test's containers only (others may be going away)
    try:
        _mine_check_batch_report(tmp_path, label, docker_client, harbor_python)
    finally:
        for container in docker_client.containers.list(all=True, filters={"label": f"harness.run={label}"}):
            container.remove(force=True)


def _mine_check_batch_report(tmp_path: Path, run_label: str, docker_client, harbor_python: Path) -> None:
    harness = Harness(tmp_path / "state", run_label)
    tasks = tmp_path / "bench" / "tasks.yaml"
    mined = harness("tasks", "mine", str(BUNDLE), "-o", str(tasks), "--json")
    assert mined.code == 0, mined.stderr
    ids = [t["id"] for t in json.loads(mined.stdout)["tasks"]]
    assert len(ids) == 7
    broken = next(i for i in ids if "fix-add" in i)  # its reference now changes nothing useful
    reference = tasks.parent / "tasks.tasks" / broken / "reference.json"
    data = json.loads(reference.read_text())
    data["files"]["mathlib/ops.py"]["content"] = data["files"]["mathlib/ops.py"]["content"].replace("a + b", "a * b")
    reference.write_text(json.dumps(data))

    checked = harness("tasks", "check", str(tasks), "--workers", "3", "--json")
    assert checked.code == 0, checked.stderr
    verdicts = {v["task_id"]: v for v in json.loads(checked.stdout)["verdicts"]}
    assert verdicts[broken]["reason"].startswith("fails after the reference")
    assert verdicts[broken]["kind"] == "fails_after_reference" and verdicts[broken]["phase"] == "reference"
    assert verdicts[broken]["evidence"], "the deciding line of the runner's output is quoted"
    assert json.loads(checked.stdout)["by_kind"]["sound"] == 5
    refactor = next(i for i in ids if "name-the-loop-variable" in i)
    assert verdicts[refactor]["reason"].startswith("passes already at the start state")
    sound = sorted(i for i, v in verdicts.items() if v["sound"])
    assert len(sound) == 5
    written = tasks.with_name("tasks.sound.yaml")
    assert json.loads(checked.stdout)["output"] == str(written)
    kept = yaml.safe_load(written.read_text())
    assert sorted(t["id"] for t in kept["tasks"]) == sound
    assert "Dropped:" in written.read_text() and broken in written.read_text()
    assert sorted(t["id"] for t in yaml.safe_load(tasks.read_text())["tasks"]) == sorted(ids), "the mined file is kept"
    over = harness("tasks", "check", str(tasks), "-o", str(tasks))
    assert over.code == 64 and "never over it" in over.stderr
    missing = yaml.safe_load(tasks.read_text())
    missing.setdefault("defaults", {})["image"] = "no-such-image"
    for entry in missing["tasks"]:
        entry.pop("image", None)
    (tasks.parent / "missing.yaml").write_text(yaml.safe_dump(missing))
    stops = harness("tasks", "check", str(tasks.parent / "missing.yaml"), "--workers", "3")
    errors = [line for line in stops.stderr.splitlines() if line.startswith("error:")]
    assert stops.code == 71 and len(errors) == 1 and "no-such-image" in errors[0], stops.stderr
    assert "unsound" not in stops.stderr and "checking " in stops.stderr, "one line for the machine, progress before"
    tasks = written

    out = tmp_path / "batch"
    ran = harness("batch", str(tasks), "--out", str(out), "--model", "reference:", "--workers", "3", "--json")
    assert ran.code == 0, ran.stdout + ran.stderr
    records = BatchDir(out).records()
    assert len(records) == 5 and all(r.verified for r in records)
    assert all(r.reference_lines for r in records), "each mined task's change is sized against its reference"
    assert "(reference " in (out / "report.html").read_text(encoding="utf-8")
    report = harness("report", str(out), "--format", "json")
    figures = json.loads(report.stdout)[0]["overall"]
    assert figures["completion_rate"] == 1.0 and figures["task_runs"] == 5 and figures["first_tool_accuracy"] == 1.0
    by_category = json.loads(report.stdout)[0]["by_category"]
    assert {"tests-added", "cross-file-change", "dependency-adaptation"} <= set(by_category)
    assert (out / "report.html").is_file()
    exported = harness("export", str(out), "--format", "atif", "-o", str(tmp_path / "atif"))
    assert exported.code == 0 and "wrote 5 ATIF trajectories" in exported.stderr, exported.stderr
    files = sorted((tmp_path / "atif").glob("*.json"))
    assert len(files) == 5 and validate(harbor_python, *files) == {}, "Harbor's validator takes every task-run"
    run = json.loads(files[0].read_text())
    assert run["extra"]["task_run"]["model"] == "reference:" and run["extra"]["task_run"]["verified"] is True
    mine = docker_client.containers.list(all=True, filters={"label": f"harness.run={run_label}"}, ignore_removed=True)
    assert [c for c in mine if c.labels.get("harness.kind") != "bench"] == []


def test_the_yield_of_every_language_and_environments_for_what_commits_declare(tmp_path: Path) -> None:
    """`harness bench mine --build-envs` on the built histories (Python, Go, JavaScript, Rust; merges,
    squashes, a commit for an older interpreter) meets its targets and names each
    unsound task's reason; the old interpreter's task runs in a Python built from Debian bullseye.
    Then a JavaScript task set in an image without Node is moved to one that meets engines.node, and
    without that choice it is an environment mismatch."""
    harness = Harness(tmp_path / "state", f"bench-mine-{uuid.uuid4().hex[:6]}")
    built = harness("images", "build", "--env", "Python:bullseye", "--json")  # `make test` built it: found
    assert built.code == 0, built.stderr
    ran = harness("bench", "mine", "--build-envs", "--no-example", "--workers", "4", "--json")  # example: above
    assert ran.code == 0, ran.stderr
    bench = json.loads(ran.stdout)
    rates = {language: row["sound_rate"] for language, row in bench["by_language"].items()}
    assert rates == {"python": 0.778, "go": 0.6, "javascript": 0.8, "rust": 1.0}  # Python: 7 of 9
    assert bench["targets_met"] is True
    python = next(r for r in bench["repositories"] if r["name"] == "built python")
    verdicts = {v["task"].split("-", 1)[1]: v for v in python["verdicts"]}
    old = verdicts["from-dict-takes-any-mapping"]
    assert old["kind"] == "sound" and old["image"].startswith("harness/env-python:bullseye-"), old
    assert [row["ref"] for row in json.loads(built.stdout)] == [old["image"]], "the check takes the one built before"
    assert verdicts["read-shapes-from-the-native-reader"]["kind"] == "missing_module"
    assert verdicts["name-rect-s-sides-for-what-they-are"]["kind"] == "passes_at_start"
    merged = verdicts["perimeter-of-squares-and-rectangles"]
    assert merged["kind"] == verdicts["add-circle-5"]["kind"] == "sound" and merged["image"] == "py311"
    assert python["scanned"] == 12 and python["merges"] == 2 and python["mined"] == 9
    go = next(r for r in bench["repositories"] if r["name"] == "built go")
    before_modules = next(v for v in go["verdicts"] if v["task"].endswith("pop-and-say-when-the-stack-is-empty"))
    assert before_modules["kind"] == "fails_either_way", before_modules  # not "fails after the reference: exit 1"
    assert "go: go.mod file not found in current directory" in before_modules["reason"]
    javascript = next(r for r in bench["repositories"] if r["name"] == "built javascript")
    pinned = next(v for v in javascript["verdicts"] if v["task"].endswith("words-drops-punctuation-8"))
    assert pinned["kind"] == "sound" and "words on the runtime we ship" in pinned["reason"], pinned

    from harness.bench.histories import javascript_history

    javascript_history(tmp_path / "js")
    tasks = tmp_path / "bench" / "tasks.yaml"
    assert (
        harness("tasks", "mine", str(tmp_path / "js"), "-o", str(tasks), "--image", "rust", "--paths", "lib/").code == 0
    )
    checked = harness("tasks", "check", str(tasks), "--env-images", "node", "--json")
    assert checked.code == 0, checked.stderr
    result = json.loads(checked.stdout)
    assert {v["image"] for v in result["verdicts"]} == {"node"} and all(v["sound"] for v in result["verdicts"])
    assert all("javascript 18" in v["environment"] and ": met" in v["environment"] for v in result["verdicts"])
    assert result["yield"]["by_language"]["javascript"]["sound_rate"] == 1.0
    kept = yaml.safe_load(tasks.with_name("tasks.sound.yaml").read_text())
    assert kept["defaults"]["image"] == "rust" and {t["image"] for t in kept["tasks"]} == {"node"}
    narrowed = next(t for t in kept["tasks"] if t["id"].endswith("words-drops-punctuation-8"))
    assert narrowed["verify"] == (
        "node --test --test-name-pattern='^(?:words|words drop punctuation)$' test/words.test.js"
    ), narrowed
    alone = harness("tasks", "check", str(tasks), "--json")
    verdicts = json.loads(alone.stdout)["verdicts"]
    assert alone.code == 11 and {v["kind"] for v in verdicts} == {"environment_mismatch"}
    assert "the image rust has no javascript" in verdicts[0]["reason"]
