"""The loop against the real openai SDK over loopback (the providers' wire server): a provider that
fails mid-run ends as model_error with the trajectory intact and resumable; token and cost limits."""

from __future__ import annotations

import json

import pytest

from harness.agent.outcome import RunState
from harness.trajectory import TRAJECTORY_FILE, read_records, read_state
from tests.agent.conftest import ADD_FIX
from tests.providers.wire_server import WireServer, openai_error, openai_turn, openai_usage

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]
KEY = "sk-test-wire-0123456789abcdef"


@pytest.fixture
def server():
    with WireServer() as running:
        yield running


def config_file(tmp_path, server, **prices):
    lines = [
        "[providers.openai]",
        f'base_url = "{server.openai_base_url}"',
        'api_key_env = "WIRE_KEY"',
        "[providers.openai.retry]",
        "max_retries_per_call = 1",
        "initial_backoff_s = 0",
        "max_backoff_s = 0",
    ]
    if prices:
        lines += ["[providers.openai.prices.wire-model]", *(f"{k} = {v}" for k, v in prices.items())]
    path = tmp_path / "config.toml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def call(call_id, name, **args):
    return (call_id, name, json.dumps(args))


def test_provider_failure_is_model_error_then_resume_verifies(harness, server, tmp_path):
    server.push(
        openai_turn("Running the tests.", [call("c1", "run_tests")]),
        # broken argument JSON: one safely repairable, one not (answered as invalid_json)
        openai_turn("", [("c2", "read_file", '{"path": "calc/ops.py",}'), ("c2b", "read_file", "[1, 2")]),
        openai_error(500, "boom", type="server_error"),
        openai_error(500, "boom", type="server_error"),
    )
    ran = harness.run(
        "openai:wire-model", "--config", config_file(tmp_path, server), session="flaky", env={"WIRE_KEY": KEY}
    )
    result = ran.json()
    assert ran.code == 14 and result["outcome"] == "model_error" and result["steps"] == 2
    assert result["tokens"]["input"] == 20 and result["tokens"]["output"] == 10
    folder = harness.session_dir("flaky")
    assert [r.kind for r in read_records(folder)][-1] in ("outcome", "event")
    kept = [r.detail for r in read_records(folder) if r.kind == "event" and r.event == "workspace_kept"]
    assert result["cause"] is None and not (folder / "workspace").exists(), f"ended: its workspace goes ({kept})"
    for name in (TRAJECTORY_FILE, "state.json", "run.json"):
        assert KEY not in (folder / name).read_text()
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"

    server.push(
        openai_turn("Fixing.", [call("c3", "apply_patch", **ADD_FIX)]),
        openai_turn("I changed add() to add. It subtracted. The verify command passes now."),
    )
    resumed = harness("resume", "flaky", "--json", env={"WIRE_KEY": KEY})
    assert resumed.code == 0, resumed.stdout + resumed.stderr
    assert resumed.json()["outcome"] == "verified" and resumed.json()["steps"] == 4
    tools = [(r.step, r.call_id, r.error_kind) for r in read_records(folder) if r.kind == "tool"]
    # nothing before the failure ran twice
    assert tools == [(1, "c1", None), (2, "c2", None), (2, "c2b", "invalid_json"), (3, "c3", None)]
    sent = server.requests[-1].body["messages"]
    assert [m["role"] for m in sent[:2]] == ["system", "user"] and "look before" in sent[0]["content"].lower()


def test_token_limit(harness, server, tmp_path):
    for n in range(3):
        server.push(openai_turn("", [call(f"c{n}", "read_file", path="calc/ops.py")], usage=openai_usage(10, 5)))
    ran = harness.run(
        "openai:wire-model", "--config", config_file(tmp_path, server), "--max-tokens", "30", env={"WIRE_KEY": KEY}
    )
    assert ran.code == 13 and ran.json()["outcome"] == "limit:tokens" and ran.json()["steps"] == 2


def test_cost_limit_counts_priced_usage(harness, server, tmp_path):
    for n in range(3):
        server.push(openai_turn("", [call(f"c{n}", "read_file", path="calc/ops.py")], usage=openai_usage(10, 5)))
    config = config_file(tmp_path, server, input_per_mtok=100000, output_per_mtok=200000)  # $2 per turn
    ran = harness.run("openai:wire-model", "--config", config, "--max-cost", "3", env={"WIRE_KEY": KEY})
    result = ran.json()
    assert ran.code == 13 and result["outcome"] == "limit:cost" and result["steps"] == 2
    assert result["cost_usd"] == pytest.approx(4.0)
    state = read_state(harness.session_dir(result["session_id"]), RunState)
    assert state.spent.cost_usd == pytest.approx(4.0)


