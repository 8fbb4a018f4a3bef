"""Anthropic models of today and the clouds that serve them, against recorded answers replayed into the
real SDK clients (fakes, named as such, where no recording exists): adaptive thinking, rolling cache
breakpoints, Bedrock (SigV4, InvokeModel, the AWS event-stream framing) and Vertex AI (application
default credentials, streamRawPredict)."""

from __future__ import annotations

import json

import pytest

from harness.errors import ModelAuthError
from harness.providers.anthropic import thinking_mode
from harness.providers.config import ProviderConfig, RetryConfig
from harness.providers.factory import make_provider
from harness.types import Message, ToolCall
from tests.providers.conftest import KEY, PROMPT, TOOL
from tests.providers.recordings import recording
from tests.providers.wire_server import (
    Reply,
    anthropic_events,
    anthropic_thinking_check,
    anthropic_turn,
    bedrock_stream,
)

pytestmark = pytest.mark.timeout(60)
NO_RETRY = RetryConfig(max_retries_per_call=0)


@pytest.mark.parametrize(
    ("model", "mode"),
    [
        ("claude-opus-4-6", "adaptive"),
        ("claude-sonnet-4-6", "adaptive"),
        ("claude-opus-4-7", "adaptive"),
        ("anthropic.claude-sonnet-4-6", "adaptive"),  # a Bedrock id
        ("claude-opus-4-6@20260101", "adaptive"),  # a Vertex id
        ("claude-mythos-preview", "adaptive"),
        ("claude-sonnet-4-5", "budget"),
        ("claude-3-7-sonnet-20250219", "budget"),
        ("claude-sonnet-4-20250514", "budget"),
        ("eu.anthropic.claude-haiku-4-5-20251001-v1:0", "budget"),
    ],
)
def test_the_thinking_form_by_model(model, mode):
    assert thinking_mode(model, ProviderConfig()) == mode
    forced = "budget" if mode == "adaptive" else "adaptive"
    assert thinking_mode(model, ProviderConfig(thinking_mode=forced)) == forced  # the table is overridable


def test_adaptive_thinking_request_and_the_recorded_answer(wire):
    case = recording("an_stream_adaptive_thinking_opus46")
    wire.require(anthropic_thinking_check)
    wire.push(case.reply())
    settings = ProviderConfig(base_url=wire.anthropic_base_url, retry=NO_RETRY, reasoning_effort="high")
    turn = make_provider("anthropic:claude-opus-4-6", settings, api_key=KEY).complete(PROMPT, [TOOL], max_tokens=4096)
    body = wire.requests[0].body
    assert body["thinking"] == case.request["thinking"] == {"type": "adaptive"}
    assert body["output_config"] == {"effort": "high"} and "budget_tokens" not in json.dumps(body)
    assert body["max_tokens"] > 4096 and "anthropic-beta" not in wire.requests[0].headers  # interleaves by itself
    assert turn.reasoning is not None and turn.reasoning.blocks[0]["type"] == "thinking"
    assert turn.reasoning.blocks[0]["signature"] and turn.text and turn.stop_reason == "end_turn"
    assert turn.usage.output_tokens == 44 and turn.usage.reasoning_tokens == 0  # the recording breaks none down


def test_thinking_tokens_are_read_as_reasoning_tokens(wire):
    """The same recorded stream with the break-down today's API adds to the final usage
    (`output_tokens_details.thinking_tokens`, part of `output_tokens`): an edit of the recording, not a capture."""
    case = recording("an_stream_adaptive_thinking_opus46")
    closing = b'"output_tokens":44}'
    assert case.body.count(closing) == 1
    body = case.body.replace(closing, b'"output_tokens":44,"output_tokens_details":{"thinking_tokens":29}}')
    wire.push(Reply(status=200, headers=case.reply().headers, body=body))
    settings = ProviderConfig(base_url=wire.anthropic_base_url, retry=NO_RETRY, reasoning_effort="high")
    turn = make_provider("anthropic:claude-opus-4-6", settings, api_key=KEY).complete(PROMPT, [TOOL], max_tokens=4096)
    assert turn.usage.output_tokens == 44 and turn.usage.reasoning_tokens == 29


