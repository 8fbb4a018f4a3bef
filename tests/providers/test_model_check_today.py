"""`harness models check` on every protocol and on the endpoints users meet: what the endpoint really
does (parallel tools, reasoning, prompt cache), local servers recognised with the context they keep,
and the errors that used to be retried or shown wrong (each one line, its exit code, never retried)."""

from __future__ import annotations

import json

import pytest

from tests.providers.conftest import KEY
from tests.providers.test_anthropic_today import aws_env
from tests.providers.test_model_cli import run
from tests.providers.wire_server import (
    Reply,
    anthropic_events,
    bedrock_stream,
    openai_error,
    openai_turn,
    responses_turn,
)

pytestmark = pytest.mark.timeout(120)
PINGS = [("c1", "ping", '{"text": "pong"}'), ("c2", "ping", '{"text": "pang"}')]


def check(wire, *args: str, env: dict[str, str] | None = None):
    return run("models", "check", "--timeout", "5", *args, env={"OPENAI_API_KEY": KEY, **(env or {})})


def test_responses_endpoint_parallel_tools_reasoning_and_cache(wire):
    usage = {"input_tokens": 1500, "output_tokens": 30, "input_tokens_details": {"cached_tokens": 1280}}
    wire.push(responses_turn("", PINGS, reasoning="enc-1"), responses_turn("", PINGS, reasoning="enc-2", usage=usage))
    done = check(wire, "-m", "openai-responses:gpt-5.5", "--base-url", wire.openai_base_url, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["streams"] and report["calls_tools"] and report["parallel_tools"] and report["reasoning"]
    assert report["caches"] is True and report["cached_tokens"] == 1280
    first, second = wire.requests
    assert first.path == "/v1/responses" and first.body == second.body  # identical: what a cache can serve


def test_a_chat_endpoint_without_cache_or_reasoning_says_so(wire):
    wire.push(openai_turn("", PINGS[:1]))  # the second request finds nothing scripted: unknown
    done = check(wire, "-m", "openai:gpt-4.1", "--base-url", wire.openai_base_url)
    assert done.returncode == 0, done.stderr
    assert "parallel tools: no" in done.stdout and "reasoning:      no" in done.stdout
    assert "prompt cache:   unknown" in done.stdout


def test_ollama_is_recognised_and_its_short_context_named_with_the_fix(wire):
    wire.routes["/api/version"] = Reply(body=b'{"version": "0.12.3"}')
    wire.routes["/api/show"] = Reply(body=json.dumps({"parameters": 'stop "<|end|>"', "details": {}}).encode())
    wire.push(openai_turn("", PINGS), openai_turn("", PINGS))
    done = check(wire, "-m", "openai:qwen2.5-coder", "--base-url", wire.openai_base_url)
    assert done.returncode == 0, done.stderr
    assert "server:         ollama 0.12.3, keeps 4096 tokens" in done.stdout
    assert "warning:" in done.stderr and "OLLAMA_CONTEXT_LENGTH=100000" in done.stderr
    shown = [r for r in wire.requests if r.path == "/api/show"]
    assert shown and shown[0].body == {"model": "qwen2.5-coder"}


def test_ollama_with_a_long_enough_num_ctx_gives_no_warning(wire):
    wire.routes["/api/version"] = Reply(body=b'{"version": "0.12.3"}')
    wire.routes["/api/show"] = Reply(body=json.dumps({"parameters": "num_ctx                        131072"}).encode())
    wire.push(openai_turn("", PINGS), openai_turn("", PINGS))
    done = check(wire, "-m", "openai:qwen2.5-coder", "--base-url", wire.openai_base_url, "--json")
    report = json.loads(done.stdout)
    assert report["server"]["kind"] == "ollama" and report["server"]["context_tokens"] == 131072
    assert report["server"]["warning"] == "" and "warning" not in done.stderr


def test_llama_cpp_is_recognised_by_its_props(wire):
    """llama.cpp's server (a fake of its /props page)."""
    props = {"default_generation_settings": {"n_ctx": 8192}, "build_info": "b6500-abc", "chat_template": "..."}
    wire.routes["/props"] = Reply(body=json.dumps(props).encode())
    wire.push(openai_turn("", PINGS), openai_turn("", PINGS))
    done = check(wire, "-m", "openai:local", "--base-url", wire.openai_base_url, "--json")
    server = json.loads(done.stdout)["server"]
    assert server["kind"] == "llama.cpp" and server["context_tokens"] == 8192 and "-c 100000" in server["warning"]


def test_llama_cpp_without_jinja_fails_at_once_with_the_fix(wire):
    body = {"error": {"code": 500, "message": "tools param requires --jinja flag", "type": "server_error"}}
    wire.push(*[Reply(status=500, body=json.dumps(body).encode())] * 4)
    done = check(wire, "-m", "openai:local", "--base-url", wire.openai_base_url)
    assert done.returncode == 78, done.stderr
    assert "start it with --jinja" in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert len(wire.requests) == 1  # never retried as if it were an outage


def test_a_login_page_behind_a_proxy_is_said_not_retried(wire):
    page = b"<html><head><title>Sign in to the proxy</title></head><body>login</body></html>"
    wire.push(*[Reply(body=page, headers={"content-type": "text/html; charset=utf-8"})] * 4)
    done = check(wire, "-m", "openai:gpt-4.1", "--base-url", wire.openai_base_url)
    assert done.returncode == 69 and "answered 200 with text/html" in done.stderr and "Sign in" in done.stderr
    assert len(wire.requests) == 1


def test_a_base_url_without_a_scheme_is_a_config_error_at_once(wire):
    done = check(wire, "-m", "openai:gpt-4.1", "--base-url", wire.openai_base_url.removeprefix("http://"))
    assert done.returncode == 78 and "did you mean http://127.0.0.1:" in done.stderr
    assert not wire.requests


def test_a_base_url_missing_v1_names_the_path_and_the_likely_one(wire):
    wire.push(*[Reply(status=404, body=b"404 page not found", headers={"content-type": "text/plain"})] * 4)
    done = check(wire, "-m", "openai:gpt-4.1", "--base-url", wire.url)
    assert done.returncode == 69, done.stderr
    assert f"asked POST {wire.url}/chat/completions" in done.stderr
    assert f"try --base-url {wire.url}/v1" in done.stderr and len(wire.requests) == 1


def test_server_text_with_markup_brackets_is_printed_as_it_is(wire):
    message = "Model not served here; see [/docs/models] and [bold]the list[/bold] ([redacted])"
    wire.push(openai_error(400, message))
    done = check(wire, "-m", "openai:gpt-4.1", "--base-url", wire.openai_base_url)
    assert done.returncode == 69, done.stderr
    assert "[/docs/models]" in done.stderr and "[bold]the list[/bold]" in done.stderr and "([redacted])" in done.stderr


def test_bedrock_check_streams_event_frames(wire, monkeypatch, tmp_path):
    aws_env(monkeypatch, tmp_path)
    for _ in range(2):
        wire.push(bedrock_stream(anthropic_events("", [("toolu_1", "ping", '{"text": "pong"}')], cache_read=900)))
    done = check(
        wire, "-m", "bedrock:anthropic.claude-sonnet-4-6", "--base-url", wire.url, "--region", "us-west-2", "--json"
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["streams"] and report["calls_tools"] and report["caches"] is True
    assert wire.requests[0].path == "/model/anthropic.claude-sonnet-4-6/invoke-with-response-stream"


def test_a_run_against_a_short_context_ollama_is_warned_before_it_starts(wire):
    from harness.assembly import Runtime, endpoint_warnings
    from harness.config import RunConfig

    wire.routes["/api/version"] = Reply(body=b'{"version": "0.12.3"}')
    wire.routes["/api/show"] = Reply(body=b'{"parameters": "num_ctx 8192"}')
    config = RunConfig(model="openai:qwen2.5-coder", base_url=wire.openai_base_url)
    [warning] = endpoint_warnings(config, Runtime(run_id="t"))
    assert "ollama keeps 8192 tokens (the model's num_ctx parameter) but harness budgets 100000" in warning
    assert [p.path for p in wire.requests] == ["/api/show"]  # asked about the model, never a model call
    roomy = config.model_copy(update={"context": config.context.model_copy(update={"budget_tokens": 8000})})
    assert endpoint_warnings(roomy, Runtime(run_id="t")) == []
    assert (
        endpoint_warnings(config.model_copy(update={"model": "anthropic:claude-sonnet-4-6"}), Runtime(run_id="t")) == []
    )


@pytest.mark.parametrize(
    ("url", "probed"),
    [
        ("http://127.0.0.1:11434/v1", True),
        ("http://localhost:8080/v1", True),
        ("http://gpu-box:8000/v1", True),
        ("http://llm.lab.example:8000/v1", True),
        ("https://openrouter.example/api/v1", False),
        ("https://api.openai.com/v1", False),
    ],
)
def test_only_addresses_that_may_be_local_servers_are_probed(url, probed):
    from harness.providers.local import may_be_local

    assert may_be_local(url) is probed


def test_an_ollama_model_without_tool_calls_fails_at_once_with_the_fix(wire):
    wire.push(openai_error(400, "registry.ollama.ai/library/gemma:2b does not support tools"))
    done = check(wire, "-m", "openai:gemma:2b", "--base-url", wire.openai_base_url)
    assert done.returncode == 78 and "pick a model that has them" in done.stderr and len(wire.requests) == 1
