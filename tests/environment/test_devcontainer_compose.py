"""A compose-described devcontainer read as hostile input: the `service` is the environment (its build
or image, its variables), the other services it runs become harness's services, what would reach
this machine or the engine is listed and never applied, compose's interpolation never reads this
machine's environment, and an alias bomb is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.environment.devcontainer import read
from harness.errors import UsageError

COMPOSE = """
services:
  app:
    build: {context: .., dockerfile: .devcontainer/Dockerfile, args: {PY: "3.11"}}
    environment:
      MODE: ci
      TOKEN: ${OPENAI_API_KEY}
      LEVEL: ${LEVEL:-debug}
    volumes: ["..:/workspaces/app:cached", "/var/run/docker.sock:/var/run/docker.sock", "/:/host"]
    privileged: true
    cap_add: [SYS_ADMIN]
    network_mode: host
    command: sleep infinity
    depends_on: [db]
  db:
    image: postgres:16
    user: postgres
    environment: [POSTGRES_PASSWORD=secret, FROM_HOST]
    healthcheck: {test: ["CMD-SHELL", "pg_isready -U postgres"], interval: 1s}
    ports: ["5432:5432"]
    tmpfs: /var/lib/postgresql/data
    volumes: ["/etc:/etc-host"]
  cache:
    image: redis:7
    user: root
  worker:
    build: ./worker
  admin:
    image: adminer
"""


def _repo(tmp_path: Path, compose: str, devcontainer: str) -> Path:
    repo = tmp_path / "repo"
    (repo / ".devcontainer").mkdir(parents=True)
    (repo / ".devcontainer" / "Dockerfile").write_text("FROM scratch\n")
    (repo / ".devcontainer" / "compose.yml").write_text(compose)
    (repo / ".devcontainer" / "devcontainer.json").write_text(devcontainer)
    return repo


def test_the_main_service_is_the_environment_and_the_others_are_harness_services(tmp_path):
    found = read(
        _repo(
            tmp_path,
            COMPOSE,
            """{
        "dockerComposeFile": "compose.yml", "service": "app", "runServices": ["db", "cache", "worker"],
        "workspaceFolder": "/workspaces/app", "containerEnv": {"MODE": "devcontainer"},
        "postCreateCommand": "pip install -e ."}""",
        )
    )
    assert (found.dockerfile, found.context, found.build_args) == (".devcontainer/Dockerfile", ".", {"PY": "3.11"})
    assert found.environment == {"MODE": "devcontainer", "TOKEN": "", "LEVEL": "debug"}, "the file's over compose's"
    assert found.commands == ["pip install -e ."]
    assert list(found.services) == ["db"], "admin is not in runServices; cache runs as root; worker is built"
    db = found.services["db"]
    assert (db.image, db.user, db.env, db.ports) == ("postgres:16", "postgres", {"POSTGRES_PASSWORD": "secret"}, [5432])
    assert db.health == ["sh", "-c", "pg_isready -U postgres"] and db.tmpfs == ["/var/lib/postgresql/data"]
    why = {d.key: d.why for d in found.dropped}
    for key in ("app volumes", "app privileged", "app cap_add", "app network_mode", "app command", "db volumes"):
        assert key in why, key
    assert why["${OPENAI_API_KEY} (compose)"].endswith("expanded to empty")
    assert why["${LEVEL} (compose)"].endswith("the file's default used")
    assert "never runs as root" in why["cache"] and why["worker"].startswith("a service built from a Dockerfile")
    assert why["db ports"].startswith("published on this machine")
    assert "app depends_on" not in why and "workspaceFolder" in why


@pytest.mark.parametrize(
    "compose, devcontainer, says",
    [
        ("services: {app: {image: x}}", '{"dockerComposeFile": "compose.yml", "service": "nope"}', "must name one"),
        (
            "services: {app: {image: x}}",
            '{"dockerComposeFile": "compose.yml", "service": "app", "runServices": ["x"]}',
            "runServices names 'x'",
        ),
        ("services: [1]", '{"dockerComposeFile": "compose.yml", "service": "app"}', "declares no services"),
        (
            '{"services": {"app": {"image": "x"}, "db\\n10.0.0.1 pypi.org": {"image": "postgres"}}}',
            '{"dockerComposeFile": "compose.yml", "service": "app"}',
            r"service name 'db\\n10\.0\.0\.1 pypi\.org' is no host name",
        ),
        (
            "services: {app: {ports: [1]}}",
            '{"dockerComposeFile": "compose.yml", "service": "app"}',
            "neither an image nor a build",
        ),
        ("a: [\n", '{"dockerComposeFile": "compose.yml", "service": "app"}', "is not YAML"),
        (
            "services: {app: {build: {context: ../..}}}",
            '{"dockerComposeFile": "compose.yml", "service": "app"}',
            "outside the repository",
        ),
        (
            "\n".join(
                ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
                + [
                    f"a{i}: &a{i} [*a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}, *a{i - 1}]"
                    for i in range(1, 9)
                ]
            )
            + "\nservices: {app: {image: x}}\n",
            '{"dockerComposeFile": "compose.yml", "service": "app"}',
            "more than 100000 values",
        ),
    ],
)
def test_a_broken_or_hostile_compose_file_is_a_clear_error(tmp_path, compose, devcontainer, says):
    with pytest.raises(UsageError, match=says):
        read(_repo(tmp_path, compose, devcontainer))
