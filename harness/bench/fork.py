"""`harness bench fork`: what it costs to fork a session, against making fresh sessions of the same
repository, side by side in one run. A scripted run on a generated repository (default 10,000
files) is the parent; 8 forks of it after its second step (`harness fork`'s own preparation: the
steps shared, its trajectory and state written, nothing of the workspace copied) are timed and their
disk counted; 8 fresh sessions of the repository (a workspace copy and an import snapshot each, the
objects shared as any session's are) are the baseline. Then one fork's workspace is made from the
store, as its first tool call would need it."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import yaml
from pydantic import BaseModel

from harness import assembly
from harness.bench.batch import _disk
from harness.bench.measure import ratio
from harness.bench.snapshot import generate
from harness.config import RunConfig
from sandbox.session.session import Session
from sandbox.spec import SandboxSpec


class ForkBench(BaseModel):
    """Result of `harness bench fork`."""

    files: int
    repo_bytes: int
    forks: int
    fork_s: float
    """Making all the forks (each ready to run)."""
    fresh_s: float
    """Making as many fresh sessions of the repository."""
    fork_bytes: int
    fresh_bytes: int
    disk_over_fresh: float
    """fork_bytes over fresh_bytes (target: at most 0.1)."""
    time_over_fresh: float
    first_workspace_s: float
    """Making one fork's workspace from the store (what its first tool call waits for)."""


def _script(folder: Path) -> Path:
    turns = [
        {"text": "Adding a note.", "tool_calls": [{"name": "write_file", "arguments": {"path": "NOTES.md", "content": "one\n"}}]},
        {"text": "Another.", "tool_calls": [{"name": "write_file", "arguments": {"path": "pkg0/extra.py", "content": "X = 1\n"}}]},
        {"text": "Done."},
    ]  # fmt: skip
    path = folder / "parent.yaml"
    path.write_text(yaml.safe_dump({"turns": turns}))
    return path


def measure(*, run_id: str, docker_host: str | None, files: int = 10_000, forks: int = 8) -> ForkBench:
    with tempfile.TemporaryDirectory(prefix="harness-bench-fork-") as tmp:
        base = Path(tmp)
        repo = base / "repo"
        generate(repo, files, 2_000)
        sessions = base / "state"
        runtime = assembly.Runtime(run_id=run_id, docker_host=docker_host)
        config = RunConfig(model=f"scripted:{_script(base)}", verify=None, detect_verify=False)
        assembly.start_run(repo, "Add notes.", config, sessions, runtime, "parent")
        before = _disk(sessions)
        started = time.monotonic()
        for n in range(forks):
            assembly.fork_session(sessions / "parent", 2, sessions, runtime, f"fork{n}", {"model": config.model})
        fork_s = time.monotonic() - started
        fork_bytes = _disk(sessions) - before
        made = time.monotonic()
        Session.open(sessions, "fork0").workspace  # noqa: B018 - made from the store on first use
        first_workspace_s = time.monotonic() - made
        fresh = base / "fresh"
        fresh.mkdir()
        started = time.monotonic()
        for n in range(forks):
            Session.create(repo, fresh, spec=SandboxSpec(), session_id=f"fresh{n}").close()
        fresh_s = time.monotonic() - started
        fresh_bytes = _disk(fresh)
        repo_bytes = _disk(repo)
    return ForkBench(
        files=files,
        repo_bytes=repo_bytes,
        forks=forks,
        fork_s=round(fork_s, 3),
        fresh_s=round(fresh_s, 3),
        fork_bytes=fork_bytes,
        fresh_bytes=fresh_bytes,
        disk_over_fresh=round(fork_bytes / fresh_bytes, 4) if fresh_bytes else 0.0,
        time_over_fresh=ratio(fork_s, fresh_s),
        first_workspace_s=round(first_workspace_s, 3),
    )
