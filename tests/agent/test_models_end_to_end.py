"""The example end to end with each protocol prefix: the real CLI and containers, the real SDK client
of the protocol, and a loopback server speaking it strictly (the request checks of each vendor's
recorded refusals: the limit field, signatures echoed, reasoning items and thinking sent back, the
thinking form); the run is verified and everything the protocol needs survived the loop."""

from __future__ import annotations

import json

import pytest

from tests.agent.conftest import ADD_FIX
from tests.providers.recordings import recording
from tests.providers.test_anthropic_today import google_credentials
from tests.providers.wire_server import (
    Recorded,
    Reply,
    WireServer,
    anthropic_adaptive_check,
    anthropic_events,
    anthropic_thinking_check,
    anthropic_turn,
    bedrock_stream,
    gemini_signature,
    gemini_signature_check,
    openai_error,
    openai_turn,
    responses_reasoning_check,
    responses_turn,
)
from tests.telemetry.receiver import Receiver

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]
KEY = "sk-test-e2e-0123456789abcdef"
RUN_TESTS = ("c1", "run_tests", "{}")
FIX = ("c2", "apply_patch", json.dumps(ADD_FIX))
DONE = "I changed add() to return a + b. It subtracted. The tests pass now."
THOUGHT = [{"thinking": "The sign in add() is wrong.", "signature": "sig-e2e"}]


def reasoning_model_check(recorded: Recorded) -> Reply | None:
    """GPT-5 on chat completions: `max_tokens` gets the recorded 400; a temperature is refused too."""
    body = recorded.body if isinstance(recorded.body, dict) else {}
    if "max_tokens" in body:
        return recording("oa_400_max_tokens_unsupported").reply()
    if "temperature" in body:
        return openai_error(400, "Unsupported value: 'temperature' does not support 0.2 with this model.")
    return None


def openai_case(server: WireServer, tmp_path, monkeypatch):
    server.require(reasoning_model_check)
    server.push(openai_turn("Running.", [RUN_TESTS]), openai_turn("Fixing.", [FIX]), openai_turn(DONE))
    return "openai:gpt-5", ["--base-url", server.openai_base_url], {}


def gemini_case(server: WireServer, tmp_path, monkeypatch):
    server.require(gemini_signature_check)
    turns = [openai_turn("", [call], call_fields=gemini_signature) for call in (RUN_TESTS, FIX)]
    server.push(*turns, openai_turn(DONE))
    return "openai:gemini-3-pro", ["--base-url", server.openai_base_url], {}


def responses_case(server: WireServer, tmp_path, monkeypatch):
    server.require(responses_reasoning_check)
    server.push(
        responses_turn("", [RUN_TESTS], reasoning="enc-1"),
        responses_turn("", [FIX], reasoning="enc-2"),
        responses_turn(DONE, reasoning="enc-3"),
    )
    return "openai-responses:gpt-5.5", ["--base-url", server.openai_base_url, "--thinking", "medium"], {}


def anthropic_case(server: WireServer, tmp_path, monkeypatch):
    server.require(anthropic_adaptive_check)
    server.require(anthropic_thinking_check)
    server.push(
        anthropic_turn("", [RUN_TESTS], thinking=THOUGHT),
        anthropic_turn("", [FIX], thinking=THOUGHT, cache_read=800),
        anthropic_turn(DONE, thinking=THOUGHT, cache_read=900),
    )
    return "anthropic:claude-opus-4-7", ["--base-url", server.anthropic_base_url, "--thinking", "high"], {}


