"""`harness models check` and `harness bench provider` through the real CLI entry point."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli import typer_app
from tests.cli_process import run_cli
from tests.providers.conftest import KEY
from tests.providers.wire_server import anthropic_error, anthropic_turn, openai_error, openai_turn

pytestmark = pytest.mark.timeout(120)
HARNESS = str(Path(sys.executable).parent / "harness")


class Done:
    """Outcome of one CLI run (in-process or a real process)."""

    def __init__(self, returncode: int, stdout: str, stderr: str) -> None:
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


def run(*args: str, env: dict[str, str] | None = None) -> Done:
    """The CLI in-process (typer's runner; the process start costs seconds on a loaded machine)."""
    cleared: dict[str, str | None] = {k: None for k in os.environ if k.endswith(("_API_KEY", "_BASE_URL"))}
    result = CliRunner().invoke(typer_app(), list(args), env={**cleared, **(env or {})})
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return Done(result.exit_code, result.stdout, result.stderr)


def run_process(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The real console script, for the exit-code path through main()."""
    clean = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_BASE_URL"))}
    return run_cli(args, timeout=90, env={**clean, **(env or {})}, console=True)


def test_check_reports_streaming_tools_and_usage(wire):
    wire.push(openai_turn("", [("call_1", "ping", '{"text": "pong"}')]))
    done = run(
        "models",
        "check",
        "--model",
        "openai:qwen2.5-coder",
        "--base-url",
        wire.openai_base_url,
        "--json",
        env={"OPENAI_API_KEY": KEY},
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["streams"] and report["calls_tools"] and report["reports_usage"]
    assert report["input_tokens"] == 10 and report["model"] == "openai:qwen2.5-coder"
    sent = wire.requests[0].body
    assert sent["model"] == "qwen2.5-coder" and [t["function"]["name"] for t in sent["tools"]] == ["ping"]
    assert KEY not in done.stdout + done.stderr


def test_check_anthropic_human_output_reads_base_url_from_env(wire):
    wire.push(anthropic_turn("I cannot call tools."))
    done = run(
        "models",
        "check",
        "-m",
        "anthropic:claude-sonnet-4-6",
        env={"ANTHROPIC_API_KEY": KEY, "ANTHROPIC_BASE_URL": wire.anthropic_base_url},
    )
    assert done.returncode == 0, done.stderr
    assert "streams:        yes" in done.stdout and "calls tools:    no" in done.stdout


def test_check_401_exits_77_without_the_key(wire):
    wire.push(openai_error(401, f"Incorrect API key provided: {KEY}", code="invalid_api_key"))
    done = run_process("models", "check", "--base-url", wire.openai_base_url, env={"OPENAI_API_KEY": KEY})
    assert done.returncode == 77
    assert len(done.stderr.strip().splitlines()) == 1 and "401" in done.stderr
    assert KEY not in done.stdout + done.stderr and len(wire.requests) == 1


def test_check_connection_refused_exits_69_at_once():
    """A loopback port where nothing listens: said at once, by its address, not after retries (the
    default timeout of a local endpoint is many minutes; this one takes no backoff at all)."""
    done = run("models", "check", "--base-url", "http://127.0.0.1:9/v1")
    assert done.returncode == 69
    assert "nothing listens on 127.0.0.1:9 (the model server of http://127.0.0.1:9/v1/" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "attempts" not in done.stderr  # never retried


def test_check_without_key_for_vendor_endpoint_exits_77():
    done = run("models", "check", "-m", "anthropic:claude-sonnet-4-6")
    assert done.returncode == 77 and "ANTHROPIC_API_KEY" in done.stderr


def test_check_reads_the_key_from_the_variable_the_user_config_names(wire, tmp_path):
    """`api_key_env` of a provider entry is the key's variable for `models check` too, as for a run."""
    (tmp_path / "harness").mkdir()
    (tmp_path / "harness" / "config.toml").write_text('[providers.anthropic]\napi_key_env = "TEAM_CLAUDE_KEY"\n')
    config_home = {"XDG_CONFIG_HOME": str(tmp_path)}
    missing = run("models", "check", "-m", "anthropic:claude-sonnet-4-6", env=config_home)
    assert missing.returncode == 77 and "TEAM_CLAUDE_KEY" in missing.stderr, missing.stderr
    wire.push(anthropic_turn(text="hi"), anthropic_turn(text="hi"))
    env = {**config_home, "TEAM_CLAUDE_KEY": KEY, "ANTHROPIC_BASE_URL": wire.anthropic_base_url}
    run("models", "check", "-m", "anthropic:claude-sonnet-4-6", env=env)
    sent = [
        (r.headers.get("x-api-key"), r.headers.get("authorization", "").removeprefix("Bearer ")) for r in wire.requests
    ]
    assert sent and all(KEY in keys for keys in sent)


def test_check_goes_through_the_one_retry_policy_and_says_so(wire):
    wire.push(
        openai_error(429, "slow down", code="rate_limit_exceeded", headers={"retry-after": "1"}),
        openai_turn("", [("c1", "ping", '{"text": "pong"}')]),
        openai_turn("", [("c1", "ping", '{"text": "pong"}')]),
    )
    done = run("models", "check", "--base-url", wire.openai_base_url, env={"OPENAI_API_KEY": KEY})
    assert done.returncode == 0, done.stderr
    # the 429, its retry, then the second (cache) request
    assert "retried:        1 time(s)" in done.stdout and "429" in done.stdout and len(wire.requests) == 3
    wire.push(openai_turn("pong"), openai_turn("pong"))
    again = run("models", "check", "--base-url", wire.openai_base_url, "--json", env={"OPENAI_API_KEY": KEY})
    report = json.loads(again.stdout)
    assert report["retries"] == 0 and report["retry_reasons"] == []


def test_check_gives_up_after_its_short_retry_budget(wire):
    wire.push(*[anthropic_error(529, "overloaded_error", "Overloaded") for _ in range(4)])
    done = run(
        "models",
        "check",
        "-m",
        "anthropic:claude-sonnet-4-6",
        "--base-url",
        wire.anthropic_base_url,
        env={"ANTHROPIC_API_KEY": KEY},
    )
    assert done.returncode == 69 and "overloaded" in done.stderr.lower() and len(wire.requests) == 4


def test_bench_provider_json():
    done = run("bench", "provider", "--json", "--repeats", "3", "--chunks", "40")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [r["provider"] for r in rows] == ["openai", "anthropic"]
    assert all(r["chunks"] == 40 and r["complete_ms"] > 0 and r["sdk_only_ms"] > 0 for r in rows)
