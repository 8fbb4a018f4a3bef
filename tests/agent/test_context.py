from harness.agent.context import Context, call_label, slim
from harness.config import ContextConfig
from harness.types import ModelTurn, ToolCall


def make(budget: int = 2000) -> Context:
    return Context(ContextConfig(budget_tokens=budget, keep_recent=1), "SYSTEM PROMPT", "Task: fix it")


def add_read(ctx: Context, i: int, lines: int = 300) -> None:
    call = ToolCall(id=f"c{i}", name="read_file", arguments={"path": f"pkg/mod{i}.py"})
    ctx.add_turn(ModelTurn(text=f"reading {i}", tool_calls=[call]))
    ctx.add_tool_result(call, "\n".join(f"{n}: x = {n}" for n in range(lines)), False)


def test_below_threshold_nothing_folds():
    ctx = make(budget=100_000)
    add_read(ctx, 1)
    assert "[folded" not in "".join(m.content for m in ctx.prepare([]))


def test_above_threshold_old_tool_results_fold_head_and_own_text_stay():
    ctx = make()
    for i in range(6):
        add_read(ctx, i)
    before = ctx.messages()
    messages = ctx.prepare([])
    assert messages[0] == before[0] and messages[1] == before[1]  # pinned head untouched
    tool = [m for m in messages if m.role == "tool"]
    assert tool[0].content == "[folded: read_file pkg/mod0.py, 300 lines]"
    assert "[folded" not in tool[-1].content  # the most recent result is kept
    assert [m.content for m in messages if m.role == "assistant"] == [f"reading {i}" for i in range(6)]
    assert ctx.estimate_tokens([]) <= 0.7 * 2000


def test_folding_is_stable_so_the_prefix_stays_cacheable():
    ctx = make()
    for i in range(6):
        add_read(ctx, i)
    first = ctx.prepare([])
    ctx.add_user("short note")
    second = ctx.prepare([])
    assert second[: len(first)] == first


def test_state_round_trip_rebuilds_the_same_context():
    ctx = make()
    for i in range(6):
        add_read(ctx, i)
    ctx.prepare([])
    again = Context(ContextConfig(budget_tokens=2000, keep_recent=1), "ignored", "ignored", ctx.state())
    assert again.messages() == ctx.messages()


def test_calibration_moves_toward_reported_usage():
    ctx = make(budget=100_000)
    add_read(ctx, 1)
    ctx.prepare([])
    chars = ctx.estimator.chars(ctx.messages(), [])
    ctx.observe_usage(chars // 2)  # the provider says 2 chars per token
    assert 2.0 < ctx.estimator.chars_per_token < 4.0
    ctx.observe_usage(0)  # scripted models report nothing: no change
    assert 2.0 < ctx.estimator.chars_per_token < 4.0


def test_slim_keeps_head_and_tail_and_says_how_much_was_cut():
    text = "A" * 1000 + "B" * 1000
    out = slim(text, 300)
    assert out.startswith("A" * 200) and out.endswith("B" * 100) and "1700 characters omitted" in out


def test_call_label_uses_the_main_argument():
    assert call_label(ToolCall(id="1", name="search_code", arguments={"pattern": "def add"})) == "search_code def add"
    assert call_label(ToolCall(id="1", name="git_status")) == "git_status"


def test_large_results_fold_in_one_batch_and_the_unanswered_one_stays():
    """When the recent window alone is over the fold target (every result is large), one fold takes
    the recent results too, except the one the model has not answered yet, and the next steps add to
    an unchanged prefix instead of folding one result per step."""
    ctx = Context(ContextConfig(budget_tokens=20_000, keep_recent=4), "SYSTEM PROMPT", "Task: fix it")
    for i in range(3):
        add_read(ctx, i, lines=1200)  # ~3.5k tokens each: four of them are over half the budget
    first = ctx.prepare([])
    assert "[folded" not in "".join(m.content for m in first)  # under fold_at: nothing folds yet
    add_read(ctx, 3, lines=1200)
    add_read(ctx, 4, lines=1200)
    folded = ctx.prepare([])
    tool = [m.content for m in folded if m.role == "tool"]
    # Three folded in this one step, two of them from the recent window: oldest first, down to half.
    assert [c.startswith("[folded") for c in tool] == [True, True, True, False, False]
    assert ctx.estimate_tokens([]) <= 20_000 // 2
    add_read(ctx, 5, lines=1200)
    after = ctx.prepare([])
    assert after[: len(folded)] == folded  # no fold this step: the prefix the provider cached is intact


def test_a_commands_volatile_output_is_masked_but_never_a_files_content():
    from harness.agent.context import stable

    output = (
        "exit_code=1 status=exit_nonzero duration=812ms\n"
        "2026-12-01 13:45:01,123 INFO request 3f2b8c1e-9a4d-4e7b-8c2a-1d5e6f7a8b9c failed\n"
        "E   FileNotFoundError: /tmp/pytest-of-sandbox/pytest-17/test_x0/data.json and /tmp/tmpab12cd34\n"
        "commit 1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b\n"
    )
    masked = stable(output, "run_tests")
    assert "duration" not in masked and "<time> INFO request <uuid> failed" in masked
    assert "/tmp/pytest-of-sandbox/pytest-<n>/test_x0" in masked and "/tmp/tmp<random>" in masked
    assert "1a2b3c4d5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b" in masked  # a commit id means something: kept
    assert stable(output.replace("duration=812ms", "duration=9ms"), "run_tests") == masked
    content = "created = 2026-12-01T13:45:01Z\nid = 3f2b8c1e-9a4d-4e7b-8c2a-1d5e6f7a8b9c\n"
    assert stable(content, "read_file") == content  # what a file says is what the model reads
