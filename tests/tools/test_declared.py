"""A project's own command tools, declared in the user's config file: the menu shows them with their
four-part descriptions (many of them behind one shared tool, with a warning), bad declarations are
refused naming the tool, and in a real run a call with hostile arguments (quotes, `;`, `$(...)`,
newlines) runs exactly the declared program with them as data, while a call the gate denies never
reaches a container."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.config import load_config
from harness.errors import ConfigError
from harness.tools.declared import expand
from tests.cli_process import run_cli

ROOT = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-c", "from harness.cli import main; main()"]
HOSTILE = "a; rm -rf / $(id) `id` \"q\" 's' \\ $HOME\nsecond line"
CONFIG = """
[tools.show_args]
description = "Print the arguments it was given, as JSON."
when = "You need to see exactly what a command receives."
when_not = "For anything else; it changes nothing."
command = ["python3", "-c", "import json, sys; print(json.dumps(sys.argv[1:]))", "{text}", "--count={count}", "{flag}"]
tier = "read"
[tools.show_args.parameters.text]
description = "Any text, up to 400 characters."
max_length = 400
[tools.show_args.parameters.count]
type = "integer"
description = "A count from 1 to 5."
minimum = 1
maximum = 5
[tools.show_args.parameters.flag]
description = "An optional extra argument."
required = false

[tools.deploy]
description = "Deploy the project."
when = "Never in a sandbox."
when_not = "Always."
command = ["sh", "-c", "echo deployed > /workspace/DEPLOYED"]