def test_a_refusal_reaches_the_trajectory_and_the_next_turn(harness, server, tmp_path):
    from tests.providers.wire_server import Reply, openai_chunk, sse_data

    refusal = Reply(
        events=[
            sse_data(openai_chunk({"role": "assistant", "refusal": "I won't do that."})),
            sse_data(openai_chunk({}, finish="stop")),
            b"data: [DONE]\n\n",
        ]
    )
    server.push(refusal, openai_turn("Done now."))
    ran = harness.run(
        "openai:wire-model",
        "--config",
        config_file(tmp_path, server),
        "--max-verify-rounds",
        "2",
        session="refused",
        env={"WIRE_KEY": KEY},
    )
    assert ran.code == 11, ran.stdout + ran.stderr  # verification decides; the refusal changed nothing
    [first, *_] = [r.turn for r in read_records(harness.session_dir("refused")) if r.kind == "turn"]
    assert (first.stop_reason, first.refusal) == ("refusal", "I won't do that.")
    resent = [m for m in server.requests[1].body["messages"] if m["role"] == "assistant"]
    assert resent[0]["content"] == "I won't do that."


def test_a_tool_call_the_server_could_not_parse_is_fed_back_like_invalid_json(harness, server, tmp_path):
    from tests.providers.wire_server import Reply, openai_chunk, sse_data, sse_event

    failed = {
        "error": {
            "message": "Failed to call a function.",
            "type": "invalid_request_error",
            "code": "tool_use_failed",
            "failed_generation": '{"name": "read_file", "arguments": {',
        }
    }
    server.push(
        Reply(events=[sse_data(openai_chunk({"role": "assistant", "content": ""})), sse_event("error", failed)]),
        openai_turn("Nothing to change."),
    )
    ran = harness.run(
        "openai:wire-model",
        "--config",
        config_file(tmp_path, server),
        verify=None,
        session="groq",
        env={"WIRE_KEY": KEY},
    )
    assert ran.code == 10, ran.stdout + ran.stderr
    [tool] = [r for r in read_records(harness.session_dir("groq")) if r.kind == "tool"]
    assert tool.error_kind == "invalid_json" and "could not parse" in tool.text
    answer = [m for m in server.requests[1].body["messages"] if m["role"] == "tool"]
    assert answer and answer[0]["content"].startswith("ERROR[invalid_json]")


def test_a_whole_run_on_a_strict_reasoning_server(harness, server, tmp_path):
    from tests.providers.wire_server import Reply, deepseek_thinking_check, openai_chunk, sse_data

    server.require(deepseek_thinking_check)
    chunks = [
        openai_chunk({"role": "assistant", "reasoning_content": "Read ops.py before changing it."}),
        openai_chunk(
            {
                "tool_calls": [
                    {"index": 0, "id": "c1", "function": {"name": "read_file", "arguments": '{"path": "calc/ops.py"}'}}
                ]
            }
        ),
        openai_chunk({}, finish="tool_calls"),
        openai_chunk(None, usage=openai_usage(50, 20)),
    ]
    server.push(Reply(events=[sse_data(c) for c in chunks] + [b"data: [DONE]\n\n"]), openai_turn("Nothing to change."))
    ran = harness.run(
        "openai:deepseek-reasoner",
        "--config",
        config_file(tmp_path, server),
        "--thinking",
        "high",
        verify=None,
        session="thinks",
        env={"WIRE_KEY": KEY},
    )
    assert ran.code == 10, ran.stdout + ran.stderr
    assert server.requests[0].body["reasoning_effort"] == "high"
    [assistant] = [m for m in server.requests[1].body["messages"] if m["role"] == "assistant"]
    assert assistant["reasoning_content"] == "Read ops.py before changing it."
    [first, _] = [r.turn for r in read_records(harness.session_dir("thinks")) if r.kind == "turn"]
    assert first.reasoning is not None and first.reasoning.text == "Read ops.py before changing it."
    shown = harness("show", "thinks", env={"COLUMNS": "250"})
    assert "thinking: Read ops.py before changing it." in shown.stdout


def test_a_run_whose_endpoint_never_answered_resumes_against_another(harness, server, tmp_path):
    """The URL was wrong: the run ends in seconds with 69 and says which flag fixes it; the resume
    points at the server that is there and reads the key from another variable (both recorded, no key
    in any file), and the run verifies over the real SDK."""
    import time

    began = time.monotonic()
    ran = harness.run(
        "openai:wire-model", "--base-url", "http://127.0.0.1:9/v1", session="moved", env={"OPENAI_API_KEY": "sk-old"}
    )
    assert ran.code == 69 and time.monotonic() - began < 60 and ran.json()["cause"] == "endpoint_unreachable"
    server.push(
        openai_turn("Fixing.", [call("c1", "apply_patch", **ADD_FIX)]),
        openai_turn("I changed add() to add. The verify command passes now."),
    )
    resumed = harness(
        "resume", "moved", "--base-url", server.openai_base_url, "--api-key-env", "WIRE_KEY", "--json",
        env={"WIRE_KEY": KEY},
    )  # fmt: skip
    assert resumed.code == 0 and resumed.json()["outcome"] == "verified", resumed.stdout + resumed.stderr
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    folder = harness.session_dir("moved")
    [changed] = [r for r in read_records(folder) if r.kind == "event" and r.event == "resume_changed"]
    assert "base_url: 'http://127.0.0.1:9/v1' ->" in changed.detail and "api_key_env" in changed.detail
    saved = json.loads((folder / "run.json").read_text())
    assert saved["base_url"] == server.openai_base_url, "a later resume continues against the new endpoint"
    assert KEY not in (folder / "run.json").read_text() + (folder / TRAJECTORY_FILE).read_text()
