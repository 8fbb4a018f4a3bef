"""The public Python API, used exactly as the README shows: `harness.run`, `resume`, `replay` and the
types they return, nothing else from harness. A real engine, the scripted example model."""

from __future__ import annotations

import shutil
from pathlib import Path

import docker
import pytest

import harness

ROOT = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]


def _containers(client: docker.DockerClient, run_label: str) -> list[str]:
    return [
        c.id
        for c in client.containers.list(all=True, filters={"label": f"harness.run={run_label}"}, ignore_removed=True)
    ]


def test_run_fixes_the_example_and_leaves_nothing_behind(tmp_path: Path, docker_client, run_label: str) -> None:
    repo = tmp_path / "calc"
    shutil.copytree(ROOT / "examples" / "calc", repo)
    own = f"{run_label}-api"
    result = harness.run(
        repo,
        "Fix the failing tests in calc.",
        model=f"scripted:{ROOT / 'examples' / 'calc-fix.yaml'}",
        verify="python3 -m pytest -q",
        state_dir=tmp_path / "state",
        session_id="api-demo",
        run_id=own,
        max_steps=10,
    )
    assert isinstance(result, harness.RunResult)
    assert (result.outcome, result.exit_code, result.verified) == ("verified", 0, True)
    assert result.patch is not None and "+    return a + b" in Path(result.patch).read_text()
    assert "return a - b" in (repo / "calc" / "ops.py").read_text(), "the user's repository is never written"
    assert _containers(docker_client, own) == []
    replayed = harness.replay("api-demo", state_dir=tmp_path / "state", run_id=own)
    assert replayed.diverged == 0 and replayed.steps
    assert _containers(docker_client, own) == []


def test_errors_are_typed_and_nothing_is_created(tmp_path: Path) -> None:
    from harness.errors import ConfigError, HarnessError, NotFoundError, SessionError

    with pytest.raises(NotFoundError):
        harness.run(tmp_path / "missing", "task", model="scripted:x", state_dir=tmp_path / "state")
    with pytest.raises(ConfigError) as raised:
        harness.run(tmp_path, "task", model="nonsense", state_dir=tmp_path / "state")
    assert isinstance(raised.value, HarnessError) and raised.value.exit_code == 78
    with pytest.raises(SessionError):
        harness.resume("nope", state_dir=tmp_path / "state")
    assert not (tmp_path / "state").exists() or not any((tmp_path / "state").iterdir())


def test_a_finished_run_cannot_be_resumed(tmp_path: Path, docker_client, run_label: str) -> None:
    from harness.errors import StateError

    own = f"{run_label}-api2"
    done = harness.run(
        ROOT / "examples" / "calc",
        "Fix the failing tests in calc.",
        model=f"scripted:{ROOT / 'examples' / 'calc-fix.yaml'}",
        verify="python3 -m pytest -q",
        state_dir=tmp_path,
        run_id=own,
    )
    assert done.outcome == "verified"
    with pytest.raises(StateError, match="already ended as verified"):
        harness.resume(done.session_id, state_dir=tmp_path, run_id=own)
