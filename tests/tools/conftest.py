"""Fixtures of the tool suite: one warm DockerSandbox per module, fresh workspaces per test."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from sandbox.docker import images
from sandbox.docker.containers import DockerSandbox
from sandbox.owner import hand_over


@pytest.fixture(scope="session")
def tools_image(docker_client: docker.DockerClient) -> str:
    """py311, built if it is missing or stale (a no-op when current)."""
    images.build(docker_client, "py311")
    return "py311"


@pytest.fixture(scope="module")
def box(docker_client: docker.DockerClient, run_label: str, tools_image: str) -> Iterator[DockerSandbox]:
    sandbox = DockerSandbox(docker_client, run_id=run_label, pool_size=1)
    yield sandbox
    sandbox.close()


@pytest.fixture
def repo_ws(tmp_path: Path) -> Path:
    """A small git repository (tests/ read-only by default) owned by the container user."""
    ws = tmp_path / "workspace"
    (ws / "calc").mkdir(parents=True)
    (ws / "tests").mkdir()
    (ws / "calc" / "__init__.py").write_text("from calc.ops import add\n")
    (ws / "calc" / "ops.py").write_text("def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n")
    (ws / "tests" / "test_ops.py").write_text(
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_zero():\n    assert add(0, 0) == 0\n"
    )
    (ws / ".gitignore").write_text("*.log\n")
    (ws / "debug.log").write_text("noise\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@e", "-c", "init.defaultBranch=main"]
    subprocess.run([*git, "init", "-q"], cwd=ws, check=True)
    subprocess.run([*git, "add", "-A"], cwd=ws, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "initial import"], cwd=ws, check=True)
    hand_over(ws)
    return ws
