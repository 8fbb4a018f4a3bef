"""`harness mcp serve|recipe|hook`: harness's sandbox served to an MCP client (harness.assembly.served),
the settings that make an agent use it for everything, and the hook those settings name."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

import typer

from harness.cli import environment
from harness.cli.app import ALLOW_NET, SECRET, ExitCode, app, err_console, fail, group, reported, state_dir

mcp_app = group("harness's sandbox for an MCP client's tool calls (docs/serve.md).")
app.add_typer(mcp_app, name="mcp")

SERVED_STEPS = 1000
"""A served session's step limit unless --max-steps says otherwise (each call is a step)."""


@mcp_app.command("serve")
def serve(
    path: Path = typer.Argument(..., help="Repository to serve (copied; the original is never written)."),
    image: str | None = typer.Option(None, "--image", help="Sandbox image for every call (default py311)."),
    session: str | None = typer.Option(None, "--session", help="Session id to create (default: generated)."),
    task: str | None = typer.Option(None, "--task", help="What the session is for, as its record says it."),
    verify: str | None = typer.Option(
        None, "--verify", help="Command that decides 'done' when the client goes (default: detected)."
    ),
    no_verify: bool = typer.Option(False, "--no-verify", help="No verify command: the session ends `unverified`."),
    test_cmd: str | None = typer.Option(
        None, "--test-cmd", help="Command run_tests runs (default: the verify command)."
    ),
    setup: list[str] | None = typer.Option(
        None, "--setup", help="Setup command run once before the first call (repeatable); `auto`: detected."
    ),
    setup_network: bool | None = typer.Option(None, "--setup-network", help="Allow network for setup only."),
    allow_net: list[str] | None = ALLOW_NET,
    secret: list[str] | None = SECRET,
    max_steps: int | None = typer.Option(None, "--max-steps", help=f"Calls allowed (default {SERVED_STEPS})."),
    timeout_min: float | None = typer.Option(None, "--timeout-min", help="Wall-clock limit of the session in minutes."),
    runtime: str | None = typer.Option(None, "--runtime", help="OCI runtime of every call: runc or runsc (gVisor)."),
    repo_hooks: bool = typer.Option(False, "--repo-hooks", help="Run the repository's declared hooks, sandboxed."),
    http: str | None = typer.Option(
        None,
        "--http",
        metavar="127.0.0.1:PORT",
        help="Serve streamable HTTP here (PORT 0: any free one) behind a bearer token it prints, not stdio.",
    ),
    state_dir_opt: Path | None = typer.Option(None, "--state-dir", help="Where sessions live."),
    config_file: Path | None = typer.Option(None, "--config", help="Config file (default: the per-user config.toml)."),
) -> None:
    """Serve one harness session to an MCP client: each call of run_command, read_file, write_file,
    apply_patch, search_code, list_dir or run_tests is a step in a fresh container (gate, hooks, limits,
    egress, secrets as `harness run`); diff, rollback and session_info read and move the session. When
    the client goes, the session verifies and ends: `harness show`, `export` and `apply` take it."""
    from harness import assembly
    from harness.assembly import served
    from harness.cli.failure import sigterm_interrupts
    from harness.config import load_config

    sessions = state_dir(state_dir_opt)
    with reported():
        address = served.loopback(http) if http is not None else None
        if address is None and not os.environ.get(DETACHED):
            raise typer.Exit(_detached())
        overrides: dict[str, Any] = {
            "model": served.MODEL,
            "image": image,
            "verify": verify,
            "test_cmd": test_cmd,
            "setup": setup or None,
            "setup_network": setup_network,
            "allow_net": allow_net or None,
            "secrets": secret or None,
            "limits.max_steps": max_steps or SERVED_STEPS,
            "limits.timeout_min": timeout_min,
            "limits.max_verify_rounds": 1,  # the client is gone when it runs: nobody to send a failure to
            "sandbox.runtime": runtime,
            "repo_hooks": True if repo_hooks else None,
        }
        if no_verify and verify:
            fail("--verify and --no-verify contradict each other", ExitCode.USAGE)
        if no_verify:
            overrides["detect_verify"] = False
        config = load_config(config_file, overrides, repo=path)
        config = config.model_copy(update={"model": served.MODEL, "agent": None})
        if not path.is_dir():
            fail(f"repository path does not exist: {path}", ExitCode.NOT_FOUND)
        config = assembly.with_setup(assembly.with_verify(config, path), path)
        outside = environment.runtime(config, interactive=False, spans=None)
        run = served.start(path, config, sessions, outside, session, task or served.TASK)
        run.wait_ready()
        agent = run.served.agent
        assert agent is not None
        ident = agent.state.session_id
        server = served.server_of(run.served)
        why = "the MCP client closed the server's stdin" if address is None else "the server was stopped"
        try:
            with sigterm_interrupts():  # a stop by a process manager: the session ends as at Ctrl-C
                if address is None:
                    err_console.print(f"harness mcp: session {ident} serving on stdio", markup=False, soft_wrap=True)
                    served.serve_stdio(server)
                else:

                    def listening(url: str, token: str) -> None:
                        print(json.dumps({"session": ident, "url": url, "token": token}), flush=True)
                        err_console.print(
                            f"harness mcp: session {ident} at {url} (header Authorization: Bearer {token})",
                            markup=False,
                            soft_wrap=True,
                        )

                    served.serve_http(server, address, listening)
        except KeyboardInterrupt:
            why = "the server was interrupted"
        result = run.end(why)
    with contextlib.suppress(OSError):  # the client may have closed its end of stderr
        err_console.print(
            f"harness mcp: session {ident} ended {result.outcome}: {result.detail} (`harness show {ident}`)",
            markup=False,
            soft_wrap=True,
        )
    raise typer.Exit(result.exit_code)


