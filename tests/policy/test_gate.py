"""The gate on its own: pure policy, ordered rules, default deny, escapes and allowlist bypasses."""

from __future__ import annotations

import pytest

from harness.policy.gate import Gate, GateConfig, GateRequest, Rejected, Rule, normalize_path, parse_command


def read(*paths: str) -> GateRequest:
    return GateRequest(tool="read_file", tier="read", paths=paths)


def write(*paths: str) -> GateRequest:
    return GateRequest(tool="write_file", tier="write", paths=paths)


def command(line: str) -> GateRequest:
    return GateRequest(tool="run_command", tier="exec", command=line)


@pytest.fixture
def gate() -> Gate:
    return Gate(GateConfig(allowed_programs=["ls", "cat", "pytest", "git", "find", "rg", "echo"]))


def test_read_inside_workspace_is_allowed(gate: Gate) -> None:
    decision = gate.check(read("src/app.py"))
    assert (decision.action, decision.rule) == ("allow", "read-tier")


@pytest.mark.parametrize(
    "path",
    [
        "/etc/passwd",
        "../outside.txt",
        "src/../../etc/passwd",
        "a\x00b",
        "/workspace/../etc",
        "src\uff0fapp.py",  # fullwidth solidus
        "\uff0e\uff0e/etc/passwd",  # fullwidth dots
        "src/\u2024\u2024/x",  # one-dot leaders
        "line\nbreak",
        "",
    ],
)
def test_escapes_and_look_alikes_are_denied(gate: Gate, path: str) -> None:
    decision = gate.check(read(path))
    assert (decision.action, decision.rule) == ("deny", "path-syntax"), decision


def test_absolute_path_inside_workspace_is_normalised() -> None:
    assert normalize_path("/workspace/src/./a.py") == "src/a.py"
    assert normalize_path("src/sub/../a.py") == "src/a.py"
    assert normalize_path(".") == "."


@pytest.mark.parametrize("path", [".git/config", ".git", "./.git/hooks/pre-commit", ".harness/state.json"])
def test_protected_paths_are_neither_read_nor_written(gate: Gate, path: str) -> None:
    assert gate.check(read(path)).rule == "protected-path"
    assert gate.check(write(path)).action == "deny"


def test_read_only_paths_can_be_read_not_written(gate: Gate) -> None:
    assert gate.check(read("tests/test_x.py")).action == "allow"
    decision = gate.check(write("tests/test_x.py"))
    assert (decision.action, decision.rule) == ("deny", "read-only-path")
    assert gate.check(write("tests")).rule == "read-only-path"
    assert gate.check(write("src/x.py")).action == "allow"


def test_writes_disabled_denies_write_tier_and_write_programs() -> None:
    gate = Gate(GateConfig(allow_writes=False))
    assert gate.check(write("src/x.py")).rule == "writes-disabled"
    assert gate.check(command("rm -rf src")).rule == "writes-disabled"
    assert gate.check(command("ls")).action == "allow"


@pytest.mark.parametrize(
    "line",
    [
        "sh -c 'rm -rf /'",
        "bash -c ls",
        "dash",
        "env X=1 ls",
        "env ls",
        "X=1 ls",
        "xargs rm",
        "find . -exec rm {} ;",
        "find . -delete",
        "/bin/ls",
        "./ls",
        "../bin/cat x",
        "sudo ls",
        "timeout 5 sh -c ls",
        "nice -n 5 bash",
        "timeout -s KILL 5 env ls",
        "nohup ls",
        "time ls",
        "git -c core.pager=sh status",
        "git -C / status",
        "git --git-dir=/x log",
        "git commit -m x",
        "git push",
        "git checkout .",
        "git diff --output=/workspace/x",
        "git grep -O vim x",
        "git diff --ext-diff",
        "rg --pre=cat x",
        "ls | cat",
        "ls; rm x",
        "ls && rm x",
        "ls > out",
        "cat < /etc/passwd",
        "ls &",
        "python -c 'import os; os.system(\"id\")'",
        "python3 x.py",
        "curl http://x",
        "'unterminated",
    ],
)
def test_command_bypass_attempts_are_denied(gate: Gate, line: str) -> None:
    decision = gate.check(command(line))
    assert decision.action == "deny", (line, decision)


@pytest.mark.parametrize(
    "line",
    [
        "ls -la",
        "cat 'a file; with operators | in quotes'",
        "pytest -q tests",
        "timeout 30 pytest -q",
        "nice -n 5 ls",
        "git status",
        "git --no-pager log -n 3",
        "git diff HEAD~1",
        "git show HEAD:README.md",
        "find . -name '*.py'",
        "rg -n TODO src",
        "echo '$HOME && x'",
    ],
)
def test_allowed_commands(gate: Gate, line: str) -> None:
    decision = gate.check(command(line))
    assert (decision.action, decision.rule) == ("allow", "command-allowlist"), (line, decision)


def test_python_allowed_when_listed() -> None:
    gate = Gate(GateConfig(allowed_programs=["python3"]))
    assert gate.check(command("python3 -c 'print(1)'")).action == "allow"


def test_parse_command_keeps_quotes_and_refuses_operators() -> None:
    assert parse_command("grep ';' 'a b'") == ["grep", ";", "a b"]
    with pytest.raises(Rejected, match="shell operators"):
        parse_command("ls || true")


def test_ask_programs_and_project_rules_first_match_wins() -> None:
    config = GateConfig(
        ask_programs=["make"],
        rules=[
            Rule(name="no-secrets", action="deny", paths=["*.pem"]),
            Rule(name="review-docs", action="ask", tools=["write_file"], paths=["docs/"]),
            Rule(name="docs-ok", action="allow", tools=["write_file"], paths=["docs/"]),
        ],
    )
    gate = Gate(config)
    assert gate.check(command("make test")).action == "ask"
    assert gate.check(read("keys/server.pem")).rule == "no-secrets"
    assert gate.check(write("docs/index.md")).rule == "review-docs"
    # safety rules come before project rules: a project allow cannot open an escape
    assert Gate(GateConfig(rules=[Rule(name="all", action="allow")])).check(read("../x")).rule == "path-syntax"


def test_default_deny_for_unknown_tier_combination() -> None:
    gate = Gate(GateConfig(rules=[]))
    decision = gate.check(GateRequest(tool="mystery", tier="exec", command=None, paths=()))
    assert decision.rule == "fixed-command"
    gate = Gate(GateConfig())
    gate.rules = [r for r in gate.rules if r[0] != "fixed-command"]
    assert gate.check(GateRequest(tool="mystery", tier="exec")).rule == "default-deny"


def test_gate_is_pure() -> None:
    gate = Gate()
    assert gate.check(command("rm x")) == gate.check(command("rm x"))


@pytest.mark.parametrize(
    "path",
    [
        "adv\u202egnp.py",
        "te\u200dsts/test_x.py",
        ".git\u200b/config",
        "a\u00a0b.py",
        "x\u3164y.py",
        "f\ufe0f.py",
        "line\u2028break.py",
        "priv\ue000.py",
    ],
)
def test_paths_with_invisible_characters_are_refused(path):
    decision = Gate(GateConfig()).check(GateRequest(tool="read_file", tier="read", paths=(path,)))
    assert decision.action == "deny" and decision.rule == "path-syntax" and "invisible character" in decision.reason


@pytest.mark.parametrize("path", ["ok/ünïcödé.py", "dir/file name.txt", "日本/語.py", "emoji_🙂.txt"])
def test_visible_unicode_paths_still_pass(path):
    assert Gate(GateConfig()).check(GateRequest(tool="read_file", tier="read", paths=(path,))).action == "allow"