def test_rolling_breakpoints_and_the_recorded_cache_read(wire):
    """The recorded third turn of a conversation: its end carries a breakpoint, the prefix the previous
    request wrote is read back (cache_read 4597), and no request has more than four markers."""
    case = recording("an_json_cache_rolling_breakpoint")
    wire.push(case.reply())
    recorded = case.request["messages"]
    history = [Message(role="system", content="Be a bot.")]
    for message in recorded:
        content = message["content"]
        text = content if isinstance(content, str) else "".join(block["text"] for block in content)
        history.append(Message(role=message["role"], content=text))
    settings = ProviderConfig(base_url=wire.anthropic_base_url, retry=NO_RETRY)
    turn = make_provider("anthropic:claude-sonnet-4-0", settings, api_key=KEY).complete(history, [], max_tokens=1000)
    assert turn.usage.cached_input_tokens == 4597 and turn.usage.cache_write_tokens == 598
    sent = wire.requests[0].body["messages"]
    assert sent[-1]["content"][-1]["cache_control"] == recorded[-1]["content"][-1]["cache_control"]
    marked = [n for n, m in enumerate(sent) if any("cache_control" in b for b in m["content"])]
    assert marked == [0, 2, 4] and len(marked) <= 4


def test_a_long_run_reads_its_history_from_where_the_last_request_wrote_it():
    from harness.providers.anthropic import to_anthropic_messages

    history = [*PROMPT]
    previous_end = None
    for n in range(6):
        history += [
            Message(role="assistant", content="", tool_calls=[ToolCall(id=f"t{n}", name="read_file")]),
            Message(role="tool", tool_call_id=f"t{n}", name="read_file", content=f"result {n}"),
        ]
        _, wire = to_anthropic_messages(history)
        markers = json.dumps(wire).count("cache_control")
        assert markers <= 3
        if previous_end is not None:  # the block the last request marked as its end is marked again
            assert wire[previous_end]["content"][-1].get("cache_control") == {"type": "ephemeral"}
        previous_end = len(wire) - 1


def aws_env(monkeypatch, tmp_path):
    """Fake AWS credentials in the usual variables; no profile file, no instance metadata."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
        "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY",
        "AWS_CONFIG_FILE": str(tmp_path / "no-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-credentials"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_BEARER_TOKEN_BEDROCK", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)


def test_bedrock_signs_with_sigv4_and_reads_the_recorded_invoke_answer(wire, monkeypatch, tmp_path):
    aws_env(monkeypatch, tmp_path)
    case = recording("an_bedrock_invoke_cache_read")
    wire.push(case.reply())
    settings = ProviderConfig(base_url=wire.url, retry=NO_RETRY, region="eu-central-1")
    model = "eu.anthropic.claude-haiku-4-5-20251001-v1:0"
    provider = make_provider(f"bedrock:{model}", settings, api_key=None)
    assert provider.name == f"bedrock:{model}"
    turn = provider.complete(PROMPT, [], max_tokens=4096)
    assert turn.usage.cached_input_tokens == 9511 and turn.text
    assert turn.cost_known and turn.cost_usd > 0  # priced from the AWS table
    sent = wire.requests[0]
    assert sent.path == f"/model/{model}/invoke-with-response-stream"
    assert sent.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/eu-central-1/bedrock/aws4_request" in sent.headers["authorization"]
    assert sent.body["anthropic_version"] and "model" not in sent.body  # the SDK's Bedrock version, in the body
    assert sent.body["messages"][0]["content"][-1]["cache_control"]["type"] == "ephemeral"


def test_bedrock_streams_in_aws_event_stream_frames_with_thinking(wire, monkeypatch, tmp_path):
    aws_env(monkeypatch, tmp_path)
    thinking = [{"thinking": "Look at add().", "signature": "sig-bedrock"}]
    frames = anthropic_events(
        "Reading.", [("toolu_1", "read_file", '{"path": "calc.py"}')], thinking=thinking, pieces=3
    )
    wire.push(bedrock_stream(frames))
    settings = ProviderConfig(base_url=wire.url, retry=NO_RETRY, region="us-east-1", reasoning_effort="low")
    turn = make_provider("bedrock:anthropic.claude-sonnet-4-6", settings, api_key=None).complete(
        PROMPT, [TOOL], max_tokens=500
    )
    assert turn.text == "Reading." and [(c.name, c.arguments) for c in turn.tool_calls] == [
        ("read_file", {"path": "calc.py"})
    ]
    assert turn.reasoning is not None and turn.reasoning.blocks[0]["signature"] == "sig-bedrock"
    assert wire.requests[0].body["thinking"] == {"type": "adaptive"}


def test_bedrock_without_credentials_is_an_auth_error_saying_where_they_come_from(wire, monkeypatch, tmp_path):
    aws_env(monkeypatch, tmp_path)
    monkeypatch.delenv("AWS_ACCESS_KEY_ID")
    monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    # a region no other test uses: the SDK keeps one AWS session (with its credentials) per region
    settings = ProviderConfig(base_url=wire.url, retry=NO_RETRY, region="ap-southeast-7")
    with pytest.raises(ModelAuthError, match=r"bedrock credentials: .*AWS_ACCESS_KEY_ID"):
        make_provider("bedrock:anthropic.claude-sonnet-4-6", settings, api_key=None).complete(PROMPT, [], max_tokens=10)
    assert not wire.requests


def google_credentials(monkeypatch, tmp_path, token_url: str) -> None:
    """Application default credentials of the service-account kind (a key made here), whose token is
    fetched from the wire server (a service account names its token URI)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    info = {
        "type": "service_account",
        "project_id": "proj-1",
        "private_key_id": "key-1",
        "private_key": pem.decode(),
        "client_email": "harness-test@proj-1.iam.gserviceaccount.com",
        "client_id": "1234567890",
        "token_uri": token_url,
    }
    path = tmp_path / "adc.json"
    path.write_text(json.dumps(info))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(path))


