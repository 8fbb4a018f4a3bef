"""A 4 GB sparse file (a few KB on disk) in the repository costs nothing in the session: it is left out
of the workspace, recorded in the session, and the model is told which file and why."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from harness import assembly
from harness.agent.outcome import RunState
from harness.assembly import Runtime
from harness.config import RunConfig
from harness.providers.scripted import ScriptedProvider, parse_script
from sandbox.fake import FakeSandbox
from sandbox.session.records import SessionConfig
from sandbox.session.session import Session
from sandbox.spec import SandboxSpec
from sandbox.tree import walk

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "calc"


def _disk_bytes(top: Path) -> int:
    return sum(os.lstat(os.path.join(folder, name)).st_blocks * 512 for folder, _, names in walk(top) for name in names)


def test_a_huge_sparse_file_is_left_out_and_the_model_is_told(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(EXAMPLE, repo)
    with open(repo / "disk.img", "wb") as handle:
        handle.truncate(4 * 1024**3)  # 4 GiB apparent, nothing allocated
    session = Session.create(repo, tmp_path / "state", spec=SandboxSpec())
    assert not (session.workspace / "disk.img").exists()
    assert session.info.left_out == ["disk.img (4.0 GiB, sparse, over the 512.0 MiB limit)"]
    assert _disk_bytes(session.dir) < 50 * 1024**2, "the session never paid for the file"
    reopened = Session.open(tmp_path / "state", session.id)
    assert reopened.info.left_out == session.info.left_out  # recorded in session.json
    config = RunConfig(model="scripted:x")
    state = RunState(session_id=session.id, task="Fix calc.", model="scripted:x", snapshot_step=0)
    agent = assembly.build_agent(
        config=config,
        session=reopened,
        sandbox=FakeSandbox(),
        provider=ScriptedProvider(parse_script("turns:\n  - text: done\n")),
        state=state,
        runtime=Runtime(run_id="test"),
    )
    task = agent.context.messages()[1].content
    assert "Not in your workspace" in task and "disk.img (4.0 GiB, sparse" in task


def test_the_limit_is_a_session_setting(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "data.bin").write_bytes(b"x" * 5000)
    small = Session.create(repo, tmp_path / "a", spec=SandboxSpec(), config=SessionConfig(max_file_bytes=4096))
    assert small.info.left_out and not (small.workspace / "data.bin").exists()
    every = Session.create(repo, tmp_path / "b", spec=SandboxSpec(), config=SessionConfig(max_file_bytes=None))
    assert every.info.left_out == [] and (every.workspace / "data.bin").stat().st_size == 5000
