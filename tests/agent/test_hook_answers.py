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
                               "HARNESS_SESSION_ID", "HARNESS_HOOK_EVENT", "CLAUDE_PROJECT_DIR",
                               "GIT_DIR", "GIT_WORK_TREE", "HARNESS_PROCESS_MARK"}  # fmt: skip
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


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_detached_child_holding_the_pipes_neither_holds_the_run_nor_outlives_the_hook(tmp_path):
    """A hook that leaves a `setsid` daemon behind with its pipes open (a new session: its process group
    is not the hook's) lets the call go on within a short grace, and the daemon is ended."""
    pid_file = tmp_path / "daemon.pid"
    command = f"setsid sh -c 'echo $$ > {pid_file}; exec sleep 300' & sleep 0.2; echo left-a-daemon >&2"
    started = time.monotonic()
    outcome = pre(tmp_path, command, timeout=30).run("PreToolUse", PAYLOAD)
    assert time.monotonic() - started < 5, "the daemon's open pipes held the hook"
    [record] = outcome.records
    assert not outcome.blocked and record.verdict == "allow", record
    assert "were ended" in record.bounds
    daemon = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while _alive(daemon) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(daemon), "the hook's daemon outlived it"


def test_a_hook_past_its_timeout_ends_with_its_daemon_too(tmp_path):
    pid_file = tmp_path / "daemon.pid"
    command = f"setsid sh -c 'echo $$ > {pid_file}; exec sleep 300' & sleep 300"
    started = time.monotonic()
    outcome = pre(tmp_path, command, timeout=1).run("PreToolUse", PAYLOAD)
    assert outcome.blocked and "did not finish in 1s" in outcome.reason and time.monotonic() - started < 4
    assert not _alive(int(pid_file.read_text()))


def test_a_hook_printing_hundreds_of_megabytes_is_read_in_pieces(tmp_path):
    """300 MB on stdout: the first 64 KiB are kept, the rest counted and dropped (the controller's memory
    stays flat: `harness bench hooks` measures it), and its answer still decides."""
    outcome = pre(tmp_path, "head -c 300000000 /dev/zero | tr '\\0' x; exit 2", timeout=60).run("PreToolUse", PAYLOAD)
    [record] = outcome.records
    assert outcome.blocked and record.exit_code == 2
    assert "299934464 bytes of its output past 64 KiB were not kept" in record.bounds


def test_the_run_s_wall_clock_bounds_every_hook(tmp_path):
    from harness.deadline import Deadline

    started = time.monotonic()
    outcome = pre(tmp_path, "sleep 300", timeout=3600).run("PreToolUse", PAYLOAD, deadline=Deadline(1.0))
    assert outcome.blocked and time.monotonic() - started < 4
    assert "did not finish in 1s (its own limit is 3600s; the run's or a call's ends sooner)" in outcome.reason


def test_a_matcher_is_a_pattern_run_with_a_time_limit(tmp_path, monkeypatch):
    """A catastrophic pattern (minutes of the standard library's backtracking on a tool name) is decided
    at once, and one that cannot decide within its time limit matches: the gating hook runs and decides."""
    import harness.agent.hooks as hooks_module

    catastrophic = r"(\w*)*(\w*)*(\w*)*(\w*)*(\w*)*(\w*)*(\w*)*!"
    started = time.monotonic()
    assert pre(tmp_path, "exit 2", matcher=catastrophic).wanted("PreToolUse", "run_command") == []
    assert time.monotonic() - started < 2
    monkeypatch.setattr(hooks_module, "MATCH_TIME_S", 1e-6)
    slow = r"(?:\w|\w\w|\w\w\w)*" * 8 + r"(?<!d)"
    assert hooks_module.matches(slow, "run_command")  # undecided in time: taken as matching
    assert pre(tmp_path, "exit 2", matcher=slow).run("PreToolUse", PAYLOAD).blocked


def test_a_hooks_git_never_reads_the_repository_s_config(tmp_path):
    """The workspace carries the repository's .git, whose config names programs git runs (an fsmonitor,
    a filter, an external diff, a hooks folder): a user's hook running git sees the history and the
    work tree, and none of those programs runs on this machine."""
    import shutil
    import subprocess

    git = shutil.which("git")
    if git is None:
        pytest.skip("no git on this machine")
    repo = tmp_path / "repo"
    repo.mkdir()
    run = {"cwd": repo, "check": True, "capture_output": True}
    subprocess.run([git, "init", "-q", "-b", "main"], **run)
    (repo / "a.txt").write_text("one\n")
    (repo / ".gitattributes").write_text("*.txt filter=evil diff=evil\n")
    subprocess.run([git, "add", "."], **run)
    env = {**os.environ, "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a",
           "GIT_COMMITTER_EMAIL": "a@b"}  # fmt: skip
    subprocess.run([git, "commit", "-q", "-m", "first"], **run, env=env)
    marker = tmp_path / "ran-on-the-host"
    (repo / ".git" / "config").write_text(
        f"[core]\n\tfsmonitor = touch {marker}.fsmonitor; false\n\thooksPath = hooks-of-the-repo\n"
        f'[filter "evil"]\n\tclean = touch {marker}.clean; cat\n'
        f'[diff "evil"]\n\ttextconv = touch {marker}.diff; cat\n'
        "[safe]\n\tdirectory = *\n"
    )
    (repo / "a.txt").write_text("two\n")
    seen = tmp_path / "seen.txt"
    command = f"(git status --porcelain; git log --format=%s; git diff --stat) > {seen} 2>&1"
    outcome = hooks(repo, Stop=[HookEntry(command=command)]).run("Stop", {})
    assert not outcome.blocked, outcome.records
    said = seen.read_text()
    assert " M a.txt" in said and "first" in said and "a.txt | 2 +-" in said, said
    assert not list(tmp_path.glob("ran-on-the-host*")), "a program of the repository's git config ran on the host"
