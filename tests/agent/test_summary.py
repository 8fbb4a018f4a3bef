"""The third context tier through the real loop (host FakeSandbox): when folding is not enough, the
older middle becomes a summary the model writes in a separate, metered call; excluded directions
accumulate; the summary is on record and on the page; resume and replay reproduce it; a failed
summary call ends the run limit:context with the reason; canned models keep their place."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from harness import assembly
from harness.agent.context import excluded_directions
from harness.agent.outcome import RunState
from harness.assembly import Runtime
from harness.config import ContextConfig, LimitsConfig, RunConfig
from harness.errors import ModelUnavailable
from harness.providers.replay import ReplayProvider
from harness.providers.scripted import ScriptedProvider
from harness.report import pages
from harness.trajectory import read_records, read_state
from harness.types import Message, ModelTurn, ToolCall, ToolSchema, Usage, is_summary_request, turns_so_far
from sandbox.fake import FakeSandbox
from sandbox.session.session import Session
from tests.inprocess import fake_run

FILES = 10
THINKING = "I am weighing where the cache is filled and which caller depends on it. " * 50


def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    for n in range(FILES):
        (root / "src" / f"m{n}.py").write_text("".join(f"VALUE_{n}_{k} = {k}  # padding padding\n" for k in range(220)))
    return root


def reading_turns() -> list[ModelTurn]:
    turns = [
        ModelTurn(
            text=f"Step {n}: {THINKING}",
            tool_calls=[ToolCall(id=f"r{n}", name="read_file", arguments={"path": f"src/m{n}.py"})],
            stop_reason="tool_use",
            usage=Usage(output_tokens=200),  # no input count: the estimate stays uncalibrated, as in a replay
            cost_usd=0.01,
        )
        for n in range(FILES)
    ]
    return [*turns, ModelTurn(text="Done.\nBiggest obstacle: none", cost_usd=0.01)]


class Summarising:
    """A canned model that answers summary requests with Excluded bullets, or fails them."""

    name = "summarising"

    def __init__(self, turns: list[ModelTurn], fail: bool = False) -> None:
        self.inner, self.fail, self.requests = ScriptedProvider(turns), fail, 0

    def complete(
        self, messages: Sequence[Message], tools: Sequence[ToolSchema], *, max_tokens: int, timeout_s=None
    ) -> ModelTurn:
        if not is_summary_request(messages):
            return self.inner.complete(messages, tools, max_tokens=max_tokens)
        self.requests += 1
        assert tools == [] and messages[1].content.startswith("Model turns 1-")
        if self.fail:
            raise ModelUnavailable("cannot reach the model endpoint (test)")
        return ModelTurn(
            text=f"Done: read src files.\nOpen: the fix.\nExcluded:\n- idea {self.requests}\nNext: read on.",
            usage=Usage(input_tokens=3000, output_tokens=100),
            cost_usd=0.5,
        )


def config(**context: object) -> RunConfig:
    defaults = {"budget_tokens": 8000, "keep_recent": 1, "keep_recent_turns": 2, "tool_result_chars": 20_000}
    return RunConfig(
        model="scripted:x",
        verify="true",
        limits=LimitsConfig(max_steps=40),
        context=ContextConfig(**{**defaults, **context}),
    )


def run(tmp_path: Path, provider, cfg: RunConfig, name: str = "s"):
    source = tmp_path / "repo" if (tmp_path / "repo").exists() else repo(tmp_path)
    return fake_run(source, tmp_path / "state", provider, cfg, session_id=name, task="Find the bug.")


def summaries(folder: Path) -> list:
    return [r for r in read_records(folder) if r.kind == "summary"]


def test_folding_not_enough_makes_a_summary_and_the_run_goes_on(tmp_path):
    provider = Summarising(reading_turns())
    result, folder = run(tmp_path, provider, config())
    assert result.outcome == "verified", result.detail
    made = summaries(folder)
    assert made and provider.requests == len(made)
    assert made[-1].excluded == [f"idea {n}" for n in range(1, len(made) + 1)]  # accumulated
    assert all(s.after_tokens < s.before_tokens for s in made)
    assert result.cost_usd == round(0.01 * (FILES + 1) + 0.5 * len(made), 6)  # the summary calls are metered
    entries = read_state(folder, RunState).context.entries
    assert entries[0].message.role == "system" and entries[1].message.content.startswith("Task:")  # pinned head
    summary = entries[2].message.content
    assert summary.startswith(f"[harness summary of model turns 1-{made[-1].through_turn}]")
    assert "Excluded directions so far" in summary and "- idea 1" in summary
    page = pages.session_page(folder)
    assert "Context summary of model turns 1-" in page and "idea 1" in page


def test_canned_models_keep_their_place_after_a_summary(tmp_path):
    result, folder = run(tmp_path, ScriptedProvider(reading_turns()), config())
    assert result.outcome == "verified" and summaries(folder)
    reads = [r.arguments["path"] for r in read_records(folder) if r.kind == "tool"]
    assert reads == [f"src/m{n}.py" for n in range(FILES)]  # every file once, none re-read after a summary
    assert summaries(folder)[0].text.startswith("Done: model turns 1-")


def test_replay_reproduces_the_summaries(tmp_path):
    _, folder = run(tmp_path, Summarising(reading_turns()), config(), name="orig")
    replayed, again = run(tmp_path, ReplayProvider.from_session(folder), config(), name="copy")
    assert replayed.outcome == "verified"
    assert [s.text for s in summaries(again)] == [s.text for s in summaries(folder)]


def test_a_failed_summary_call_ends_limit_context_with_the_reason(tmp_path):
    result, _ = run(tmp_path, Summarising(reading_turns(), fail=True), config())
    assert result.outcome == "limit:context" and "summary call failed" in result.detail


def test_without_tiers_the_same_task_ends_limit_context(tmp_path):
    result, folder = run(tmp_path, ScriptedProvider(reading_turns()), config(fold=False, summaries=False))
    assert result.outcome == "limit:context" and "folding off" in result.detail
    assert not summaries(folder)


def test_excluded_directions_and_turn_counting():
    text = "Done: x\nOpen: y\nExcluded:\n- caching in utils.py\n* retrying the call\n- none\nNext: z"
    assert excluded_directions(text) == ["caching in utils.py", "retrying the call"]
    assert excluded_directions("Excluded: none\nNext: go") == []
    assert excluded_directions("Excluded: the env var\nNext: go") == ["the env var"]
    messages = [
        Message(role="system", content="s"),
        Message(role="user", content="task"),
        Message(role="user", content="[harness summary of model turns 1-7]\nDone: ..."),
        Message(role="assistant", content="a"),
    ]
    assert turns_so_far(messages) == 8


def test_a_run_interrupted_right_after_a_summary_resumes_without_repeating_itself(tmp_path):
    provider = Summarising(reading_turns())
    cfg = config()
    session = Session.create(repo(tmp_path), tmp_path / "state", spec=cfg.spec(), session_id="r")
    folder = Path(session.dir)

    def crash(phase: str) -> None:  # Ctrl-C as soon as the first summarised step's turn is on record
        if phase == "turn_recorded" and summaries(folder):
            raise KeyboardInterrupt

    state = RunState(session_id=session.id, task="Find the bug.", model="scripted:x", snapshot_step=session.step)
    first = assembly.build_agent(
        config=cfg, session=session, sandbox=FakeSandbox(), provider=provider, state=state,
        runtime=Runtime(run_id="t", on_phase=crash),
    ).run()  # fmt: skip
    assert first.outcome == "interrupted"
    resumed = assembly.build_agent(
        config=cfg,
        session=Session.open(tmp_path / "state", "r"),
        sandbox=FakeSandbox(),
        provider=provider,
        state=read_state(folder, RunState),
        runtime=Runtime(run_id="t"),
    ).run()
    assert resumed.outcome == "verified", resumed.detail
    reads = [r.arguments["path"] for r in read_records(folder) if r.kind == "tool"]
    assert sorted(set(reads)) == [f"src/m{n}.py" for n in range(FILES)]
    assert len(reads) == FILES  # each once: the interrupted turn's call ran on resume, nothing was redone
    assert read_state(folder, RunState).context.summarised_turns >= summaries(folder)[0].through_turn
