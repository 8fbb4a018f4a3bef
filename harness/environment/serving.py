"""The recipes of `harness mcp recipe`: the settings that make an agent on the user's machine put every
command and file change through `harness mcp serve` (its own shell and editors off, a hook that sends a
shell call to harness's run_command), and that hook's answer (`harness mcp hook`).

An MCP client uses an MCP tool only when it chooses to: its built-in shell would still run on the host.
So a recipe turns the built-in tools off where the agent allows it (Claude Code's `permissions.deny`,
Codex's `features.shell_tool`), and Claude Code's PreToolUse hook refuses any shell call that gets
past them, telling the model which harness tool runs it.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

SERVER = "harness"
"""The server's name in the agent's config (its tools are `mcp__harness__run_command`, ...)."""

CLAUDE_DENIED = [
    "Bash",
    "BashOutput",
    "KillShell",
    "Edit",
    "Write",
    "MultiEdit",
    "NotebookEdit",
    "Read",
    "Glob",
    "Grep",
]
"""Claude Code's own tools that act on this machine's files or shell: harness's copy is the truth."""

SHELL_TOOLS = {"Bash", "BashOutput", "KillShell"}


def harness_command() -> str:
    """The `harness` executable beside this Python (as installed), else the one on PATH."""
    beside = Path(sys.executable).parent / "harness"
    return str(beside) if beside.is_file() else shutil.which("harness") or "harness"


def serve_args(repo: str, image: str) -> list[str]:
    return ["mcp", "serve", repo, "--image", image]


def claude_files(repo: str, image: str) -> dict[str, Any]:
    """Claude Code's two files: its MCP config (`--mcp-config`) and its settings (`--settings`)."""
    command = harness_command()
    mcp = {"mcpServers": {SERVER: {"type": "stdio", "command": command, "args": serve_args(repo, image)}}}
    settings = {
        "permissions": {
            "deny": CLAUDE_DENIED,
            "allow": [f"mcp__{SERVER}"],
            "disableBypassPermissionsMode": "disable",
        },
        "hooks": {
            "PreToolUse": [
                {
                    "matcher": "|".join(sorted(SHELL_TOOLS)),
                    "hooks": [{"type": "command", "command": f"{command} mcp hook"}],
                }
            ]
        },
        "enableAllProjectMcpServers": False,
        "env": {"ENABLE_TOOL_SEARCH": "false"},  # harness's tools in every request, not found by a search first
    }
    return {"harness-mcp.json": mcp, "harness-settings.json": settings}


def claude_recipe(repo: str, image: str) -> str:
    files = claude_files(repo, image)
    return (
        "# Claude Code: every command in a harness container. Save the two files, then run\n"
        "#   claude --mcp-config harness-mcp.json --strict-mcp-config --settings harness-settings.json\n"
        "# (its Bash, Edit, Write, Read, Glob and Grep are off; a shell call that gets past them is sent to\n"
        f"# mcp__{SERVER}__run_command by the hook). After the session: harness show / export / apply.\n"
        + "".join(f"\n# {name}\n{json.dumps(body, indent=2)}\n" for name, body in files.items())
    )


def codex_recipe(repo: str, image: str) -> str:
    args = ", ".join(json.dumps(a) for a in serve_args(repo, image))
    return (
        "# Codex: every command in a harness container. Add to ~/.codex/config.toml (or pass each line with -c).\n"
        "# Its own shell is off (features.shell_tool, unified_exec); it reads and edits through harness's tools.\n"
        f"[mcp_servers.{SERVER}]\n"
        f"command = {json.dumps(harness_command())}\n"
        f"args = [{args}]\n"
        "startup_timeout_sec = 120\n"
        "tool_timeout_sec = 900\n"
        "\n[features]\n"
        "shell_tool = false\n"
        "unified_exec = false\n"
        "js_repl = false\n"
    )


RECIPES: dict[str, Callable[[str, str], str]] = {"claude-code": claude_recipe, "codex": codex_recipe}


def redirect_shell(payload: str) -> str:
    """The PreToolUse hook's answer to Claude Code: the call is denied, the model told to run the same
    command with harness's run_command. The recipe's matcher gives it shell calls only; whatever it is
    given (a payload it cannot read included) is denied: it fails closed."""
    try:
        data = json.loads(payload)
    except ValueError:
        data = {}
    arguments = data.get("tool_input") if isinstance(data, dict) else None
    command = arguments.get("command") if isinstance(arguments, dict) else None
    reason = (
        f"This machine's shell is off. Run it with the mcp__{SERVER}__run_command tool instead"
        + (f" (command: {json.dumps(command[:2000])})" if isinstance(command, str) and command else "")
        + ": it runs in a fresh container on harness's copy of the repository."
    )
    answer = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                     "permissionDecisionReason": reason}}  # fmt: skip
    return json.dumps(answer)
