from harness.config import ContextConfig
from harness.context import Context, call_label, slim
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