def test_vertex_refreshes_its_token_and_streams_from_the_model_path(wire, monkeypatch, tmp_path):
    """Vertex AI (a fake: no recording exists): the credentials' token is fetched once, then the
    Messages stream comes from the publisher model's streamRawPredict."""
    google_credentials(monkeypatch, tmp_path, f"{wire.url}/token")
    token = Reply(
        body=json.dumps({"access_token": "ya29.test-token", "expires_in": 3600, "token_type": "Bearer"}).encode()
    )
    wire.push(token, anthropic_turn("Hello from Vertex.", cache_read=50, input_tokens=10))
    # no project given: the credentials' own
    settings = ProviderConfig(base_url=f"{wire.url}/v1", retry=NO_RETRY, region="europe-west1")
    turn = make_provider("vertex:claude-sonnet-4-6@20250929", settings, api_key=None).complete(
        PROMPT, [TOOL], max_tokens=100
    )
    assert turn.text == "Hello from Vertex." and turn.usage.cached_input_tokens == 50
    refresh, call = wire.requests
    assert (
        refresh.path == "/token" and b"grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Ajwt-bearer" in refresh.body
    )
    assert (
        call.path
        == "/v1/projects/proj-1/locations/europe-west1/publishers/anthropic/models/claude-sonnet-4-6@20250929:streamRawPredict"
    )
    assert call.headers["authorization"] == "Bearer ya29.test-token"
    assert call.body["anthropic_version"] and "model" not in call.body  # the SDK's Vertex version, in the body


def test_vertex_with_a_token_server_that_refuses_is_an_auth_error(wire, monkeypatch, tmp_path):
    google_credentials(monkeypatch, tmp_path, f"{wire.url}/token")
    wire.push(Reply(status=400, body=b'{"error": "invalid_grant", "error_description": "Token has been revoked."}'))
    settings = ProviderConfig(base_url=f"{wire.url}/v1", retry=NO_RETRY, region="us-east5", project="proj-1")
    with pytest.raises(ModelAuthError, match=r"vertex credentials: .*invalid_grant"):
        make_provider("vertex:claude-sonnet-4-6", settings, api_key=None).complete(PROMPT, [], max_tokens=10)
    assert [r.path for r in wire.requests] == ["/token"]
