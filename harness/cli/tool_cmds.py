"""`harness tools list`, `harness tool SESSION NAME --args JSON` and `harness bench tools`."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any, Optional

import typer

from harness.cli.app import ExitCode, app, bench_app, console, docker_host, err_console, fail, reported, state_dir
from harness.approve import InteractiveApprover
from harness.gate import Gate, GateConfig
from harness.tools.builtin import default_registry, make_context
from harness.types import ToolCall

tools_app = typer.Typer(help="The tool menu the model sees.", no_args_is_help=True)
app.add_typer(tools_app, name="tools")

TOOL_EXIT = {"invalid_json": 65, "invalid_arguments": 65, "unknown_tool": 65, "denied": 77, "timeout": 124,
             "output_limit": 73, "execution_error": 1}
"""Exit codes of `harness tool`: 0 OK; the error kind otherwise (also printed on stderr)."""


@tools_app.command("list")
def tools_list(
    json_out: bool = typer.Option(False, "--json", help="Print the schemas as JSON."),
    style: str = typer.Option("openai", "--format", help="Schema form for --json: openai or anthropic."),
) -> None:
    """Names and descriptions exactly as the model sees them."""
    schemas = default_registry().schemas()
    if json_out:
        if style not in ("openai", "anthropic"):
            fail(f"--format must be openai or anthropic, not {style!r}", ExitCode.USAGE)
        print(json.dumps([s.openai() if style == "openai" else s.anthropic() for s in schemas], indent=2))
        return
    for schema in schemas:
        console.print(f"[bold]== {schema.name} ==[/]")
        console.print(schema.description + "\n", markup=False, soft_wrap=True)


def _run_config(folder: Path) -> tuple[GateConfig, str | None]:
    """Gate config and test command recorded by `harness run` for this session, else the defaults."""
    from harness.config import RunConfig

    saved = folder / "run.json"
    if not saved.is_file():
        return GateConfig(), None
    config = RunConfig.model_validate_json(saved.read_text(encoding="utf-8"))
    return config.gate, config.test_cmd or config.verify


@app.command("tool")
def tool_command(
    session_id: str = typer.Argument(..., metavar="SESSION", help="Session id (see: harness session list)."),
    name: str = typer.Argument(..., help="Tool name (see: harness tools list)."),
    args: str = typer.Option("{}", "--args", help="Tool arguments as one JSON object."),
    state: Optional[Path] = typer.Option(None, "--state-dir", help="Where sessions live."),
    read_only: bool = typer.Option(False, "--read-only", help="Deny write tools for this call."),
    test_command: Optional[str] = typer.Option(None, "--test-command", help="Command run_tests runs."),
    json_out: bool = typer.Option(False, "--json", help="Print the whole ToolResult as JSON."),
    interactive: bool = typer.Option(False, "--interactive", help="Ask at the terminal when a rule says ask "
                                     "(default: such calls are denied)."),
) -> None:
    """Run one tool inside a session (registry + gate + sandbox) and commit a step if it wrote."""
    from sandbox.docker import DockerSandbox, connect
    from sandbox.session import Session

    try:
        arguments = json.loads(args)
        parse_error = None if isinstance(arguments, dict) else "the arguments must be a JSON object"
    except ValueError as error:
        arguments, parse_error = {}, str(error)
    call = ToolCall(id=f"cli-{uuid.uuid4().hex[:8]}", name=name, arguments=arguments if not parse_error else {},
                    raw_arguments=args if parse_error else None, parse_error=parse_error)
    with reported():
        session = Session.open(state_dir(state), session_id)
        with session:
            gate_config, recorded_tests = _run_config(session.dir)
            if read_only:
                gate_config = gate_config.model_copy(update={"allow_writes": False})
            client = connect(docker_host())
            session.attach_engine(client)  # committed step images get tagged; rollback checks them
            run = os.environ.get("HARNESS_RUN_ID") or f"cli-{uuid.uuid4().hex[:12]}"
            with DockerSandbox(client, run_id=run, pool_size=0, session_id=session.id, share_netns=False) as box:
                approver = InteractiveApprover(err_console) if interactive else None
                ctx = make_context(box, session.workspace, session.spec, Gate(gate_config), approver=approver,
                                   test_command=test_command or recorded_tests,
                                   commit_changes=session.config.writable_root)
                result = default_registry().execute(call, ctx)
            image = result.envelope.committed_image if result.envelope is not None else None
            if result.wrote or image:
                before = session.step
                step = session.commit_step(f"tool {name}", committed_image=image, skip_unchanged=True)
                err_console.print(f"committed step {step.step}" + (f" (image {image[:19]})" if image else "")
                                  if step.step > before else f"workspace unchanged: still at step {step.step}")
    print(result.model_dump_json(indent=2) if json_out else result.text)
    if result.is_error:
        err_console.print(f"error: {result.error_kind}")
        raise typer.Exit(TOOL_EXIT.get(result.error_kind or "", 1))


@bench_app.command("tools")
def bench_tools(
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object."),
    rounds: int = typer.Option(25, "--rounds", min=5, max=500, help="Measurements per side."),
    image: str = typer.Option("py311", "--image", help="Sandbox image for both sides."),
) -> None:
    """Median read_file (registry + gate + warm DockerSandbox) vs a bare exec_run of cat, same run."""
    from harness.tools.bench import measure

    with reported():
        figures = measure(connect_client(), image=image, rounds=rounds)
    if json_out:
        print(json.dumps(figures))
        return
    console.print(f"read_file end to end: {figures['read_file_ms']:.1f} ms median over {rounds} calls")
    console.print(f"bare exec_run cat:    {figures['exec_cat_ms']:.1f} ms median over {rounds} calls")
    verdict = "ok" if figures["read_file_over_exec"] <= 1.5 else "over the 1.5x target"
    console.print(f"ratio:                {figures['read_file_over_exec']:.2f}x ({verdict})")


def connect_client() -> Any:
    from sandbox.docker import connect

    return connect(docker_host())
