"""What a command line loads: the command's own module (so typer builds its commands, not all of them),
and a read command none of the run machinery: the agent loop, the tools, the providers, the gate's rule
engine, the docker SDK, dulwich. The table that maps commands to modules is kept whole here."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness import cli
from tests.agent.conftest import CLI

ROOT = Path(__file__).resolve().parents[2]

READ_COMMANDS_NEVER_LOAD = (
    "harness.agent.loop",
    "harness.assembly.runs",
    "harness.config",
    "harness.tools.registry",
    "harness.providers.factory",
    "harness.policy.gate",
    "harness.landing.land",
    "docker",
    "dulwich",
)


def test_the_table_names_the_module_of_every_top_level_command_and_group():
    app = cli.typer_app()  # every module loaded
    registered = {info.name or info.callback.__name__: info.callback.__module__ for info in app.registered_commands}
    registered.update(
        {group.name: group.typer_instance.registered_commands[0].callback.__module__ for group in app.registered_groups}
    )
    assert {name: f"harness.cli.{module}" for name, module in cli.MODULE_OF.items()} == registered
    assert set(cli.MODULE_OF.values()) == set(cli.COMMAND_MODULES)


@pytest.mark.parametrize("columns", [80, 120])
def test_the_help_lists_every_command_in_its_section_in_order_with_its_line_whole(columns):
    """`harness --help`: the commands in the sections a person meets them in, each with its one line;
    a group's help lists its commands with their first sentence whole; nothing cut with "..."."""
    from harness.cli.app import SECTIONS

    sectioned = [name for _, rows in SECTIONS for name, _ in rows]
    assert sorted(sectioned) == sorted(cli.MODULE_OF), "every command in one section"
    assert all(len(line) <= 60 for _, rows in SECTIONS for _, line in rows), "one line at 80 columns"
    env = {"COLUMNS": str(columns), "PATH": "/usr/bin:/bin"}
    top = subprocess.run([*CLI, "--help"], capture_output=True, text=True, env=env, cwd=ROOT)
    assert top.returncode == 0, top.stderr
    listed = [line.split()[0] for line in top.stdout.splitlines() if line.startswith("  ") and line.split()]
    assert [name for name in listed if name in cli.MODULE_OF] == sectioned
    titles = [title + ":" for title, _ in SECTIONS]
    assert [line for line in top.stdout.splitlines() if line in titles] == titles
    for group in ("session", "bench", "images"):
        shown = subprocess.run([*CLI, group, "--help"], capture_output=True, text=True,
                               env=env, cwd=ROOT)  # fmt: skip
        assert shown.returncode == 0 and "Commands:" in shown.stdout, shown.stderr
        assert "..." not in shown.stdout.split("\n", 1)[1] and all(
            len(line) <= columns for line in shown.stdout.splitlines()
        ), shown.stdout
    assert "..." not in top.stdout.split("\n", 1)[1] and all(
        len(line) <= columns for line in top.stdout.splitlines()
    ), top.stdout


