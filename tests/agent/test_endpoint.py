"""Where `harness run` sends model requests: --base-url > config file > $OPENAI_BASE_URL /
$ANTHROPIC_BASE_URL > vendor default; the key from the environment never lands in a session file."""

from __future__ import annotations

import json
import os

import pytest

from harness import assembly
from harness.cli import environment
from harness.config import RunConfig
from harness.providers.config import ProviderConfig
from tests.providers.wire_server import WireServer, openai_turn

KEY = "sk-env-only-9f8e7d6c5b4a3210"


def settings(config: RunConfig) -> ProviderConfig:
    """The endpoint as `harness run` resolves it: the CLI reads the fallback, the assembly applies it."""
    return assembly.provider_settings(config, environment.base_url_fallback(config.model))


@pytest.mark.parametrize("prefix, variable", [("openai", "OPENAI_BASE_URL"), ("anthropic", "ANTHROPIC_BASE_URL")])
def test_precedence_flag_then_file_then_env(monkeypatch, prefix, variable):
    monkeypatch.setenv(variable, "http://env.example/v1")
    model = f"{prefix}:m"
    assert settings(RunConfig(model=model)).base_url == "http://env.example/v1"
    from_file = RunConfig(model=model, providers={prefix: ProviderConfig(base_url="http://file.example/v1")})
    assert settings(from_file).base_url == "http://file.example/v1"
    flag = from_file.model_copy(update={"base_url": "http://flag.example/v1"})
    assert settings(flag).base_url == "http://flag.example/v1"
    monkeypatch.delenv(variable)
    assert settings(RunConfig(model=model)).base_url is None  # the SDK's vendor default


def test_other_vendors_variable_is_ignored(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://anthropic.example")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    assert settings(RunConfig(model="openai:m")).base_url is None


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_run_reaches_the_server_named_by_the_environment_only(harness, tmp_path):
    env = {k: v for k, v in harness.env.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    (tmp_path / "xdg").mkdir()
    with WireServer() as server:
        server.push(
            openai_turn("Looking.", [("c1", "read_file", json.dumps({"path": "calc/ops.py"}))]),
            openai_turn("Nothing to change."),
        )
        harness.env = {
            **env,
            "XDG_CONFIG_HOME": str(tmp_path / "xdg"),
            "OPENAI_BASE_URL": server.openai_base_url,
            "OPENAI_API_KEY": KEY,
        }
        ran = harness.run("openai:test-model", session="envurl", verify=None)
    assert ran.code == 10, ran.stdout + ran.stderr
    assert ran.json()["outcome"] == "unverified" and ran.json()["steps"] == 2
    assert len(server.requests) == 2 and server.requests[0].body["model"] == "test-model"
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    leaks = [path for path in harness.state_dir.rglob("*") if path.is_file() and KEY.encode() in path.read_bytes()]
    assert leaks == []
    assert any(path.name == "trajectory.jsonl" for path in harness.state_dir.rglob("*")), os.listdir(harness.state_dir)


def test_a_vendor_endpoint_without_a_key_is_refused_before_anything_starts(harness, tmp_path):
    env = {k: v for k, v in harness.env.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
    harness.env = {**env, "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    for model, variable in (("openai:gpt-4.1", "OPENAI_API_KEY"), ("anthropic:claude-sonnet-4-6", "ANTHROPIC_API_KEY")):
        ran = harness.run(model, session="nokey", verify=None)
        assert ran.code == 77, ran.stdout + ran.stderr
        assert variable in ran.stderr and len(ran.stderr.strip().splitlines()) == 1
        assert not harness.state_dir.exists() or not any(harness.state_dir.iterdir()), "no session was made"
