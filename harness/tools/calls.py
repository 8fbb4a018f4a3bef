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
