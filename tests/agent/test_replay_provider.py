from harness.providers.factory import make_provider
from harness.providers.replay import EXHAUSTED_TEXT
from harness.trajectory import Trajectory, TurnRecord
from harness.types import Message, ModelTurn, ToolCall, Usage


def test_replay_serves_recorded_turns_by_conversation_position(tmp_path):
    trajectory = Trajectory(tmp_path)
    first = ModelTurn(
        text="look", tool_calls=[ToolCall(id="a", name="list_dir")], usage=Usage(input_tokens=9), cost_usd=0.5
    )
    second = ModelTurn(text="done")
    trajectory.append(TurnRecord(step=1, turn=first))
    trajectory.append(TurnRecord(step=2, turn=second))
    trajectory.close()
    provider = make_provider(f"replay:{tmp_path}", api_key=None)
    head = [Message(role="system", content="s"), Message(role="user", content="t")]
    answer = provider.complete(head, [], max_tokens=100)
    assert answer.tool_calls == first.tool_calls and answer.cost_usd == 0 and answer.usage == Usage()
    # asked again with the same conversation (a resumed run): the same turn, not the next one
    assert provider.complete(head, [], max_tokens=100).text == "look"
    later = [*head, Message(role="assistant", content="look"), Message(role="tool", content="x", tool_call_id="a")]
    assert provider.complete(later, [], max_tokens=100).text == "done"
    assert provider.complete([*later, Message(role="assistant")], [], max_tokens=100).text == EXHAUSTED_TEXT
