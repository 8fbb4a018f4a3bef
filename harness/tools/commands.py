"""The command tools: run a program (the parsed argv, never a shell), run the tests, and git's read-only
subcommands. Each docstring is what the model reads."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from harness.errors import ToolError
from harness.policy.gate import Rejected, parse_command
from harness.tools.calls import call_runner, check_envelope
from harness.tools.registry import Outcome, ToolContext, tool

GIT = (
    "git",
    "-c",
    "core.fsmonitor=",
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "safe.directory=/workspace",
    "-c",
    "core.pager=cat",
    "--no-pager",
)
"""git inside the container never runs hooks, fsmonitor or a pager configured by the repository."""


@tool("exec", command="command")
def run_command(
    ctx: ToolContext,
    command: Annotated[str, Field(min_length=1, max_length=4000)],
    timeout: Annotated[int | None, Field(ge=1, le=3600)] = None,
) -> Outcome:
    """Run one program in a fresh sandbox container (workspace as the working directory, no network).

    The command line is split like a shell would (quotes work) but NO shell runs it: pipes,
    redirection, `;`, `&&`, `$VAR` and globs are not interpreted (operators are refused). Only the
    project's allowed programs may run; git only with status, diff, log, show, ls-files, grep, blame.
    The result starts with the exit code and status; long output keeps its head and tail.
    Use it to run a script, build step or check that no other tool covers. Do NOT use it to run
    the test suite (use run_tests), read files (read_file), search (search_code) or edit (apply_patch).

    Args:
      command: the program and its arguments, e.g. `python3 -m mypy src` (up to 4000 chars).
      timeout: seconds before the command is killed, 1-3600; never beyond the session's limit.
    """
    argv = parse_command(command)
    if argv[0] == "git":
        argv = [*GIT, *[a for a in argv[1:] if a != "--no-pager"]]
    if timeout is not None and timeout < ctx.call_spec().timeout_s:
        argv = ["timeout", "-k", "2", f"{timeout}s", *argv]
    envelope = ctx.sandbox.run(
        argv, workspace=ctx.workspace, spec=ctx.call_spec(), mounts=ctx.mounts, commit_changes=ctx.commit_changes
    )
    asked = timeout is not None and argv[:3] == ["timeout", "-k", "2"]
    # 124: TERM ended it; 137 after the whole timeout: it trapped TERM and the KILL that follows did.
    ran_out = envelope.exit_code == 124 or (envelope.exit_code == 137 and envelope.duration_ms >= (timeout or 0) * 1000)
    if asked and ran_out and envelope.status not in ("timeout", "oom_killed"):
        raise ToolError(
            "timeout",
            f"the command was killed after {timeout}s (the timeout you asked for)\n{envelope.render()}",
            envelope,
        )
    check_envelope(envelope, "the command")
    return Outcome(envelope.render(), envelope, wrote=True)


@tool("exec", paths=(), targets=lambda a: [s.split("::")[0] for s in (a.selector or "").split()])
def run_tests(
    ctx: ToolContext,
    selector: Annotated[str | None, Field(max_length=2000, pattern=r"^\s*[^-\s][^\s]*(\s+[^-\s][^\s]*)*\s*$")] = None,
) -> Outcome:
    """Run the session's configured test command and report only what failed.

    The result starts with the exit code, then one line per failing test (`FAILED <test id> at
    <file:line>: <message>`) and the summary line (e.g. `1 failed, 12 passed in 0.40s`).
    Use it to check your changes, and to reproduce a failure before fixing it. Do NOT use it to run
    other programs (use run_command); test files may be read-only in this session.

    Args:
      selector: optional pytest node ids or paths, space-separated (e.g. `tests/test_x.py::test_y`);
        no options. Default: the whole configured suite.
    """
    command = ctx.test_command
    if not command:
        raise ToolError(
            "execution_error", "no test command is configured for this session. Use run_command to run tests."
        )
    argv = list(command) if not isinstance(command, str) else _test_argv(command)
    answer, envelope = call_runner(ctx, "run_tests", {"argv": argv, "selectors": (selector or "").split()}, commit=True)
    return Outcome(envelope.headline() + "\n" + answer["text"], envelope)


def _test_argv(command: str) -> list[str]:
    """The session's test command (trusted config, not model input); shell syntax runs under sh -c.

    Model-chosen selectors are appended as separate argv items ("$@"), never shell-interpreted.
    """
    try:
        return parse_command(command)
    except Rejected:
        return ["sh", "-c", command + ' "$@"', "sh"]


def _git(ctx: ToolContext, args: list[str], what: str) -> Outcome:
    envelope = ctx.sandbox.run([*GIT, *args], workspace=ctx.workspace, spec=ctx.call_spec(), mounts=ctx.mounts)
    check_envelope(envelope, what)
    if envelope.exit_code != 0:
        raise ToolError(
            "execution_error", f"{what} failed (exit {envelope.exit_code}): {envelope.stderr.strip()[:400]}", envelope
        )
    if not envelope.stdout.strip():
        return Outcome(f"OK {what}: no output", envelope)
    return Outcome(envelope.render(), envelope)


@tool("read")
def git_status(ctx: ToolContext) -> Outcome:
    """Show `git status --short --branch` of the workspace (read-only).

    Use it to see which files you changed. Do NOT use it to see the changes themselves (use git_diff).
    """
    return _git(ctx, ["status", "--short", "--branch", "--untracked-files=all"], "git status")


@tool("read", paths=("path",))
def git_diff(ctx: ToolContext, path: str | None = None, staged: bool = False) -> Outcome:
    """Show the uncommitted changes of the workspace as a unified diff (read-only; long output keeps head and tail).

    Use it to review your edits before finishing. Do NOT use it for history (use git_log).

    Args:
      path: limit the diff to this file or directory, relative to the workspace root.
      staged: show staged changes (`--cached`) instead of unstaged ones (default false).
    """
    args = ["diff", "--no-ext-diff", "--no-textconv", "--no-color", *(["--cached"] if staged else [])]
    return _git(ctx, [*args, "--", path] if path else args, "git diff")


@tool("read", paths=("path",))
def git_log(ctx: ToolContext, max_count: Annotated[int, Field(ge=1, le=100)] = 20, path: str | None = None) -> Outcome:
    """Show recent commits, one per line: short hash, date, author, subject (read-only).

    Use it to understand recent history of the repository or a file. Do NOT use it for current
    uncommitted changes (use git_diff or git_status).

    Args:
      max_count: how many commits, 1-100 (default 20).
      path: only commits touching this file or directory, relative to the workspace root.
    """
    args = ["log", f"--max-count={max_count}", "--no-color", "--date=short", "--format=%h %ad %an %s"]
    return _git(ctx, [*args, "--", path] if path else args, "git log")
