"""Real sessions for the page tests: a repository full of markup traps, run by a scripted model
through the real loop, gate, tools and snapshot store (commands on the host FakeSandbox, which the
pages cannot tell apart from the engine), and a batch directory whose records link to them."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.batch.records import BatchDir, TaskRunKey, TaskRunRecord
from harness.config import LimitsConfig, RunConfig
from harness.providers.scripted import ScriptedProvider
from harness.types import ModelTurn, ToolCall, Usage
from tests.inprocess import fake_run

HOSTILE = (
    '<script>window.__pwned = "script";</script>\n'
    "</textarea></pre><b>bold?</b>\n"
    "<img src=x onerror=\"window.__pwned = 'img'\">\n"
    '<a id="evil" href="javascript:window.__pwned = \'link\'">click me</a>\n'
)
"""Markup that would run or restyle the page if it were not escaped."""


def hostile_repo(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "pkg" / "page.html").write_text(HOSTILE, encoding="utf-8")
    (root / "pkg" / "mod.py").write_text("def answer():\n    return 41\n", encoding="utf-8")
    (root / "tests" / "test_mod.py").write_text("def test_answer():\n    assert True\n", encoding="utf-8")
    return root


def _turn(text: str, *calls: tuple[str, dict], tokens: int = 1000, cost: float = 0.01) -> ModelTurn:
    return ModelTurn(
        text=text,
        tool_calls=[ToolCall(id=f"c{i}-{name}", name=name, arguments=args) for i, (name, args) in enumerate(calls)],
        stop_reason="tool_use" if calls else "end_turn",
        usage=Usage(input_tokens=tokens, output_tokens=50),
        cost_usd=cost,
        model="scripted",
    )


def hostile_turns() -> list[ModelTurn]:
    fix = {"path": "pkg/mod.py", "old_text": "return 41", "new_text": "return 42  # <script>x()</script>"}
    return [
        _turn(f"Reading the page first. {HOSTILE}", ("read_file", {"path": "pkg/page.html"}), tokens=1200),
        _turn("A file that is not there.", ("read_file", {"path": "missing.py"}), tokens=1500),
        _turn("Fixing the answer.", ("apply_patch", fix), tokens=1800, cost=0.02),
        _turn(
            "I changed answer() to return 42. It returned 41. The tests pass.\n"
            "Biggest obstacle: the <script> tags in page.html",
            tokens=2000,
        ),
    ]


def run_session(
    repo: Path,
    state_dir: Path,
    session_id: str,
    turns: list[ModelTurn],
    verify: str = "true",
    config: RunConfig | None = None,
) -> Path:
    """Run turns through the real loop into state_dir/session_id; the session folder."""
    config = config or RunConfig(model="scripted:hostile", verify=verify, limits=LimitsConfig(max_steps=10))
    _, folder = fake_run(
        repo, state_dir, ScriptedProvider(turns), config, session_id=session_id, task=f"Fix it. {HOSTILE}"
    )
    return folder


@pytest.fixture
def hostile_session(tmp_path: Path) -> Path:
    return run_session(hostile_repo(tmp_path / "repo-s"), tmp_path / "state", "hostile-1", hostile_turns())


def make_batch(root: Path, repo: Path) -> BatchDir:
    """A batch of three task-runs: one verified with a session, one failed with a session, one with none."""
    batch = BatchDir(root)
    good = TaskRunKey(task_id="fix-answer", model="scripted:hostile", run_index=0)
    bad = TaskRunKey(task_id="fix-answer", model="scripted:/tmp/<b>answer</b>.yaml", run_index=0)
    # as long as a mined id and a local server's model name get: the runs table must still fit its page
    lost = TaskRunKey(
        task_id="lost-task-5a7e078c-raise-in-partition-all-when-length-is-invalid",
        model="openai:qwen2.5-coder-32b-instruct-q4_k_m.gguf@http://127.0.0.1:8080/v1/chat/completions",
        run_index=0,
    )
    good_dir = run_session(repo, batch.sessions, good.session_id, hostile_turns())
    bad_turns = [_turn("Giving up.\nBiggest obstacle: the <script> tags in page.html.", tokens=900)]
    bad_dir = run_session(repo, batch.sessions, bad.session_id, bad_turns, verify="false")
    patch = (good_dir / "change.patch").read_text(encoding="utf-8")
    for key, folder, verified, cost, turns in ((good, good_dir, True, 0.05, 3), (bad, bad_dir, False, 0.003, 0)):
        batch.write(
            TaskRunRecord(
                key=key,
                status="done",
                outcome="verified" if verified else "stuck",
                verified=verified,
                session_id=key.session_id,
                session_dir=str(folder),
                patch=patch if verified else None,
                turns=turns,
                first_tool="read_file" if turns else None,
                cost_usd=cost,
                obstacle="the <script> tags in page.html",
                tool_errors={"not_found": 1} if verified else {},
            )
        )
    batch.write(TaskRunRecord(key=lost, status="gave_up", outcome="sandbox_error", detail="engine went away"))
    return batch


@pytest.fixture
def hostile_batch(tmp_path: Path) -> BatchDir:
    return make_batch(tmp_path / "batch", hostile_repo(tmp_path / "repo"))