def _loaded(tmp_path, *argv: str, run_label: str = "") -> tuple[int, list[str], str]:
    """Run `harness ARGV` in a fresh interpreter; its exit code, the modules it had loaded, its output."""
    probe = textwrap.dedent(
        f"""
        import atexit, json, sys
        atexit.register(lambda: sys.__stderr__.write("MODULES " + json.dumps(sorted(sys.modules)) + "\\n"))
        sys.argv = ["harness", *{list(argv)!r}]
        from harness.cli import main
        main()
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env={
            "HARNESS_STATE_DIR": str(tmp_path / "state"),
            "PATH": "/usr/bin:/bin",
            "HOME": str(tmp_path),
            **({"HARNESS_RUN_ID": run_label} if run_label else {}),
        },
        timeout=60,
    )
    line = next(line for line in done.stderr.splitlines() if line.startswith("MODULES "))
    return done.returncode, json.loads(line.removeprefix("MODULES ")), done.stdout


def test_a_read_command_loads_its_module_and_none_of_the_run_machinery(tmp_path):
    code, modules, out = _loaded(tmp_path, "session", "list", "--json")
    assert code == 0 and json.loads(out) == []
    commands = {m.rsplit(".", 1)[-1] for m in modules if m.startswith("harness.cli.") and m.endswith("_cmds")}
    assert commands == {"session_cmds"}
    assert [m for m in modules if m.split(".")[0] in ("docker", "dulwich") or m in READ_COMMANDS_NEVER_LOAD] == []


def test_the_plain_read_commands_load_no_command_line_and_build_no_model(tmp_path):
    """`show SESSION`, `session list` and `report DIR` read the records as plain JSON, `diff` and
    `export` the snapshots' trees: no typer, no pydantic model."""
    never = (*READ_COMMANDS_NEVER_LOAD, "pydantic.main", "harness.trajectory", "harness.agent.outcome")
    record = tmp_path / "batch" / "runs" / "t1" / "m-abc123" / "0.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"key": {"task_id": "t1", "model": "m", "run_index": 0}, "status": "done"}))
    for argv, exit_code, said in (
        (("report", str(tmp_path / "batch")), 0, "| completion"),
        (("session", "list"), 0, "no sessions in"),
        (("show", "nosuchsession"), 66, ""),
        (("show", "--state-dir", str(tmp_path / "elsewhere"), "nosuchsession"), 66, ""),
        (("diff", "nosuchsession", "--from", "1"), 66, ""),
        (("export", "nosuchsession", "-o", str(tmp_path / "out.patch"), "--no-check"), 66, ""),
        (("report", str(tmp_path / "nobatch")), 66, ""),
    ):
        code, modules, out = _loaded(tmp_path, *argv)
        assert code == exit_code and said in out, argv
        assert [m for m in modules if m.split(".")[0] in ("docker", "dulwich", "typer") or m in never] == [], argv


def test_help_a_typo_and_the_version_still_see_every_command(tmp_path):
    code, modules, out = _loaded(tmp_path, "--help")
    assert code == 0 and all(f" {name} " in out for name in ("apply", "session", "warm", "bench"))
    assert {f"harness.cli.{name}" for name in cli.COMMAND_MODULES} <= set(modules)
    code, modules, _ = _loaded(tmp_path, "sesion", "list")
    assert code == 64 and "harness.cli.session_cmds" in modules, "a typo is told the command it may mean"
    code, modules, out = _loaded(tmp_path, "--version")
    assert code == 0 and out.startswith("harness ") and "typer" not in modules


RUN_NEVER_LOADS = ("asyncio", "mcp", "tenacity", "json_repair", "psutil", "dask", "distributed", "openai", "anthropic")
"""Loaded only by what needs them: MCP servers (asyncio), a networked model's retries (tenacity loads
asyncio), arguments that are not JSON (json_repair), a prune (psutil), a batch, a vendor's model. Each
command line pays for every module it loads, and the suite and a night's batch start hundreds."""


@pytest.mark.docker
def test_a_run_loads_only_what_it_uses(tmp_path, run_label, sandbox_image):
    repo = tmp_path / "calc"
    shutil.copytree(ROOT / "examples" / "calc", repo)
    code, modules, out = _loaded(
        tmp_path,
        *("run", "--image", sandbox_image, "--model", f"scripted:{ROOT / 'examples' / 'calc-fix.yaml'}", str(repo)),
        *("--task", "Fix the failing tests in calc.", "--verify", "python3 -m pytest -q", "--json"),
        run_label=run_label,
    )
    assert code == 0 and json.loads(out)["outcome"] == "verified", out
    assert "harness.agent.loop" in modules and "docker" in modules, "the probe saw the run's modules"
    assert [m for m in modules if m.split(".")[0] in RUN_NEVER_LOADS] == []
