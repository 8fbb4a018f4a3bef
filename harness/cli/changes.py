"""`harness diff` and `harness export` (a patch): a session's change read from its snapshots without
opening the session (`assembly.sessions.open_snapshots`): no model is built, no workspace or engine
is touched. The full command line and the quick path (`reads`) print through these functions."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from harness.errors import UsageError

if TYPE_CHECKING:
    from rich.console import Console

    from sandbox.snapshot.diff import SnapshotDiff


def diff(sessions: Path, session_id: str, from_step: int = 0, to_step: int | None = None) -> SnapshotDiff:
    """The change between the states after two steps, as `harness show` numbers them."""
    from harness.assembly.sessions import open_snapshots
    from harness.steps import StepMap

    snapshots = open_snapshots(sessions, session_id)
    steps = StepMap.of(Path(sessions) / session_id, session_id, snapshots.step)
    return snapshots.diff(steps.snapshot(from_step), None if to_step is None else steps.snapshot(to_step))


def print_diff(console: Console, result: SnapshotDiff) -> None:
    """The unified diff (byte for byte when piped: a patch to apply; its control characters spelled
    out on a terminal), then binary, mode and empty-directory changes."""
    if result.text and not console.is_terminal:
        console.file.write(result.text if result.text.endswith("\n") else result.text + "\n")
    elif result.text:
        console.out(result.text.rstrip("\n"), highlight=False)
    for path in result.binary:
        console.print(f"binary: {path}", markup=False)
    for change in result.mode_changes:
        console.print(f"mode: {change.path} {change.old_mode:o} -> {change.new_mode:o}", markup=False)
    for change in result.changes:
        if change.path.endswith("/") and change.kind in ("added", "deleted"):
            console.print(f"empty directory {change.kind}: {change.path}", markup=False)


def export(sessions: Path, session_id: str, output: Path | None, *, check: bool) -> str:
    """The session's change as a patch for `git apply` on the original repository, written to output
    when given (even when it no longer applies: the check comes after, and fails the command)."""
    from harness.assembly.sessions import open_snapshots

    snapshots = open_snapshots(sessions, session_id)
    patch = snapshots.export_patch()
    if not patch.strip():
        raise UsageError(
            f"session {session_id} changed nothing (its step {snapshots.step} holds what it imported): "
            "there is no patch to export; nothing was written"
        )
    if output is not None:
        output.write_bytes(patch.encode("utf-8", "surrogateescape"))
    if check:
        snapshots.check_patch(patch)
    return patch


def print_patch(patch: str) -> None:
    """The patch on standard output, byte for byte (a path's undecodable bytes as they were)."""
    sys.stdout.flush()
    binary = getattr(sys.stdout, "buffer", None)
    if binary is None:  # a stream without bytes under it (a test's capture): the text
        sys.stdout.write(patch)
        return
    binary.write(patch.encode("utf-8", "surrogateescape"))
    binary.flush()


def say_written(output: Path) -> None:
    """`wrote FILE` on standard error, its control characters made visible."""
    from harness.cli.terminal import visible

    print(f"wrote {visible(str(output))}", file=sys.stderr)
