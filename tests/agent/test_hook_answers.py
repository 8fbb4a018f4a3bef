"""The hook runner alone, with real programs: every way a hook can answer or fail, and what each event
makes of it (gating events fail closed, observers fail open), without a run around it."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest

from harness.agent.hooks import Hooks
from harness.config import HookEntry, HooksConfig

PAYLOAD = {"tool_name": "run_command", "tool_input": {"command": "ls"}, "tool_use_id": "c1"}


def hooks(tmp_path: Path, **events: list[HookEntry]) -> Hooks:
    return Hooks(HooksConfig(**events), session_id="s1", workspace=tmp_path, transcript=tmp_path / "t.jsonl")


def pre(tmp_path: Path, command: str, timeout: float = 5, matcher: str = "") -> Hooks:
    return hooks(tmp_path, PreToolUse=[HookEntry(command=command, timeout=timeout, matcher=matcher)])


def answer(payload: dict) -> str:
    return f"{sys.executable} -c 'print({json.dumps(json.dumps(payload))})'"


@pytest.mark.parametrize(
    ("command", "reason"),
    [
        ("exit 1", "it exited 1"),
        ("no-such-hook-program", "(no such command)"),
        ("echo '<html>not json'", "not a JSON object"),
        ("echo '[1, 2]'", "not a JSON object"),
        (answer({"hookSpecificOutput": {"permissionDecision": "maybe"}}), "unknown decision 'maybe'"),
        (answer({"hookSpecificOutput": {"updatedInput": "rm -rf /"}}), "updatedInput is not a JSON object"),
    ],
)
def test_a_gating_hook_that_fails_blocks(tmp_path, command, reason):
    outcome = pre(tmp_path, command).run("PreToolUse", PAYLOAD, step=3)
    assert outcome.blocked and reason in outcome.reason and "fail closed" in outcome.reason
    [record] = outcome.records
    assert (
        record.verdict == "block" and record.step == 3 and record.call_id == "c1" and record.tool_name == "run_command"
    )


def test_answers_in_claude_codes_shape(tmp_path):
    deny = answer({"hookSpecificOutput": {"permissionDecision": "deny", "permissionDecisionReason": "no ls"}})
    assert pre(tmp_path, deny).run("PreToolUse", PAYLOAD).reason == "no ls"
    ask = pre(tmp_path, answer({"hookSpecificOutput": {"permissionDecision": "ask"}})).run("PreToolUse", PAYLOAD)
    assert ask.blocked and "approval" in ask.reason  # nobody a hook's question could go to
    legacy = pre(tmp_path, answer({"decision": "block", "reason": "old style"})).run("PreToolUse", PAYLOAD)
    assert legacy.blocked and legacy.reason == "old style"
    halt = pre(tmp_path, answer({"continue": False, "stopReason": "enough"})).run("PreToolUse", PAYLOAD)
    assert halt.blocked and halt.reason == "enough"
    two = hooks(
        tmp_path,
        PreToolUse=[
            HookEntry(command=answer({"hookSpecificOutput": {"updatedInput": {"command": "ls -la"}}})),
            HookEntry(
                command=f"{sys.executable} -c 'import json,sys; d=json.load(sys.stdin); print(json.dumps("
                '{"hookSpecificOutput": {"additionalContext": d["tool_input"]["command"]}}))\''
            ),
        ],
    ).run("PreToolUse", PAYLOAD)
    assert not two.blocked and two.updated_input == {"command": "ls -la"} and two.context == ["ls -la"]  # in order
    silent = pre(tmp_path, "cat > /dev/null").run("PreToolUse", PAYLOAD)
    assert not silent.blocked and silent.records[0].verdict == "allow"


def test_matchers_take_harness_and_claude_code_tool_names(tmp_path):
    for matcher, runs in (("run_command", True), ("Bash", True), ("run_.*", True), ("Read|Write", False), ("*", True)):
        assert bool(pre(tmp_path, "true", matcher=matcher).wanted("PreToolUse", "run_command")) is runs, matcher
    with pytest.raises(ValueError, match="no regular expression"):
        HookEntry(command="true", matcher="(")


def test_observers_fail_open_and_exit_2_is_feedback(tmp_path):
    failing = hooks(tmp_path, PostToolUse=[HookEntry(command="exit 3")]).run("PostToolUse", PAYLOAD)
    assert not failing.blocked and failing.records[0].verdict == "failed"
    feedback = hooks(tmp_path, PostToolUse=[HookEntry(command="echo lint failed >&2; exit 2")]).run(
        "PostToolUse", PAYLOAD
    )
    assert not feedback.blocked and feedback.context == ["lint failed"]
    start = hooks(tmp_path, SessionStart=[HookEntry(command="echo the branch is main")]).run("SessionStart", {})
    assert start.context == ["the branch is main"] and start.records[0].verdict == "ok"


def test_a_hook_past_its_timeout_is_stopped_with_everything_it_started(tmp_path):
    marker = tmp_path / "survived"
    command = f"(sleep 2; touch {marker}) & sleep 30"
    started = time.monotonic()
    outcome = pre(tmp_path, command, timeout=0.5).run("PreToolUse", PAYLOAD)
    assert outcome.blocked and "did not finish in 0.5s" in outcome.reason and time.monotonic() - started < 10
    time.sleep(2.5)
    assert not marker.exists(), "a child of the hook outlived its timeout"


def test_a_hook_sees_the_event_and_a_whitelisted_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host-secret")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "host-secret")
    seen = tmp_path / "seen.json"
    dump = f'{sys.executable} -c \'import json,os,sys; json.dump({{"in": json.load(sys.stdin), "env": dict(os.environ), "cwd": os.getcwd()}}, open("{seen}", "w"))\''
    hooks(tmp_path, Stop=[HookEntry(command=dump)]).run("Stop", {"stop_hook_active": False}, step=2)
    got = json.loads(seen.read_text())
    assert got["in"]["hook_event_name"] == "Stop" and got["in"]["session_id"] == "s1" and got["in"]["step"] == 2
    assert got["in"]["cwd"] == str(tmp_path) == got["cwd"] and got["in"]["transcript_path"].endswith("t.jsonl")
    assert "sk-host-secret" not in json.dumps(got["env"]) and "host-secret" not in json.dumps(got["env"])
    assert set(got["env"]) <= {"PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ", "PWD", "SHLVL", "_",
                               "HARNESS_SESSION_ID", "HARNESS_HOOK_EVENT", "CLAUDE_PROJECT_DIR"}  # fmt: skip
    assert os.environ["OPENAI_API_KEY"] == "sk-host-secret"


def test_a_repositorys_hooks_file_is_read_as_hostile_input(tmp_path):
    from harness.agent.hooks import repository_hooks
    from harness.errors import ConfigError

    assert repository_hooks(tmp_path) == HooksConfig()  # none declared
    folder = tmp_path / ".harness"
    folder.mkdir()
    (folder / "hooks.toml").write_text('[[hooks.Stop]]\ncommand = "make lint"\n')
    assert repository_hooks(tmp_path).Stop[0].command == "make lint"
    (folder / "hooks.toml").write_text('[[hooks.Stop]]\ncommand = "x"\n[providers.openai]\nbase_url = "http://a"\n')
    with pytest.raises(ConfigError, match=r"only \[\[hooks.EVENT\]\]"):
        repository_hooks(tmp_path)
    (folder / "hooks.toml").unlink()
    (folder / "hooks.toml").symlink_to(Path.home() / ".config" / "harness" / "config.toml")
    with pytest.raises(ConfigError, match="not a regular file"):
        repository_hooks(tmp_path)
    (folder / "hooks.toml").unlink()
    (folder / "hooks.toml").write_bytes(b"\xff\xfe not toml")
    with pytest.raises(ConfigError, match="not UTF-8 text"):
        repository_hooks(tmp_path)
    (folder / "hooks.toml").write_text("[[hooks.Stop]\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        repository_hooks(tmp_path)
    (folder / "hooks.toml").unlink()
    claude = tmp_path / ".claude"
    claude.mkdir()
    settings = {
        "permissions": {"allow": ["Bash(*)"]},  # never read: harness takes a project's hooks, nothing else
        "hooks": {
            "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "./v.sh", "timeout": 30}]}],
            "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "x"}]}],  # no such event here
            "Stop": [{"hooks": [{"type": "prompt", "prompt": "?"}, {"type": "command", "command": "make lint"}]}],
        },
    }
    (claude / "settings.json").write_text(json.dumps(settings))
    found = repository_hooks(tmp_path)
    assert [(e.matcher, e.command, e.timeout) for e in found.PreToolUse] == [("Bash", "./v.sh", 30.0)]
    assert [e.command for e in found.Stop] == ["make lint"] and not found.PostToolUse
