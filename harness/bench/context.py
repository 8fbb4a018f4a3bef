"""`harness bench context`: the context tiers on a long task, side by side with the naive loop.

A generated repository of FILES files (about 5k tokens each, about 150k in all) and a scripted model
that reads every one of them, thinking aloud at each step, then finishes. Three runs, one after the
other, through the real sandbox:
1. tiers: the default context (folding at 70% of a 32k budget, summaries at 95%);
2. naive, same budget: nothing folded or summarised; it must end `limit:context`;
3. naive, run to the same step: the same loop with a budget it never reaches, to price what
   keeping everything costs over the whole task.
Input tokens are the prompt sizes the requests were sent with (the estimate every request records;
the scripted model reports none) plus the summary calls' own prompts. The target is tiers / naive
(run to the same step) <= 0.4.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from pydantic import BaseModel

from harness import assembly
from harness.agent.outcome import RunState
from harness.assembly import Runtime
from harness.config import ContextConfig, LimitsConfig, RunConfig
from harness.providers.scripted import ScriptedProvider
from harness.trajectory import read_records
from harness.types import ModelTurn, ToolCall

FILES = 30
LINES = 290
BUDGET = 32_000
THOUGHT = (
    "Reading on: this module defines more of the registry, and I still have to see where the values "
    "are consumed before I can decide what to change. "
) * 8


class ContextRun(BaseModel):
    mode: str
    outcome: str
    detail: str
    steps: int
    input_tokens: int
    summaries: int
    summary_input_tokens: int
    summary_cost_usd: float
    folds: int


class ContextBench(BaseModel):
    files: int
    content_tokens: int
    budget_tokens: int
    tiers: ContextRun
    naive_same_budget: ContextRun
    naive_same_steps: ContextRun
    tiers_over_naive: float
    """Input tokens with the tiers / the naive loop run to the same step (target <= 0.4)."""


def _repo(root: Path) -> int:
    (root / "registry").mkdir(parents=True)
    chars = 0
    for n in range(FILES):
        text = "".join(
            f"ENTRY_{n}_{k} = lookup('{n}-{k}')  # value {k} of part {n} of the registry\n" for k in range(LINES)
        )
        (root / "registry" / f"part_{n:02}.py").write_text(text)
        chars += len(text)
    return chars // 4


def _turns() -> list[ModelTurn]:
    reads = [
        ModelTurn(
            text=f"Part {n}. {THOUGHT}",
            tool_calls=[ToolCall(id=f"read-{n}", name="read_file", arguments={"path": f"registry/part_{n:02}.py"})],
            stop_reason="tool_use",
        )
        for n in range(FILES)
    ]
    final = ModelTurn(text="I read every part of the registry.\nBiggest obstacle: its size")
    return [*reads, final]


def _run(mode: str, context: ContextConfig, runtime: Runtime, repo: Path, sessions: Path) -> ContextRun:
    config = RunConfig(
        model="scripted:bench-context", verify="true", limits=LimitsConfig(max_steps=FILES + 5), context=context
    )
    with assembly.open_sandbox(runtime, None) as sandbox:
        session = assembly.create_session(repo, sessions, config, sandbox, None)
        state = RunState(session_id=session.id, task="Read the registry.", model="scripted", snapshot_step=0)
        agent = assembly.build_agent(
            config=config,
            session=session,
            sandbox=sandbox,
            provider=ScriptedProvider(_turns()),
            state=state,
            runtime=runtime,
        )
        result = agent.run()
    records = read_records(session.dir)
    summaries = [r for r in records if r.kind == "summary"]
    return ContextRun(
        mode=mode,
        outcome=result.outcome,
        detail=result.detail,
        steps=result.steps,
        input_tokens=sum(r.estimated_tokens for r in records if r.kind == "request")
        + sum(s.before_tokens for s in summaries),
        summaries=len(summaries),
        summary_input_tokens=sum(s.before_tokens for s in summaries),
        summary_cost_usd=round(sum(s.cost_usd for s in summaries), 6),
        folds=sum(1 for r in records if r.kind == "event" and r.event == "context_folded"),
    )


def measure(runtime: Runtime) -> ContextBench:
    with tempfile.TemporaryDirectory(prefix="harness-bench-context-") as tmp:
        repo = Path(tmp) / "repo"
        content = _repo(repo)
        sessions = Path(tmp) / "sessions"
        tiers = _run("tiers", ContextConfig(budget_tokens=BUDGET), runtime, repo, sessions)
        naive = ContextConfig(budget_tokens=BUDGET, fold=False, summaries=False)
        cut = _run("naive, same budget", naive, runtime, repo, sessions)
        unbounded = naive.model_copy(update={"budget_tokens": 100 * BUDGET})
        whole = _run("naive, run to the same step", unbounded, runtime, repo, sessions)
    return ContextBench(
        files=FILES,
        content_tokens=content,
        budget_tokens=BUDGET,
        tiers=tiers,
        naive_same_budget=cut,
        naive_same_steps=whole,
        tiers_over_naive=round(tiers.input_tokens / whole.input_tokens, 3) if whole.input_tokens else 0.0,
    )
