"""Fixtures of the sandbox suite: the harness image, sandboxes under contract, fresh workspaces."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from sandbox.docker.containers import DockerSandbox
from sandbox.fake import FakeSandbox
from sandbox.owner import hand_over
from sandbox.spec import SandboxSpec


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """An empty workspace the container user may write."""
    path = tmp_path / "workspace"
    path.mkdir()
    (path / "hello.txt").write_text("hello\n")
    hand_over(path)
    return path


@pytest.fixture
def test_label() -> dict[str, str]:
    """A label unique to one test, to find exactly the containers it made."""
    return {"harness.test": uuid.uuid4().hex[:12]}


@pytest.fixture
def docker_sandbox(docker_client: docker.DockerClient, run_label: str, sandbox_image: str) -> Iterator[DockerSandbox]:
    box = DockerSandbox(docker_client, run_id=run_label, pool_size=1)
    yield box
    box.close()


@pytest.fixture(params=[pytest.param("docker", marks=pytest.mark.docker), "fake"])
def any_sandbox(request: pytest.FixtureRequest) -> Iterator[object]:
    """The contract subset both implementations must pass."""
    if request.param == "docker":
        yield request.getfixturevalue("docker_sandbox")
    else:
        yield FakeSandbox()


@pytest.fixture
def spec(test_label: dict[str, str]) -> SandboxSpec:
    return SandboxSpec(image="py311", timeout_s=30, labels=test_label)
