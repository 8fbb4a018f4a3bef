"""A workspace quota: the workspace is its own filesystem of that size (root only), so a call that
writes past it gets "No space left on device", the host's disk never sees more than the quota, the
model is told `workspace full`, and the session still snapshots, closes, reopens and goes away."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from harness.config import RunConfig
from harness.providers.scripted import ScriptedProvider
from harness.types import Message, ModelTurn, ToolCall, ToolSchema
from sandbox.docker.containers import DockerSandbox
from sandbox.errors import WorkspaceError
from sandbox.session import quota
from sandbox.session.session import Session, SessionConfig
from sandbox.spec import SandboxSpec
from tests.inprocess import fake_run

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="a loop-mounted workspace needs root (CI runs as root)")
QUOTA = 32 * 1024**2


@pytest.fixture(autouse=True)
def _no_mount_left(tmp_path: Path) -> Iterator[None]:
    """A test that fails midway leaves no workspace mounted under its folder (the session that would
    have unmounted it was never closed, and pytest's clean-up could not remove the folder)."""
    yield
    for line in Path("/proc/mounts").read_text().splitlines():
        point = line.split()[1]
        if point.startswith(f"{tmp_path}/"):
            quota.unmount(Path(point))


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.txt").write_text("a\n")
    return repo


@root_only
@pytest.mark.docker
@pytest.mark.timeout(180)
def test_a_call_cannot_write_past_the_quota(tmp_path: Path, docker_client, run_label: str) -> None:
    state = tmp_path / "state"
    session = Session.create(
        _repo(tmp_path), state, spec=SandboxSpec(timeout_s=60), config=SessionConfig(workspace_quota="32m")
    )
    workspace = session.workspace
    assert os.path.ismount(workspace) and not (workspace / "lost+found").exists()
    with DockerSandbox(docker_client, run_id=run_label, pool_size=0, session_id=session.id) as box:
        if box.remote:  # the call writes in the engine's volume: the quota holds when its change comes back
            with pytest.raises(WorkspaceError, match=r"does not fit in .* on this machine .*--workspace-quota"):
                box.run(["dd", "if=/dev/zero", "of=big", "bs=1M", "count=64"], workspace=workspace, spec=session.spec)
            assert os.stat(quota.image_file(workspace)).st_blocks * 512 <= QUOTA  # the host holds no more than this
            session.rollback(0)  # the last step stands: the half-brought change goes
            assert not (workspace / "big").exists() and (workspace / "a.txt").read_text() == "a\n"
            session.close()
            Session.open(state, session.id).delete()
            assert not workspace.exists() and not os.path.ismount(workspace)
            return
        flood = box.run(["dd", "if=/dev/zero", "of=big", "bs=1M", "count=64"], workspace=workspace, spec=session.spec)
        assert flood.exit_code != 0 and "No space left on device" in flood.stderr
        assert session.workspace_full() == QUOTA
        assert os.stat(quota.image_file(workspace)).st_blocks * 512 <= QUOTA  # the host holds no more than this
        step = session.commit_step("flooded")
        assert box.run(["rm", "big"], workspace=workspace, spec=session.spec).exit_code == 0
        assert session.workspace_full() is None
    session.commit_step("cleaned")
    session.close()
    assert not os.path.ismount(workspace)  # unmounted by the holder that mounted it
    again = Session.open(state, session.id)
    assert os.path.ismount(workspace) and (workspace / "a.txt").read_text() == "a\n"
    again.rollback(step.step)  # a rollback restores the flooded file into the bounded workspace
    again.close()
    Session.open(state, session.id).delete()
    assert not workspace.exists() and not os.path.ismount(workspace)


@root_only
def test_a_repository_larger_than_the_quota_is_refused(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    (repo / "data.bin").write_bytes(os.urandom(20 * 1024**2))
    with pytest.raises(WorkspaceError, match="does not fit in the workspace quota"):
        Session.create(repo, tmp_path / "state", spec=SandboxSpec(), config=SessionConfig(workspace_quota="16m"))
    state = tmp_path / "state"
    assert not state.exists() or [p.name for p in state.iterdir()] == [".objects"], "only the shared store"
    assert not state.exists() or list((state / ".objects" / "sessions").iterdir()) == [], "referenced by none"


def test_a_quota_is_refused_clearly_where_it_cannot_hold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(WorkspaceError, match="at least 16 MiB"):
        quota.check_possible(1024)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(WorkspaceError, match="needs root"):
        Session.create(_repo(tmp_path), tmp_path / "s", spec=SandboxSpec(), config=SessionConfig(workspace_quota="1g"))


class Seeing:
    """The scripted model, remembering what it was shown."""

    name = "seeing"

    def __init__(self, turns: list[ModelTurn]) -> None:
        self.inner, self.seen = ScriptedProvider(turns), []

    def complete(self, messages: Sequence[Message], tools: Sequence[ToolSchema], *, max_tokens: int, timeout_s=None):
        self.seen.append([m.content for m in messages])
        return self.inner.complete(messages, tools, max_tokens=max_tokens)


@root_only
def test_the_model_is_told_the_workspace_is_full(tmp_path: Path) -> None:
    def command(n: int, text: str) -> ModelTurn:
        call = ToolCall(id=f"c{n}", name="run_command", arguments={"command": text})
        return ModelTurn(text=f"step {n}", tool_calls=[call])

    model = Seeing(
        [
            command(1, "python3 -c \"open('big', 'wb').write(bytes(64 * 1024 * 1024))\""),
            command(2, "rm big"),
            ModelTurn(text="Removed the file.\nBiggest obstacle: the quota"),
        ]
    )
    result, _ = fake_run(
        _repo(tmp_path),
        tmp_path / "state",
        model,
        RunConfig(model="scripted:x", verify="true"),
        session_config=SessionConfig(workspace_quota="32m"),
    )
    assert result.outcome == "verified"
    after_flood, after_rm = model.seen[1][-1], model.seen[2][-1]
    assert "workspace full" in after_flood and "No space left on device" in after_flood
    assert "workspace full" not in after_rm
