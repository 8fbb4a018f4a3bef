"""What every built-in tool shares: the mounts of a tool container, running the in-container runner,
and turning a timed-out or flooded envelope into the model-visible error kind."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from harness.errors import ToolError
from harness.tools import runner
from harness.tools.launch import RUNNER_ARGV, runner_mounts
from harness.tools.registry import ToolContext
from sandbox.envelope import Envelope
from sandbox.spec import Mount

RUNNER_STDOUT_CAP = 512 * 1024
"""Runner answers are sized by the runner itself (max_bytes); the sandbox cap must not cut the JSON."""
TEXT_BUDGET = 24 * 1024
"""Bytes of file text one runner answer may carry (about 6k tokens)."""
ARGV_LIMIT = 96 * 1024


def context_mounts(workspace: Path, read_only_paths: Sequence[str]) -> list[Mount]:
    """The runner and its bytecode (read-only) plus each plain read-only directory or file, mounted
    read-only over itself, so no command can change them either (a mounted file cannot be written,
    replaced by a rename or removed).

    Only literal patterns (`tests/`, `docs/spec/`, `tests/test_x.py`) are mounted; glob patterns are
    enforced by the gate and the runner, and for commands by the check after each step (see
    harness.agent.guard). A path that is a symlink (or under one) is never mounted, because the engine would
    follow it on the host.
    """
    return [*runner_mounts(), *read_only_mounts(workspace, read_only_paths)]


def read_only_mounts(workspace: Path, read_only_paths: Sequence[str]) -> list[Mount]:
    """Each plain read-only directory or file of the workspace mounted read-only over itself (see
    context_mounts; a hosted agent's own container gets these too)."""
    mounts = []
    for rel in literal_paths(read_only_paths):
        kind = plain_kind(Path(workspace), rel)
        if kind is not None:
            mounts.append(Mount(source=Path(workspace) / rel, target=f"/workspace/{rel}", read_only=True))
    return mounts


def literal_paths(patterns: Sequence[str]) -> list[str]:
    """The patterns that name one path (no glob characters, nothing climbing out), as relative paths."""
    found = []
    for pattern in patterns:
        rel = pattern.strip("/")
        if rel and not any(ch in rel for ch in "*?[!\\") and ".." not in rel.split("/"):
            found.append(rel)
    return found


def plain_kind(workspace: Path, rel: str) -> str | None:
    """`dir` or `file` when rel is a directory or a regular file reached through plain directories
    only (no symlink anywhere on the way), else None."""
    current = workspace
    parts = rel.split("/")
    for index, part in enumerate(parts):
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except OSError:
            return None
        if stat.S_ISDIR(mode):
            continue
        return "file" if stat.S_ISREG(mode) and index == len(parts) - 1 else None
    return "dir"


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
        "generated": ctx.gate.config.generated_paths,
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
