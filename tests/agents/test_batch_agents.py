"""One batch, three loops side by side: harness's own loop, Claude Code and Codex, each given the same
three tasks (fix add, fix subtract, and a task whose only "fix" is editing a test, which the gate
refuses), their models loopback wire servers of Anthropic's Messages and OpenAI's Responses APIs; one
report compares them."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml

from harness.batch.records import BatchDir
from tests.agent.conftest import EXAMPLE
from tests.agents.model_servers import ADD, CHEAT, RUN_TESTS, SUBTRACT, AnthropicServer, ResponsesServer, by_task
from tests.cli_process import ROOT, run_cli

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

LOOPS = {
    "anthropic:claude-sonnet-4-6": "harness",
    "claude-code@anthropic:claude-sonnet-4-6": "claude-code",
    "codex@openai-responses:gpt-5.2": "codex",
}


def _repos(tmp_path: Path) -> dict[str, Path]:
    add = tmp_path / "repos" / "add"
    shutil.copytree(EXAMPLE, add, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    subtract = tmp_path / "repos" / "subtract"
    shutil.copytree(add, subtract)
    ops = subtract / "calc" / "ops.py"
    text = ops.read_text().replace("\n".join(ADD.old), "\n".join(ADD.new))
    ops.write_text(text.replace("\n".join(SUBTRACT.new), "\n".join(SUBTRACT.old)))
    return {"add": add, "subtract": subtract}


def test_harness_claude_code_and_codex_side_by_side_in_one_batch_and_one_report(tmp_path, run_label):
    repos = _repos(tmp_path)
    choose = by_task({"(ADD)": ADD, "(SUBTRACT)": SUBTRACT, "(CHEAT)": CHEAT})
    with AnthropicServer(choose) as anthropic, ResponsesServer(choose) as responses:
        tasks = {
            "defaults": {
                "verify": RUN_TESTS, "image": "py311", "limits": {"max_steps": 12},
                "providers": {"anthropic": {"base_url": anthropic.url},
                              "openai-responses": {"base_url": f"{responses.url}/v1"}},
            },
            "tasks": [
                {"id": "add", "repo": str(repos["add"]), "task": "Fix the failing tests in calc (ADD)."},
                {"id": "subtract", "repo": str(repos["subtract"]), "task": "Fix the failing tests in calc (SUBTRACT)."},
                {"id": "cheat", "repo": str(repos["add"]), "task": "Make the tests pass in calc (CHEAT)."},
            ],
        }  # fmt: skip
        path = tmp_path / "tasks.yaml"
        path.write_text(yaml.safe_dump(tasks))
        out = tmp_path / "out"
        env = {
            **os.environ,
            "HARNESS_RUN_ID": run_label,
            "ANTHROPIC_API_KEY": "sk-ant-batch",
            "OPENAI_API_KEY": "sk-batch",
        }
        models = [part for model in LOOPS for part in ("--model", model)]
        done = run_cli(["batch", str(path), "--out", str(out), *models, "--workers", "3", "--json"],
                       timeout=800, env=env, cwd=ROOT)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    records = {(r.key.task_id, r.key.model): r for r in BatchDir(out).records()}
    assert len(records) == 9 and all(r.status == "done" for r in records.values()), records
    for model in LOOPS:
        assert records[("add", model)].outcome == "verified", records[("add", model)]
        assert records[("subtract", model)].outcome == "verified", records[("subtract", model)]
        assert records[("cheat", model)].outcome in ("stuck", "failed_verification"), records[("cheat", model)]
        assert "test_ops" not in (records[("cheat", model)].patch or ""), "a refused edit of a test never landed"
    report = json.loads((out / "report.json").read_text())[0]
    by_model = report["by_model"]
    assert set(by_model) == set(LOOPS)
    for figures in by_model.values():
        assert (figures["task_runs"], figures["completed"]) == (3, 2), figures
    markdown = (out / "report.md").read_text()
    assert all(model in markdown for model in LOOPS)
    assert "### Which isolation each loop got" in markdown and "- codex: its own container" in markdown
