"""`harness tools list` and `harness tool SESSION NAME --args JSON`."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from harness.cli import environment
from harness.cli.app import ExitCode, app, console, err_console, fail, group, reported, state_dir

if TYPE_CHECKING:
    from harness.types import ToolSchema

tools_app = group("The tool menu the model sees.")
app.add_typer(tools_app, name="tools")

TOOL_EXIT = {
    "invalid_json": ExitCode.TOOL_INVALID,
    "invalid_arguments": ExitCode.TOOL_INVALID,
    "unknown_tool": ExitCode.TOOL_INVALID,
    "denied": ExitCode.TOOL_DENIED,
    "timeout": ExitCode.TOOL_TIMEOUT,
    "output_limit": ExitCode.TOOL_OUTPUT_LIMIT,
    "execution_error": ExitCode.FAILED,
}
"""Exit codes of `harness tool`: 0 OK; the error kind otherwise (also printed on stderr)."""


@tools_app.command("list")
def tools_list(
    json_out: bool = typer.Option(False, "--json", help="Print the schemas as JSON."),
    style: str = typer.Option("openai", "--format", help="Schema form for --json: openai or anthropic."),
    session: str | None = typer.Option(None, "--session", help="The menu this session's model saw (its config)."),
    config_file: Path | None = typer.Option(None, "--config", help="The menu a run of this config file gets."),
    state: Path | None = typer.Option(None, "--state-dir", help="Where sessions live."),
) -> None:
    """Names and descriptions exactly as the model sees them (declared project tools included)."""
    from harness import assembly
    from harness.config import RunConfig, load_config

    if session and config_file:
        fail("--session and --config name two menus: give one", ExitCode.USAGE)
    schemas: list[ToolSchema] | None = None
    with reported():
        if session:
            folder = state_dir(state) / session
            if not folder.is_dir():
                fail(f"no session {session} in {folder.parent}", ExitCode.NOT_FOUND)
            schemas = offered(folder)
            config = assembly.saved_config(folder, {}) if schemas is None else RunConfig()
        else:
            config = load_config(config_file) if config_file else RunConfig()
        if schemas is None:
            schemas = assembly.registry(config).schemas()
            for warning in assembly.tool_warnings(config):
                err_console.print(f"warning: {warning}", markup=False, soft_wrap=True)
            for name, server in config.mcp.items():  # their tools are known once the server runs
                err_console.print(
                    f"MCP server {name} ({' '.join(server.command)}): its tools join as {name}__TOOL when a run "
                    "starts it (`harness tools list --session ID` then shows them)",
                    markup=False,
                    soft_wrap=True,
                )
    if json_out:
        if style not in ("openai", "anthropic"):
            fail(f"--format must be openai or anthropic, not {style!r}", ExitCode.USAGE)
        print(json.dumps([s.openai() if style == "openai" else s.anthropic() for s in schemas], indent=2))
        return
    for schema in schemas:
        console.print(f"== {schema.name} ==", style="bold", markup=False)
        console.print(schema.description + "\n", markup=False, soft_wrap=True)


def offered(folder: Path) -> list[ToolSchema] | None:
    """The menu a session's run offered its model (menu.json, MCP tools included); None before a run."""
    from harness.types import ToolSchema
    from sandbox.layout import SessionFolder

    path = SessionFolder(folder).menu
    try:
        return [ToolSchema(**item) for item in json.loads(path.read_text(encoding="utf-8"))]
    except FileNotFoundError:
        return None
    except (OSError, ValueError, TypeError) as error:
        fail(f"{path} is unreadable: {error}".splitlines()[0], ExitCode.FAILED)
    return None


@app.command("tool")
def tool_command(
    session_id: str = typer.Argument(..., metavar="SESSION", help="Session id (see: harness session list)."),
    name: str = typer.Argument(..., help="Tool name (see: harness tools list)."),
    args: str = typer.Option("{}", "--args", help="Tool arguments as one JSON object."),
    state: Path | None = typer.Option(None, "--state-dir", help="Where sessions live."),
    read_only: bool = typer.Option(False, "--read-only", help="Deny write tools for this call."),
    test_command: str | None = typer.Option(None, "--test-command", help="Command run_tests runs."),
    json_out: bool = typer.Option(False, "--json", help="Print the whole ToolResult as JSON."),
    interactive: bool = typer.Option(
        False, "--interactive", help="Ask at the terminal when a rule says ask (default: such calls are denied)."
    ),
) -> None:
    """Run one tool inside a session (registry + gate + sandbox) and commit a step if it wrote."""
    from harness import assembly
    from harness.config import RunConfig
    from harness.policy.gate import Gate
    from harness.providers.arguments import safe_text, safe_value
    from harness.types import ToolCall
    from sandbox.layout import session_folder

    try:
        arguments, _ = safe_value(json.loads(args))  # lone surrogates become U+FFFD, as from a model
        parse_error = None if isinstance(arguments, dict) else "the arguments must be a JSON object"
    except ValueError as error:
        arguments, parse_error = {}, str(error)
    call = ToolCall(
        id=f"cli-{uuid.uuid4().hex[:8]}",
        name=name,
        arguments=arguments if not parse_error else {},
        raw_arguments=safe_text(args)[0] if parse_error else None,
        parse_error=parse_error,
    )
    sessions = state_dir(state)
    with reported():
        # The gate and test command `harness run` recorded for this session, else the defaults.
        recorded = session_folder(sessions, session_id).run_config
        config = assembly.saved_config(recorded.parent, {}) if recorded.is_file() else RunConfig()
        gate_config = config.gate.model_copy(update={"allow_writes": False}) if read_only else config.gate
        outside = environment.runtime(config, interactive=interactive, prefix="cli")
        # One call: no warm container (nor a namespace holder elsewhere), either would double its cost.
        with (
            assembly.open_sandbox(outside, session_id, pool_size=0, share_netns=False) as box,
            assembly.open_session(sessions, session_id, box) as session,
        ):
            if not (test_command or config.test_cmd or config.verify):
                # a session no run made (`harness exec --session`): the test command its layout names
                config = assembly.with_verify(config, session.workspace)
                if config.verify_source:
                    err_console.print(f"test command: `{config.verify}` ({config.verify_source})", markup=False)
            ctx = assembly.tool_context(
                config, session, box, interactive=interactive, gate=Gate(gate_config), test_command=test_command
            )
            if not interactive:
                ctx.approver = None  # an `ask` rule denies at once instead of waiting for an answer
            result = assembly.registry(config).execute(call, ctx)
            image = result.envelope.committed_image if result.envelope is not None else None
            if result.wrote or image:
                before = session.step
                step = session.commit_step(f"tool {name}", committed_image=image, skip_unchanged=True)
                err_console.print(
                    f"committed step {step.step}" + (f" (image {image[:19]})" if image else "")
                    if step.step > before
                    else f"workspace unchanged: still at step {step.step}"
                )
    print(result.model_dump_json(indent=2) if json_out else result.text)
    if result.is_error:
        err_console.print(f"error: {result.error_kind}")
        raise typer.Exit(int(TOOL_EXIT.get(result.error_kind or "", ExitCode.FAILED)))
