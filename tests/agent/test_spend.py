"""Spend across runs, through the real CLI: a daily ceiling in the user's config holds over separate
runs and a batch (each reserves within what is left before it starts; none starts once it is spent,
in one line, before a session is made); a run killed (-9) counts what its session recorded; the batch
forecasts from the user's own past runs of the model and refuses a model without a price; the report
gives the spend against both ceilings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.agent.conftest import EXAMPLE, FIX_SCRIPT, Harness

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]


def _costly(folder: Path, usd: float = 0.004) -> str:
    script = yaml.safe_load(FIX_SCRIPT.read_text())
    for step in script["turns"]:
        step["cost_usd"], step["usage"] = usd, {"input_tokens": 100, "output_tokens": 10}
    path = folder / "costly.yaml"
    path.write_text(yaml.safe_dump(script))
    return f"scripted:{path}"


@pytest.fixture
def ceiling(tmp_path: Path) -> dict[str, str]:
    """A user config with a $0.01 daily ceiling and its own ledger (the environment of the commands)."""
    (tmp_path / "xdg" / "harness").mkdir(parents=True)
    ledger = tmp_path / "ledger.jsonl"
    (tmp_path / "xdg" / "harness" / "config.toml").write_text(f'[spend]\ndaily_usd = 0.01\nledger = "{ledger}"\n')
    return {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}


def _ledger(tmp_path: Path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "ledger.jsonl").read_text().splitlines()]


def test_a_daily_ceiling_holds_over_separate_runs(tmp_path, run_label, ceiling):
    harness = Harness(tmp_path / "sessions", run_label)
    model = _costly(tmp_path)
    first = harness.run(model, session="first", env=ceiling)
    assert first.code == 13 and first.json()["outcome"] == "limit:cost", first.stdout + first.stderr
    reserve, settle = _ledger(tmp_path)
    assert reserve["kind"] == "reserve" and reserve["usd"] == pytest.approx(0.01)  # its limit: what was left
    assert settle["kind"] == "settle" and settle["usd"] == pytest.approx(0.012) and settle["steps"] == 3
    second = harness.run(model, session="second", env=ceiling)
    lines = second.stderr.strip().splitlines()
    assert second.code == 13 and "the daily spend ceiling of $0.01 is reached" in lines[-1], second.stderr
    assert not (harness.state_dir / "second").exists(), "a refused run made a session"
    assert len(_ledger(tmp_path)) == 2


def test_a_killed_run_counts_what_its_session_recorded(tmp_path, run_label, ceiling):
    harness = Harness(tmp_path / "sessions", run_label)
    killed = harness.run(_costly(tmp_path, 0.002), session="killed", env={**ceiling, "HARNESS_CRASH_AT": "mid_tool:2"})
    assert killed.code == -9, killed.stderr
    [reserve] = _ledger(tmp_path)
    assert reserve["usd"] == pytest.approx(0.01)
    from harness.config import SpendConfig
    from harness.spend import standing_now

    recorded = json.loads((harness.session_dir("killed") / "state.json").read_text())["spent"]["cost_usd"]
    now = standing_now(SpendConfig(daily_usd=0.01), tmp_path / "ledger.jsonl")
    assert 0 < recorded < 0.01 and now.today_usd == pytest.approx(recorded), "its recorded spend, not its reservation"
    resumed = harness("resume", "killed", "--json", env=ceiling)
    assert resumed.code in (0, 13), resumed.stdout + resumed.stderr
    settles = [line for line in _ledger(tmp_path) if line["kind"] == "settle"]
    assert len(settles) == 1 and settles[0]["usd"] == pytest.approx(resumed.json()["cost_usd"] - recorded)


def test_a_batch_forecasts_refuses_past_the_ceiling_and_reports_the_spend(tmp_path, run_label, ceiling):
    harness = Harness(tmp_path / "sessions", run_label)
    model = _costly(tmp_path, 0.001)
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text(
        "defaults:\n  image: py311\n  verify: python3 -m pytest -q\ntasks:\n"
        + "".join(f"  - {{id: t{n}, repo: {EXAMPLE}, task: Fix the failing tests in calc.}}\n" for n in range(3))
    )
    first = harness("batch", str(tasks), "--out", str(tmp_path / "one"), "--model", model, "--workers", "1",
                    env=ceiling, timeout=240)  # fmt: skip
    assert first.code == 0, first.stdout + first.stderr
    assert "no past run of it in your ledger to forecast 3 task-run(s) from" in first.stderr
    records = [json.loads(p.read_text()) for p in sorted((tmp_path / "one" / "runs").rglob("*.json"))]
    assert [r["status"] for r in records].count("done") == 2, [r["status"] for r in records]  # $0.005 each
    [never] = [r for r in records if r["status"] == "never_started"]
    assert "daily spend ceiling" in never["detail"]
    report = (tmp_path / "one" / "report.md").read_text()
    assert "Spend: this batch $0.0100; today $0.0100 of the $0.01 daily ceiling" in report, report
    second = harness("batch", str(tasks), "--out", str(tmp_path / "two"), "--model", model, "--workers", "1",
                     env=ceiling, timeout=240)  # fmt: skip
    assert second.code == 0, second.stdout + second.stderr  # the ceiling is spent: it forecasts, then starts none
    said = " ".join(second.stderr.split())
    forecast = (
        "3 task-run(s), $0.01 (p50) to $0.01 (p90); per task-run $0.0050/$0.0050, 5/5 steps (from your 2 past run(s))"
    )
    assert forecast in said and "warning: the p90 forecast ($0.01) passes what the ceilings leave" in said, said
    assert "0 ran (0 verified), 0 already recorded, 3 never started" in said, said
    unpriced = harness("batch", str(tasks), "--out", str(tmp_path / "three"), "--model", "openai:no-such-model-x",
                       env={**ceiling, "OPENAI_API_KEY": "sk-none"})  # fmt: skip
    assert unpriced.code == 78 and "has no known price" in unpriced.stderr, unpriced.stderr
    assert not list((tmp_path / "three").rglob("*.json")), "nothing ran for a model without a price"
