"""The built-in tool menu. Each tool is a typed function; its docstring is what the model reads.

File tools run `runner.py` inside the container (mounted read-only at RUNNER_TARGET), so symlinks
resolve inside the container. `run_command` runs the parsed argv directly, never through a shell.
There is no commit, push or branch tool: those stay with a person.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from harness.errors import ToolError
from harness.gate import Rejected, parse_command
from harness.tools import runner
from harness.tools.launch import RUNNER_ARGV, RUNNER_TARGET, runner_mounts  # noqa: F401 (RUNNER_TARGET re-exported)
from harness.tools.registry import Outcome, Registry, ToolContext, tool
from sandbox.envelope import Envelope
from sandbox.spec import Mount

RUNNER_STDOUT_CAP = 512 * 1024
"""Runner answers are sized by the runner itself (max_bytes); the sandbox cap must not cut the JSON."""
TEXT_BUDGET = 24 * 1024
"""Bytes of file text one runner answer may carry (about 6k tokens)."""
ARGV_LIMIT = 96 * 1024
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


def context_mounts(workspace: Path, read_only_paths: Sequence[str]) -> list[Mount]:
    """The runner and its bytecode (read-only) plus each plain read-only directory, mounted read-only over itself.

    Only literal top-level directory patterns (`tests/`, `docs/spec/`) are mounted; glob patterns are
    enforced by the gate and the runner only. A path that is a symlink (or under one) is never
    mounted, because the engine would follow it on the host.
    """
    mounts = runner_mounts()
    for pattern in read_only_paths:
        rel = pattern.strip("/")
        if not rel or any(ch in rel for ch in "*?[!\\") or ".." in rel.split("/"):
            continue
        if _plain_dir(Path(workspace), rel):
            mounts.append(Mount(source=Path(workspace) / rel, target=f"/workspace/{rel}", read_only=True))
    return mounts


def _plain_dir(workspace: Path, rel: str) -> bool:
    current = workspace
    for part in rel.split("/"):
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except OSError:
            return False
        if not stat.S_ISDIR(mode):
            return False
    return True


def call_runner(
    ctx: ToolContext, op: str, args: dict[str, Any], commit: bool = False
) -> tuple[dict[str, Any], Envelope]:
    """One runner request in a fresh container (commit: it may change the root filesystem);
    model-visible failures raise ToolError."""
    base = ctx.call_spec()
    request = {
        "op": op,
        "root": base.workdir,
        "max_bytes": TEXT_BUDGET,
        "read_only": ctx.gate.config.read_only_paths,
        "protected": ctx.gate.config.protected_paths,
        "args": args,
    }
    items = runner.encode_request(request)
    spec = base if base.stdout_cap >= RUNNER_STDOUT_CAP else base.model_copy(update={"stdout_cap": RUNNER_STDOUT_CAP})
    if sum(len(i.encode()) for i in items) < ARGV_LIMIT and not any("\x00" in i for i in items):
        argv, stdin = [*RUNNER_ARGV, *items], None
    else:
        argv, stdin = [*RUNNER_ARGV, "--stdin"], json.dumps(request).encode()
    envelope = ctx.sandbox.run(
        argv,
        workspace=ctx.workspace,
        spec=spec,
        mounts=ctx.mounts,
        stdin=stdin,
        commit_changes=commit and ctx.commit_changes,
    )
    check_envelope(envelope, op)
    answer = runner.parse_answer(envelope.stdout)
    if answer is None:
        raise ToolError(
            "execution_error",
            f"the {op} helper failed inside the container "
            f"(exit {envelope.exit_code}): {envelope.stderr.strip()[-300:]}",
            envelope,
        )
    if not answer["ok"]:
        raise ToolError(answer["kind"] or "execution_error", answer["text"], envelope)
    return answer, envelope


def check_envelope(envelope: Envelope, what: str) -> None:
    """Timeouts and output floods become their error kinds (with the envelope kept)."""
    if envelope.status == "timeout":
        raise ToolError(
            "timeout",
            f"{what} was killed after {envelope.limits.timeout_s:g}s (wall-clock limit)\n{envelope.render()}",
            envelope,
        )
    if envelope.status == "output_limit":
        raise ToolError(
            "output_limit", f"{what} printed more than the output ceiling and was killed\n{envelope.render()}", envelope
        )


Line = Annotated[int, Field(ge=1, le=10_000_000)]


@tool("read", paths=("path",))
def read_file(ctx: ToolContext, path: str, start_line: Line | None = None, end_line: Line | None = None) -> Outcome:
    """Read a text file of the workspace, with numbered lines (at most 800 lines per call).

    Output starts `OK read_file <path>: lines a-b of N`; when more remains it ends with
    `[TRUNCATED: lines a-b of N shown; continue with start_line=b+1]`. Binary files are refused.
    Use it to look at code before editing it, and to re-read a region after an edit.
    Do NOT use it to find where something is defined (use search_code) or to see what files exist
    (use list_dir).

    Args:
      path: file path relative to the workspace root (e.g. `src/app.py`); must stay inside it.
      start_line: first line to show, 1-based (default 1).
      end_line: last line to show, inclusive (default: start_line + 799 or the end of the file).
    """
    answer, envelope = call_runner(ctx, "read_file", {"path": path, "start_line": start_line, "end_line": end_line})
    return Outcome(answer["text"], envelope)


@tool("read", paths=("path",))
def list_dir(ctx: ToolContext, path: str = ".", depth: Annotated[int, Field(ge=1, le=5)] = 2) -> Outcome:
    """List the files and directories under a workspace directory, as an indented tree.

    Skips .git, node_modules, __pycache__, dist, build and other generated output, and anything the
    repository's .gitignore files ignore. At most 400 entries, then a `[TRUNCATED: ...]` marker.
    Directories end with `/`; symlinks show their target.
    Use it to get oriented in a repository or a directory. Do NOT use it to find text inside files
    (use search_code) or to read a file (use read_file).

    Args:
      path: directory relative to the workspace root (default `.`, the root).
      depth: how many directory levels to show, 1-5 (default 2).
    """
    answer, envelope = call_runner(ctx, "list_dir", {"path": path, "depth": depth})
    return Outcome(answer["text"], envelope)


@tool("read", paths=("path",))
def search_code(
    ctx: ToolContext,
    pattern: Annotated[str, Field(min_length=1, max_length=500)],
    path: str = ".",
    glob: Annotated[str | None, Field(max_length=200)] = None,
) -> Outcome:
    """Search file contents with ripgrep; prints `file:line:text` for each match, sorted by path.

    At most 50 matches per file and 200 in total, then a `[TRUNCATED: ...]` marker. Ignored files
    (.gitignore), hidden files and binary files are skipped.
    Use it to find definitions, call sites, error messages or config keys. Do NOT use it to list
    files (use list_dir) or to read a whole file (use read_file).

    Args:
      pattern: a Rust-syntax regular expression (escape `( [ { .` to match them literally), 1-500 chars.
      path: file or directory to search, relative to the workspace root (default `.`).
      glob: optional file filter such as `*.py` or `src/**/*.ts` (up to 200 chars).
    """
    answer, envelope = call_runner(ctx, "search", {"pattern": pattern, "path": path, "glob": glob})
    return Outcome(answer["text"], envelope)


def _patch_targets(args: Any) -> list[str]:
    if args.diff:
        if args.old_text is not None or args.new_text is not None:
            raise ToolError("invalid_arguments", "give either diff or old_text/new_text, not both")
        try:
            return runner.diff_paths(args.diff)
        except runner.Failure as failure:
            raise ToolError(failure.kind, failure.text) from None
    if args.path is None or args.old_text is None or args.new_text is None:
        raise ToolError("invalid_arguments", "apply_patch needs path, old_text and new_text (or a unified diff)")
    return []


@tool("write", paths=("path",), targets=_patch_targets)
def apply_patch(
    ctx: ToolContext,
    path: str | None = None,
    old_text: str | None = None,
    new_text: str | None = None,
    diff: Annotated[str | None, Field(max_length=500_000)] = None,
) -> Outcome:
    """Edit an existing file by replacing one exact piece of text, or apply a unified diff.

    With path/old_text/new_text: old_text must occur exactly once in the file (whitespace and
    indentation included); zero matches and several matches are different errors. With diff: a
    unified diff (`--- a/f`, `+++ b/f`, `@@` hunks) for multi-hunk or multi-file edits; it may also
    create (`--- /dev/null`), delete (`+++ /dev/null`, every line removed) or rename (git's
    `rename from`/`rename to`) files; a hunk must match the file exactly; all files change or none.
    Use it for every change to an existing file. Do NOT use it to create a lone new file (use
    write_file) or to rewrite a file wholesale (use write_file with overwrite=true).

    Args:
      path: the file to edit, relative to the workspace root (not used with diff).
      old_text: the exact current text to replace; include enough lines to be unique.
      new_text: the replacement text (may be empty to delete old_text).
      diff: a unified diff instead of path/old_text/new_text (up to 500 kB).
    """
    args = {"diff": diff} if diff else {"path": path, "old_text": old_text, "new_text": new_text}
    answer, envelope = call_runner(ctx, "apply_patch", args)
    return Outcome(answer["text"], envelope, wrote=True)


@tool("write", paths=("path",))
def write_file(
    ctx: ToolContext, path: str, content: Annotated[str, Field(max_length=1_000_000)], overwrite: bool = False
) -> Outcome:
    """Create a new file with the given content (missing parent directories are created).

    Refuses to replace an existing file unless overwrite is true.
    Use it for new files. Do NOT use it to change part of an existing file (use apply_patch: it
    cannot clobber text you have not seen).

    Args:
      path: the new file, relative to the workspace root.
      content: the complete file content, UTF-8 text up to 1,000,000 characters.
      overwrite: replace the file if it already exists (default false).
    """
    answer, envelope = call_runner(ctx, "write_file", {"path": path, "content": content, "overwrite": overwrite})
    return Outcome(answer["text"], envelope, wrote=True)


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
    if argv[0] == "timeout" and envelope.exit_code == 124 and envelope.status != "timeout":
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


BUILTIN_TOOLS = (
    read_file,
    list_dir,
    search_code,
    apply_patch,
    write_file,
    run_command,
    run_tests,
    git_status,
    git_diff,
    git_log,
)


def make_context(
    sandbox: Any,
    workspace: Path,
    spec: Any,
    gate: Any,
    approver: Any = None,
    test_command: list[str] | str | None = None,
    commit_changes: bool = False,
) -> ToolContext:
    """A ToolContext with the runner and the read-only areas mounted (the only way mounts are set)."""
    return ToolContext(
        sandbox=sandbox,
        workspace=Path(workspace),
        spec=spec,
        gate=gate,
        approver=approver,
        mounts=tuple(context_mounts(Path(workspace), gate.config.read_only_paths)),
        test_command=test_command,
        commit_changes=commit_changes,
    )


def default_registry() -> Registry:
    """The registry of every built-in tool."""
    return Registry(BUILTIN_TOOLS)
