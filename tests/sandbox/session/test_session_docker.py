"""Sessions on the real engine: setup from wheels in the repository, its cache, network mode of
setup, and --writable-root (container state follows steps and rollbacks)."""

from __future__ import annotations

import base64
import hashlib
import re
import time
import zipfile
from pathlib import Path

import docker
import pytest

from sandbox.docker.containers import DockerSandbox
from sandbox.docker.ids import unqualified
from sandbox.docker.prune import find_session_leftovers, session_images
from sandbox.docker.step_images import EngineStepImages
from sandbox.errors import SetupError
from sandbox.session.session import Session, SessionConfig
from sandbox.session.setup import make_prepare
from sandbox.spec import SandboxSpec

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]
SPEC = SandboxSpec(image="py311", timeout_s=60)


def _wheel(folder: Path, name: str = "tinydep", value: int = 42) -> Path:
    """A minimal pure-Python wheel, written by hand."""
    files = {
        f"{name}/__init__.py": f"VALUE = {value}\n".encode(),
        f"{name}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n".encode(),
        f"{name}-1.0.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}"
        for path, data in files.items()
    ]
    files[f"{name}-1.0.dist-info/RECORD"] = ("\n".join([*record, f"{name}-1.0.dist-info/RECORD,,"]) + "\n").encode()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in files.items():
            archive.writestr(member, data)
    return path


def _repo(root: Path) -> Path:
    _wheel(root / "wheels")
    (root / "requirements.txt").write_text("tinydep\n")
    (root / "test_dep.py").write_text("import tinydep\n\ndef test_value():\n    assert tinydep.VALUE == 42\n")
    return root


INSTALL = (
    "python3 -m pip install -q --no-index --break-system-packages --find-links /workspace/wheels -r requirements.txt"
)


def test_setup_installs_from_repo_wheels_and_second_session_reuses_it(
    tmp_path: Path, docker_client: docker.DockerClient, run_label: str
) -> None:
    repo = _repo(tmp_path / "repo")
    config = SessionConfig(setup=[INSTALL, f"echo {run_label} > /etc/harness-test-marker"])
    with DockerSandbox(docker_client, run_id=run_label, pool_size=0) as box:
        first = Session.create(
            repo, tmp_path / "state", spec=SPEC, config=config, prepare=make_prepare(box, SPEC, config)
        )
        assert first.info.setup is not None and not first.info.setup.cached
        assert first.info.setup.network_mode == "none"
        assert first.step == 0 and first.image == first.info.setup.image
        assert not (first.workspace / "build").exists(), "setup never writes the session workspace"
        log = (first.dir / "setup.log").read_text()
        assert log.startswith(f"$ {INSTALL}\n") and "[exit 0 after" in log and f"$ echo {run_label}" in log
        envelope = box.run(
            ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider"], workspace=first.workspace, spec=first.spec
        )
        assert envelope.exit_code == 0, envelope.stdout + envelope.stderr
        net = box.run(["ls", "/sys/class/net"], workspace=first.workspace, spec=first.spec)
        assert net.stdout.split() == ["lo"] and envelope.limits.network == "none"

        started = time.monotonic()
        second = Session.create(
            repo, tmp_path / "state", spec=SPEC, config=config, prepare=make_prepare(box, SPEC, config)
        )
        assert second.info.setup.cached and second.image == first.image
        assert time.monotonic() - started < 10
        assert "setup reused from the cache" in (second.dir / "setup.log").read_text()
        (repo / "requirements.txt").write_text("tinydep==1.0\n")
        third = Session.create(
            repo, tmp_path / "state", spec=SPEC, config=config, prepare=make_prepare(box, SPEC, config)
        )
        assert not third.info.setup.cached, "a changed dependency file invalidates the cache"