@app.command("acp")
def acp_command(
    model: str | None = typer.Option(None, "--model", help="The model of every session's runs (PROVIDER:MODEL)."),
    image: str | None = typer.Option(None, "--image", help="Sandbox image for every call (default py311)."),
    verify: str | None = typer.Option(None, "--verify", help="Command that decides 'done' (default: detected)."),
    no_verify: bool = typer.Option(False, "--no-verify", help="No verify command: runs end `unverified`."),
    test_cmd: str | None = typer.Option(None, "--test-cmd", help="Command run_tests runs."),
    setup: list[str] | None = typer.Option(None, "--setup", help="Setup command (repeatable); `auto`: detected."),
    allow_net: list[str] | None = ALLOW_NET,
    max_steps: int | None = typer.Option(None, "--max-steps", help="Model turns allowed per run."),
    max_cost: float | None = typer.Option(None, "--max-cost", help="Spend limit in USD per run."),
    timeout_min: float | None = typer.Option(None, "--timeout-min", help="Wall-clock limit per run in minutes."),
    state_dir_opt: Path | None = typer.Option(None, "--state-dir", help="Where sessions live."),
    config_file: Path | None = typer.Option(None, "--config", help="Config file (default: the per-user config.toml)."),
) -> None:
    """harness's own agent as an ACP agent on stdio, for an editor or a terminal client: each session a
    harness session of the client's folder, each prompt a run (a follow-up goes on in the same
    conversation), `ask` rules put to the client (docs/serve.md)."""
    from harness.cli.acp_agent import serve as serve_acp

    if no_verify and verify:
        fail("--verify and --no-verify contradict each other", ExitCode.USAGE)
    with reported():
        environment.model_flag(model)
    if config_file is not None and not config_file.is_file():
        fail(f"--config: no such file: {config_file}", ExitCode.NOT_FOUND)
    defaults: list[str] = []
    for flag, value in (("--model", model), ("--image", image), ("--verify", verify), ("--test-cmd", test_cmd),
                        ("--max-steps", max_steps), ("--max-cost", max_cost), ("--timeout-min", timeout_min),
                        ("--config", config_file and config_file.resolve())):  # fmt: skip
        if value is not None:
            defaults += [flag, str(value)]
    defaults += ["--no-verify"] if no_verify else []
    for flag, values in (("--setup", setup), ("--allow-net", allow_net)):
        for value in values or []:
            defaults += [flag, value]
    with reported():
        serve_acp(state_dir(state_dir_opt).resolve(), defaults)


DETACHED = "HARNESS_MCP_SERVING"
"""Set in the serving process a stdio server starts (see _detached)."""


def _detached() -> int:
    """Serve stdio from a process in a session of its own, on this process's stdin and stdout, and
    wait for it. A client ends its server when it closes stdin, by signalling its process group a few
    seconds later (the MCP SDK's and the agents' way): the session must still run the calls the client
    left, verify and end, so the process that does so is out of that group. This one's exit code is
    the session's when it ends first; a client that kills it stops nothing of the session."""
    import signal
    import subprocess

    child = subprocess.Popen(
        [sys.executable, "-c", "from harness.cli import main; main()", *sys.argv[1:]],
        env={**os.environ, DETACHED: "1"},
        start_new_session=True,
    )
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    try:
        return child.wait()
    except KeyboardInterrupt:  # Ctrl-C of a person at a terminal: the session ends as at a client's going
        child.send_signal(signal.SIGINT)
        return child.wait()


@mcp_app.command("recipe")
def recipe(
    agent: str = typer.Argument(..., metavar="claude-code|codex"),
    repo: Path = typer.Option(Path("."), "--repo", help="The repository the server serves."),
    image: str = typer.Option("py311", "--image", help="The sandbox image of its calls."),
    write: Path | None = typer.Option(
        None, "--write", help="claude-code: write its two files into this folder instead of printing them."
    ),
) -> None:
    """Print the settings that make an agent put every command through `harness mcp serve`."""
    from harness.environment.serving import RECIPES, claude_files

    if agent not in RECIPES:
        fail(f"no recipe for {agent!r}: claude-code or codex", ExitCode.USAGE)
    where = str(repo.expanduser().resolve())
    if write is None:
        sys.stdout.write(RECIPES[agent](where, image))
        return
    if agent != "claude-code":
        fail("--write is for claude-code's files; codex's recipe is one config.toml section", ExitCode.USAGE)
    with reported():
        write.mkdir(parents=True, exist_ok=True)
        for name, body in claude_files(where, image).items():
            (write / name).write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")
    err_console.print(f"wrote {write}/harness-mcp.json and {write}/harness-settings.json", markup=False)


@mcp_app.command("hook")
def hook() -> None:
    """The PreToolUse hook of the Claude Code recipe: any shell call is refused and sent to harness's
    run_command (reads the hook's JSON on stdin, answers on stdout)."""
    from harness.environment.serving import redirect_shell

    sys.stdout.write(redirect_shell(sys.stdin.read(1 << 20)))