def bedrock_case(server: WireServer, tmp_path, monkeypatch):
    server.require(anthropic_thinking_check)
    server.push(
        bedrock_stream(anthropic_events("", [RUN_TESTS], thinking=THOUGHT)),
        bedrock_stream(anthropic_events("", [FIX], thinking=THOUGHT)),
        bedrock_stream(anthropic_events(DONE, thinking=THOUGHT)),
    )
    env = {
        "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
        "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        "AWS_REGION": "eu-central-1",
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    return "bedrock:eu.anthropic.claude-sonnet-4-6", ["--base-url", server.url, "--thinking", "low"], env


def vertex_case(server: WireServer, tmp_path, monkeypatch):
    google_credentials(monkeypatch, tmp_path, f"{server.url}/token")
    token = {"access_token": "ya29.e2e", "expires_in": 3600, "token_type": "Bearer"}
    server.routes["/token"] = Reply(body=json.dumps(token).encode())
    server.push(anthropic_turn("", [RUN_TESTS]), anthropic_turn("", [FIX]), anthropic_turn(DONE))
    env = {"GOOGLE_APPLICATION_CREDENTIALS": str(tmp_path / "adc.json"), "CLOUD_ML_REGION": "europe-west4"}
    return "vertex:claude-sonnet-4-6@20250929", ["--base-url", f"{server.url}/v1"], env


CASES = {
    "openai-gpt5": openai_case,
    "openai-gemini3": gemini_case,
    "openai-responses": responses_case,
    "anthropic-adaptive": anthropic_case,
    "bedrock": bedrock_case,
    "vertex": vertex_case,
}


@pytest.mark.parametrize("case", list(CASES))
def test_the_example_is_verified_through_each_protocol(harness, tmp_path, monkeypatch, case):
    content = ["--otel-content"] if case == "openai-gpt5" else []  # one run shows content, the rest counts
    with WireServer() as server, Receiver() as receiver:
        model, flags, env = CASES[case](server, tmp_path, monkeypatch)
        keys = {"OPENAI_API_KEY": KEY, "ANTHROPIC_API_KEY": KEY, **env}
        ran = harness.run(model, *flags, "--otel-endpoint", receiver.url, *content, env=keys)
        posts = [post for post in server.requests if post.path != "/token"]  # Vertex's token refresh aside
        spans = receiver.spans()
    assert ran.code == 0, ran.stdout + ran.stderr
    _check_spans(case, model, spans, bool(content))
    result = ran.json()
    assert result["outcome"] == "verified" and result["steps"] == 3
    assert len(posts) == 3, [p.path for p in posts]  # no request refused by the strict server, none retried
    if case == "bedrock":
        assert all(p.headers["authorization"].startswith("AWS4-HMAC-SHA256") for p in posts)
        assert "/eu-central-1/bedrock/" in posts[0].headers["authorization"]
    if case == "vertex":
        assert posts[-1].path.startswith("/v1/projects/proj-1/locations/europe-west4/publishers/anthropic/models/")
    if case == "anthropic-adaptive":
        assert result["tokens"]["cached"] == 1700


PROVIDER_NAMES = {
    "openai": "openai",
    "openai-responses": "openai",
    "anthropic": "anthropic",
    "bedrock": "aws.bedrock",
    "vertex": "gcp.vertex_ai",
}


def _check_spans(case: str, model: str, spans: list, content: bool) -> None:
    """The run's GenAI spans name the vendor and the model and count what the server reported; the
    key is in none of them, even with --otel-content; content only with it."""
    prefix, _, name = model.partition(":")
    chats = [s for s in spans if s["name"] == f"chat {name}"]
    assert len(chats) == 3, [s["name"] for s in spans]
    assert {s["attributes"]["gen_ai.provider.name"] for s in chats} == {PROVIDER_NAMES[prefix]}
    assert {s["attributes"]["gen_ai.request.model"] for s in chats} == {name}
    assert [s["attributes"]["gen_ai.response.finish_reasons"] for s in chats][-1] == ["end_turn"]
    assert all(s["attributes"]["gen_ai.usage.output_tokens"] > 0 for s in chats)
    if case == "anthropic-adaptive":
        cached = [s["attributes"]["gen_ai.usage.cache_read.input_tokens"] for s in chats]
        assert cached == [0, 800, 900]
    shown = json.dumps([s["attributes"] for s in spans])
    assert KEY not in shown and KEY[:12] not in shown, "a key is never in a span"
    assert (DONE in shown) is content and ("return a + b" in shown) is content