def test_setup_cache_never_hands_out_a_later_step_image(
    tmp_path: Path, docker_client: docker.DockerClient, run_label: str
) -> None:
    """A step commit inherits the setup image's labels: the cache must still find only the setup image
    (otherwise a new session starts with an earlier session's changes, and rollback to 0 keeps them)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.txt").write_text("a\n")
    config = SessionConfig(setup=[f"true cache-{run_label}"], writable_root=True)
    with DockerSandbox(docker_client, run_id=run_label, pool_size=0) as box:
        first = Session.create(
            repo, tmp_path / "state", spec=SPEC, config=config, prepare=make_prepare(box, SPEC, config)
        )
        envelope = box.run(
            ["sh", "-c", "echo one > /var/tmp/v"], workspace=first.workspace, spec=first.spec, commit_changes=True
        )
        assert envelope.committed_image and envelope.committed_image != first.info.setup.image
        first.commit_step("write", committed_image=envelope.committed_image)
        second = Session.create(
            repo, tmp_path / "state", spec=SPEC, config=config, prepare=make_prepare(box, SPEC, config)
        )
        assert second.info.setup.cached and second.image == first.info.setup.image
        clean = box.run(["sh", "-c", "test ! -e /var/tmp/v"], workspace=second.workspace, spec=second.spec)
        assert clean.exit_code == 0, "step 0 of a new session must not hold another session's changes"


def test_setup_network_is_what_the_engine_says_and_failures_are_reported(
    tmp_path: Path, docker_client: docker.DockerClient, run_label: str
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.txt").write_text("a\n")
    config = SessionConfig(setup=[f"true {run_label}"], setup_network=True)
    with DockerSandbox(docker_client, run_id=run_label, pool_size=0) as box:
        session = Session.create(
            repo, tmp_path / "state", spec=SPEC, config=config, prepare=make_prepare(box, SPEC, config)
        )
        assert session.info.setup.network_mode == "bridge"
        assert session.config.setup_network and session.spec.network == "none"
        failing = SessionConfig(setup=["for n in $(seq 0 199); do echo line $n; done; echo about to fail; exit 3"])
        with pytest.raises(SetupError, match=re.escape("exited 3: line 198 | line 199 | about to fail")) as failed:
            Session.create(
                repo,
                tmp_path / "state",
                spec=SPEC,
                config=failing,
                session_id="failed",
                prepare=make_prepare(box, SPEC, failing),
            )
        assert not (tmp_path / "state" / "failed").exists()
        kept = tmp_path / "state" / "failed.setup.log"
        assert str(failed.value).endswith(f"(full log: {kept})"), "the whole output is kept and named"
        assert "line 0\n" in kept.read_text() and "line 199\nabout to fail\n[exit 3 after" in kept.read_text()

        slow = SessionConfig(setup=["echo first", "echo started; sleep 60"], setup_timeout=3)
        started = time.monotonic()
        with pytest.raises(SetupError, match=r"stopped at setup's time bound of 3 s \(--setup-timeout\): started"):
            Session.create(
                repo,
                tmp_path / "state",
                spec=SPEC,
                config=slow,
                session_id="slow",
                prepare=make_prepare(box, SPEC, slow),
            )
        assert time.monotonic() - started < 30, "the bound is for all the commands, and it holds"


def test_writable_root_state_follows_steps_and_rollback(
    tmp_path: Path, docker_client: docker.DockerClient, run_label: str
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.txt").write_text("a\n")
    session = Session.create(
        repo,
        tmp_path / "state",
        spec=SPEC,
        config=SessionConfig(writable_root=True),
        images=EngineStepImages(docker_client),
    )
    with DockerSandbox(docker_client, run_id=run_label, pool_size=0, session_id=session.id) as box:

        def step(command: str) -> str:
            envelope = box.run(
                ["sh", "-c", command], workspace=session.workspace, spec=session.spec, commit_changes=True
            )
            assert envelope.exit_code == 0, envelope.stderr
            session.commit_step(command, committed_image=envelope.committed_image)
            return envelope.stdout

        assert session.spec.read_only_root is False
        step("echo one > /var/tmp/state.txt; echo ws1 > /workspace/a.txt")
        image1 = session.image
        assert image1 != "py311"
        assert step("cat /var/tmp/state.txt").strip() == "one"
        assert session.image == image1, "a call that changed nothing outside the workspace keeps the image"
        step("echo two > /var/tmp/state.txt; echo ws3 > /workspace/a.txt")
        assert session.image != image1
        tags = [unqualified(tag) for tag in docker_client.images.get(session.image).tags]
        assert f"harness-session/{session.id}:step-3" in tags

        session.rollback(1)
        assert session.image == image1 and (session.workspace / "a.txt").read_text() == "ws1\n"
        assert step("cat /var/tmp/state.txt").strip() == "one"
        session.rollback(0)
        assert box.run(["cat", "/var/tmp/state.txt"], workspace=session.workspace, spec=session.spec).exit_code != 0

    assert len(session_images(docker_client, session.id)) == 2
    mine = {image.id for image in session_images(docker_client, session.id)}
    assert not mine & set(find_session_leftovers(docker_client, tmp_path / "state").images), (
        "a live session is no leftover"
    )
    session.delete()
    assert session_images(docker_client, session.id) == []
    assert not mine & set(find_session_leftovers(docker_client, tmp_path / "state").images)
