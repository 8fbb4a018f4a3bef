"""The mining yield on the built histories of every language (`harness bench mine --build-envs`), and a
JavaScript task set moved to an image that meets its engines. Apart from the demo's mine-check-batch
(test_check.py) so the two long ones run side by side (one file per worker at a time)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import yaml

from tests.agent.conftest import Harness

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_the_yield_of_every_language_and_environments_for_what_commits_declare(tmp_path: Path) -> None:
    """`harness bench mine --build-envs` on the built histories (Python, Go, JavaScript, Rust; merges,
    squashes, a commit for an older interpreter) meets its targets and names each
    unsound task's reason; the old interpreter's task runs in a Python built from Debian bullseye.
    Then a JavaScript task set in an image without Node is moved to one that meets engines.node, and
    without that choice it is an environment mismatch."""
    harness = Harness(tmp_path / "state", f"bench-mine-{uuid.uuid4().hex[:6]}")
    ran = harness("bench", "mine", "--build-envs", "--no-example", "--workers", "4", "--json")  # example: above
    assert ran.code == 0, ran.stderr
    bench = json.loads(ran.stdout)
    rates = {language: row["sound_rate"] for language, row in bench["by_language"].items()}
    assert rates == {"python": 0.778, "go": 0.75, "javascript": 0.75, "rust": 1.0}  # Python: 7 of 9
    assert bench["targets_met"] is True
    python = next(r for r in bench["repositories"] if r["name"] == "built python")
    verdicts = {v["task"].split("-", 1)[1]: v for v in python["verdicts"]}
    old = verdicts["from-dict-takes-any-mapping"]
    assert old["kind"] == "sound" and old["image"].startswith("harness/env-python:bullseye-"), old
    assert verdicts["read-shapes-from-the-native-reader"]["kind"] == "missing_module"
    assert verdicts["name-rect-s-sides-for-what-they-are"]["kind"] == "passes_at_start"
    merged = verdicts["perimeter-of-squares-and-rectangles"]
    assert merged["kind"] == verdicts["add-circle-5"]["kind"] == "sound" and merged["image"] == "py311"
    assert python["scanned"] == 12 and python["merges"] == 2 and python["mined"] == 9

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
    alone = harness("tasks", "check", str(tasks), "--json")
    verdicts = json.loads(alone.stdout)["verdicts"]
    assert alone.code == 11 and {v["kind"] for v in verdicts} == {"environment_mismatch"}
    assert "the image rust has no javascript" in verdicts[0]["reason"]