[[gate.rules]]
name = "no-deploy"
action = "deny"
tools = ["deploy"]
"""


def _harness(*args: str, state: Path, label: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HARNESS_RUN_ID": label, "HARNESS_STATE_DIR": str(state)}
    return run_cli(args, cwd=ROOT, env=env, timeout=240)


def test_placeholders_become_whole_argv_elements_never_a_shell_string():
    argv = expand(["prog", "{text}", "--n={count}", "{missing}", "x{text}y"], {"text": HOSTILE, "count": 3})
    assert argv == ["prog", HOSTILE, "--n=3", f"x{HOSTILE}y"], "an optional one not given: its element left out"


@pytest.mark.parametrize(
    "table, says",
    [
        ('[tools.x]\ndescription="d"\nwhen="w"\nwhen_not="n"\ncommand=["echo","{nope}"]', "{nope}, which no parameter declares"),
        ('[tools.read_file]\ndescription="d"\nwhen="w"\nwhen_not="n"\ncommand=["true"]', "a built-in tool has that name"),
        ('[tools.Bad-Name]\ndescription="d"\nwhen="w"\nwhen_not="n"\ncommand=["true"]', "lower-case letters"),
        ('[tools.x]\ndescription="d"\ncommand=["true"]', "when"),
    ],
)  # fmt: skip
def test_a_bad_declaration_is_refused_naming_it(tmp_path, run_label, table, says):
    path = tmp_path / "config.toml"
    path.write_text(table)
    ran = _harness("tools", "list", "--config", str(path), state=tmp_path / "state", label=run_label)
    assert ran.returncode == 78 and says in ran.stderr and "Traceback" not in ran.stderr, ran.stderr


def test_the_menu_shows_declared_tools_and_groups_many(tmp_path, run_label):
    path = tmp_path / "config.toml"
    path.write_text(CONFIG)
    listed = _harness("tools", "list", "--config", str(path), "--json", state=tmp_path / "state", label=run_label)
    assert listed.returncode == 0, listed.stderr
    tools = {t["function"]["name"]: t["function"] for t in json.loads(listed.stdout)}
    show = tools["show_args"]
    assert show["description"].startswith("Print the arguments") and "Use it when: You need" in show["description"]
    assert "Do NOT use it when: For anything else" in show["description"]
    assert show["parameters"]["properties"]["count"] == {
        "type": "integer",
        "description": "A count from 1 to 5.",
        "minimum": 1,
        "maximum": 5,
    }
    assert show["parameters"]["required"] == ["text", "count"] and show["parameters"]["additionalProperties"] is False
    many = "".join(
        f'[tools.t{n}]\ndescription="Tool {n}."\nwhen="w"\nwhen_not="n"\ncommand=["true"]\n' for n in range(12)
    )
    path.write_text(many)
    listed = _harness("tools", "list", "--config", str(path), "--json", state=tmp_path / "state", label=run_label)
    names = [t["function"]["name"] for t in json.loads(listed.stdout)]
    assert [n for n in names if n.startswith("t")] == [f"t{n}" for n in range(10)] and "project_tool" in names
    assert "12 project tools: the first 10 are in the menu, the other 2 behind one tool" in listed.stderr
    assert load_config(path).tools.declared["t11"].description == "Tool 11."
    with pytest.raises(ConfigError):
        load_config(path, {"tools.declared": {"x": {"description": "d"}}})


@pytest.mark.docker
def test_hostile_arguments_reach_the_program_as_data_and_a_denied_call_no_container(tmp_path, run_label):
    config = tmp_path / "config.toml"
    config.write_text(CONFIG)
    script = tmp_path / "script.yaml"
    script.write_text(
        yaml.safe_dump(
            {
                "turns": [
                    {"tool_calls": [{"name": "show_args", "arguments": {"text": HOSTILE, "count": 2}}]},
                    {"tool_calls": [{"name": "deploy", "arguments": {}}]},
                    {"tool_calls": [{"name": "show_args", "arguments": {"text": "x", "count": 9}}]},
                    {"text": "Done."},
                ]
            }
        )
    )
    state = tmp_path / "state"
    ran = _harness(
        "run", "--image", "py311", "--model", f"scripted:{script}", str(ROOT / "examples" / "calc"), "--task", "t",
        "--no-verify", "--session", "tools", "--config", str(config), "--json", state=state, label=run_label,
    )  # fmt: skip
    assert ran.returncode == 10, ran.stdout + ran.stderr
    records = [json.loads(line) for line in (state / "tools" / "trajectory.jsonl").read_text().splitlines()]
    calls = [r for r in records if r["kind"] == "tool"]
    shown = calls[0]
    assert shown["envelope"]["exit_code"] == 0 and shown["decision"]["rule"] == "read-tier"
    assert json.loads(shown["envelope"]["stdout"]) == [HOSTILE, "--count=2"], "the declared argv, the values as data"
    denied = calls[1]
    assert denied["error_kind"] == "denied" and denied["decision"]["rule"] == "no-deploy" and denied["envelope"] is None
    assert not (state / "tools" / "workspace" / "DEPLOYED").exists()
    invalid = calls[2]
    assert invalid["error_kind"] == "invalid_arguments" and "count" in invalid["text"] and invalid["envelope"] is None
    menu = _harness("tools", "list", "--session", "tools", state=state, label=run_label)
    assert "== show_args ==" in menu.stdout and "== deploy ==" in menu.stdout


def test_declared_and_mcp_tools_share_the_ten_places_in_front():
    """Nine declared tools and an MCP server's three: ten in front, the other two behind one tool,
    and the run is told (an MCP server's tools are known only once it runs)."""
    from types import SimpleNamespace

    from harness.assembly import menu_warning, registry
    from harness.config import RunConfig
    from harness.tools.mcp import MCPServer, MCPServerConfig

    declared = {f"t{n}": {"description": "d", "when": "w", "when_not": "n", "command": ["true"]} for n in range(9)}
    config = RunConfig.model_validate({"tools": declared})
    server = MCPServer("docs", MCPServerConfig(command=["srv"]), launch=lambda: None)  # type: ignore[arg-type,return-value]
    server.tools = [
        SimpleNamespace(name=name, description=f"{name} of the docs", input_schema={"type": "object", "properties": {
            "query": {"type": "string"}}, "required": ["query"]})
        for name in ("search", "fetch", "outline")
    ]  # fmt: skip
    try:
        names = [schema.name for schema in registry(config, [server]).schemas()]
        assert names[-11:] == [*(f"t{n}" for n in range(9)), "docs__search", "project_tool"]
        grouped = next(s for s in registry(config, [server]).schemas() if s.name == "project_tool")
        assert "## docs__fetch" in grouped.description and "## docs__outline" in grouped.description
        search = next(s for s in registry(config, [server]).schemas() if s.name == "docs__search")
        assert search.parameters["required"] == ["query"] and search.description == "search of the docs"
        assert "more than 10 project tools" in menu_warning(registry(config, [server]))
        assert menu_warning(registry(RunConfig())) is None
    finally:
        server.shutdown()
