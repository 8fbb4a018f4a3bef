"""`harness mcp recipe` and `harness mcp hook` without an engine: the hook denies any call it is given
(the recipe's matcher gives it shell calls only), telling the model the harness tool to use; Codex's
recipe is a config section with its own shell off."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from harness.environment.serving import redirect_shell
from tests.agent.conftest import ROOT
from tests.serve.test_mcp_serve import CLI


def test_the_hook_sends_a_shell_call_to_harness_and_fails_closed():
    said = json.loads(redirect_shell(json.dumps({"tool_name": "Bash", "tool_input": {"command": "rm -rf ~"}})))
    decision = said["hookSpecificOutput"]
    assert (
        decision["permissionDecision"] == "deny" and "mcp__harness__run_command" in decision["permissionDecisionReason"]
    )
    assert '"rm -rf ~"' in decision["permissionDecisionReason"]
    for unreadable in ("not json", "[1]", json.dumps({"tool_input": {"command": 7}})):
        assert json.loads(redirect_shell(unreadable))["hookSpecificOutput"]["permissionDecision"] == "deny"
    cli = subprocess.run(
        [*CLI, "mcp", "hook"], input=json.dumps({"tool_name": "KillShell", "tool_input": {}}),
        capture_output=True, text=True, cwd=ROOT, timeout=60,
    )  # fmt: skip
    assert cli.returncode == 0 and json.loads(cli.stdout)["hookSpecificOutput"]["permissionDecision"] == "deny"


def test_the_codex_recipe_is_a_config_section_with_its_shell_off(tmp_path):
    import tomllib

    printed = subprocess.run(
        [*CLI, "mcp", "recipe", "codex", "--repo", str(tmp_path)], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    config = tomllib.loads(printed.stdout)
    assert printed.returncode == 0 and config["features"] == {"shell_tool": False, "unified_exec": False,
                                                              "js_repl": False}  # fmt: skip
    server = config["mcp_servers"]["harness"]
    assert server["args"][:3] == ["mcp", "serve", str(tmp_path.resolve())] and Path(server["command"]).name == "harness"
    refused = subprocess.run([*CLI, "mcp", "recipe", "cursor"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert refused.returncode == 64 and "claude-code or codex" in refused.stderr
