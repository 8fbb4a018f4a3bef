"""Writable-root sessions on the real engine: /tmp kept between calls when asked (committed with the
root), changes found from the overlay's upper directory, and a long chain of committed step images
flattened before overlay2's layer limit."""

from __future__ import annotations

from pathlib import Path

import docker
import pytest

from sandbox.docker import commit, images
from sandbox.docker.commit import list_tree
from sandbox.docker.containers import DockerSandbox
from sandbox.docker.step_images import EngineStepImages
from sandbox.session.session import Session, SessionConfig
from sandbox.spec import SandboxSpec
from sandbox.tree import remove_tree

pytestmark = [pytest.mark.docker, pytest.mark.timeout(240)]


def _session(tmp_path: Path, client: docker.DockerClient, **config: bool) -> Session:
    images.build(client, "py311")
    repo = tmp_path / "repo"
    repo.mkdir(exist_ok=True)
    (repo / "a.txt").write_text("a\n")
    return Session.create(
        repo,
        tmp_path / f"state-{len(config)}-{'-'.join(config)}",
        spec=SandboxSpec(image="py311", timeout_s=30),
        config=SessionConfig(writable_root=True, **config),
        images=EngineStepImages(client),
    )


def _call(box: DockerSandbox, session: Session, command: str):
    envelope = box.run(["sh", "-c", command], workspace=session.workspace, spec=session.spec, commit_changes=True)
    session.commit_step(command, committed_image=envelope.committed_image, skip_unchanged=True)
    return envelope


@pytest.mark.parametrize("keep_tmp", [True, False])
def test_tmp_is_kept_between_calls_only_when_asked(
    tmp_path: Path, docker_client: docker.DockerClient, run_label: str, keep_tmp: bool
) -> None:
    session = _session(tmp_path, docker_client, keep_tmp=keep_tmp)
    with session, DockerSandbox(docker_client, run_id=run_label, pool_size=1, session_id=session.id) as box:
        wrote = _call(box, session, "echo kept > /tmp/scratch")
        assert (wrote.committed_image is not None) is keep_tmp  # /tmp is part of the root only when kept
        seen = _call(box, session, "cat /tmp/scratch")
        assert (seen.exit_code == 0 and seen.stdout == "kept\n") is keep_tmp
        assert _call(box, session, "true").committed_image is None  # nothing changed: no commit


@pytest.mark.slow
def test_a_long_chain_of_step_images_is_flattened(
    tmp_path: Path, docker_client: docker.DockerClient, run_label: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = _session(tmp_path, docker_client)
    from sandbox.docker.engine import resolve_image

    base_layers = len(
        docker_client.images.get(resolve_image(docker_client, session.image)[1]).attrs["RootFS"]["Layers"]
    )
    with session, DockerSandbox(docker_client, run_id=run_label, pool_size=1, session_id=session.id) as box:
        layers = []
        for n in range(3):
            envelope = _call(box, session, f"echo {n} > /var/tmp/file-{n}")
            assert envelope.committed_image
            image = docker_client.images.get(envelope.committed_image)
            layers.append(len(image.attrs["RootFS"]["Layers"]))
            if n == 0:  # one layer over what the call ran from (on an engine elsewhere, an image derived from it)
                assert layers[0] == base_layers + (2 if box.remote else 1), layers
                monkeypatch.setattr(commit, "MAX_LAYERS", layers[0] + 1)
        assert layers[1:] == [1, 2]  # the second commit reached the limit and was squashed
        flat = docker_client.images.get(session.records[2].image)
        assert flat.labels.get("harness.session") == session.id
        assert any(item.startswith("PATH=") for item in flat.attrs["Config"]["Env"])
        listed = _call(box, session, "cat /var/tmp/file-0 /var/tmp/file-1 /var/tmp/file-2 && id -u")
        assert listed.exit_code == 0 and listed.stdout.splitlines()[:3] == ["0", "1", "2"], listed.stderr
        session.rollback(1)  # the step images before the flattening still work
        assert _call(box, session, "test -e /var/tmp/file-1").exit_code == 1


def test_list_tree_walks_without_recursion_and_never_follows_links(tmp_path: Path) -> None:
    deep = tmp_path / "top"
    deep.mkdir()
    path = deep
    for _ in range(1500):  # deeper than the interpreter's recursion limit
        path = path / "d"
        path.mkdir()
    (deep / "link").symlink_to("/etc")
    listed = list_tree(deep)
    assert listed is not None and len(listed) == 1501
    assert "/link" in listed and not any(entry.startswith("/link/") for entry in listed)
    assert list_tree(tmp_path / "missing") is None
    remove_tree(deep)  # pytest's own clean-up recurses
