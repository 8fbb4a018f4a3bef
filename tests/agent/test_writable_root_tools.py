"""A writable-root session through the run's tool wiring: calls commit the container filesystem, the
next call runs on the committed image (no restart of the run), and the image is tagged for the step."""

from __future__ import annotations

from pathlib import Path

import docker
import pytest

from harness import assembly
from harness.config import RunConfig
from harness.types import ToolCall
from sandbox.docker import images
from sandbox.docker.containers import DockerSandbox
from sandbox.docker.step_images import EngineStepImages
from sandbox.session.session import Session, SessionConfig
from sandbox.spec import SandboxSpec

pytestmark = [pytest.mark.docker, pytest.mark.timeout(180)]


def test_tool_calls_follow_the_committed_image(
    tmp_path: Path, docker_client: docker.DockerClient, run_label: str
) -> None:
    images.build(docker_client, "py311")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.txt").write_text("a\n")
    session = Session.create(
        repo,
        tmp_path / "state",
        spec=SandboxSpec(image="py311", timeout_s=30),
        config=SessionConfig(writable_root=True),
        images=EngineStepImages(docker_client),
    )
    tools = assembly.registry()
    with session, DockerSandbox(docker_client, run_id=run_label, pool_size=0, session_id=session.id) as box:
        ctx = assembly.tool_context(RunConfig(), session, box)

        def run(command: str):
            return tools.execute(ToolCall(id=command, name="run_command", arguments={"command": command}), ctx)

        touched = run("touch /var/tmp/x")
        assert touched.envelope is not None and touched.envelope.committed_image, touched.text
        session.commit_step("touch", committed_image=touched.envelope.committed_image)
        assert f"harness-session/{session.id}:step-1" in docker_client.images.get(session.image).tags
        assert run("test -e /var/tmp/x").envelope.exit_code == 0, "the next call runs on the step's image"
        session.rollback(0)
        assert run("test -e /var/tmp/x").envelope.exit_code == 1, "rollback restores the image of step 0"


def test_run_flag_writable_root_commits_each_changed_step(harness, script, docker_client: docker.DockerClient) -> None:
    from tests.agent.conftest import turn

    model = script(
        turn("", ("run_command", {"command": "touch /var/tmp/built"})),
        turn("", ("run_command", {"command": "test -e /var/tmp/built"})),
        turn("Checked the artifact survives into the next step."),
    )
    ran = harness.run(model, "--writable-root", session="wr", verify="test -e /var/tmp/built")
    assert ran.code == 0, ran.stdout + ran.stderr
    result = ran.json()
    assert result["outcome"] == "verified"
    session = Session.open(harness.state_dir, "wr")
    images_seen = {record.image for record in session.records}
    assert len(images_seen) == 2, "step 0's image plus the one committed after the touch"
    assert harness("session", "rm", "wr").code == 0
