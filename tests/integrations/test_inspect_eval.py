"""An Inspect eval with `sandbox=("harness", "harness.toml")`: found through the entry point, its
bash tool and its scorer run in harness containers on the offline example, and the sample's
session keeps every change as a step; nothing is left on the engine."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("inspect_ai", reason="the inspect extra is not installed")

from inspect_ai import Task, eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.scorer import CORRECT, INCORRECT, Score, accuracy, scorer
from inspect_ai.solver import basic_agent
from inspect_ai.tool import bash
from inspect_ai.util import sandbox

from sandbox.session.session import Session, list_sessions

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "calc"
pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(240)]


@scorer(metrics=[accuracy()])
def suite_passes():
    async def score(state, target):
        result = await sandbox().exec(["python3", "-m", "pytest", "-q"], timeout=60)
        return Score(value=CORRECT if result.returncode == 0 else INCORRECT, explanation=result.stdout[-500:])

    return score


def bash_call(command: str) -> ModelOutput:
    output = ModelOutput.for_tool_call(model="mockllm/model", tool_name="bash", tool_arguments={"command": command})
    output.usage = ModelUsage(input_tokens=10, output_tokens=5, total_tokens=15)  # no tokenizer download offline
    return output


def test_an_inspect_eval_runs_in_harness(tmp_path: Path, run_label: str, docker_client) -> None:
    state = tmp_path / "sessions"
    config = tmp_path / "harness.toml"
    config.write_text(
        f'[harness]\nrepo = "{EXAMPLE}"\nstate_dir = "sessions"\nrun_id = "{run_label}"\ntimeout_s = 60\n'
    )
    outputs = [
        bash_call("python3 -m pytest -q"),
        bash_call("sed -i '/sum of a and b/{n;s/a - b/a + b/}' calc/ops.py && python3 -m pytest -q"),
        ModelOutput.for_tool_call(model="mockllm/model", tool_name="submit", tool_arguments={"answer": "fixed add()"}),
    ]
    for output in outputs[2:]:
        output.usage = ModelUsage(input_tokens=10, output_tokens=5, total_tokens=15)
    task = Task(
        dataset=[Sample(input="Fix the failing tests in calc.")],
        solver=basic_agent(tools=[bash(timeout=60)], max_attempts=1),
        scorer=suite_passes(),
        sandbox=("harness", str(config)),
    )
    log = eval(
        task, model=get_model("mockllm/model", custom_outputs=outputs), log_dir=str(tmp_path / "logs"), display="none"
    )[0]

    assert log.status == "success", log.error
    sample = log.samples[0]
    assert sample.scores["suite_passes"].value == CORRECT, sample.scores
    tool_outputs = [str(m.content) for m in sample.messages if m.role == "tool"]
    assert "1 failed" in tool_outputs[0] or "2 failed" in tool_outputs[0]
    assert "4 passed" in tool_outputs[1]

    (info,) = list_sessions(state)
    with Session.open(state, info.id) as session:
        assert any("sed -i" in r.note for r in session.records)
        assert "return a + b" in (session.workspace / "calc" / "ops.py").read_text()
    assert docker_client.containers.list(all=True, filters={"label": f"harness.session={info.id}"}) == []
