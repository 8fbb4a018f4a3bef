"""Inspect AI's own conformance suite for sandbox providers, run against the harness sandbox on the
real engine, in both modes (writable root, the default; read-only root).

The expected failures are by design, each with its reason (the README lists them too)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("inspect_ai", reason="the inspect extra is not installed")

from inspect_ai.util._sandbox.self_check import *  # noqa: F403  (the suite's checks, collected here)

from harness.integrations.box import Box, BoxConfig
from harness.integrations.inspect_sandbox import VIA_LABEL, HarnessSandboxEnvironment

pytestmark = [pytest.mark.docker, pytest.mark.anyio, pytest.mark.slow]

NEVER_ROOT = "harness never runs a command as root or as another user (SandboxUserUnsupportedError)"
TMP_PER_CALL = "read-only root: /tmp is a fresh tmpfs per call, so a file written there is gone at the next call"

EXPECTED_FAILURES: dict[str, dict[str, str]] = {
    "writable": {"test_exec_as_user": NEVER_ROOT},
    "read-only": {
        "test_exec_as_user": NEVER_ROOT,
        "test_read_and_write_file_including_directory_absolute": TMP_PER_CALL,
        "test_write_text_file_is_directory": TMP_PER_CALL,
        "test_write_binary_file_is_directory": TMP_PER_CALL,
        "test_cwd_absolute": TMP_PER_CALL,
    },
}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module", params=["writable", "read-only"])
def harness_env(
    request: pytest.FixtureRequest, docker_client: object, run_label: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[str, HarnessSandboxEnvironment]]:
    mode = request.param
    config = BoxConfig(
        writable_root=mode == "writable",
        state_dir=tmp_path_factory.mktemp("inspect-sessions"),
        run_id=run_label,
        timeout_s=60,
    )
    box = Box(config, name="inspect-self-check", labels=VIA_LABEL)
    try:
        yield mode, HarnessSandboxEnvironment(box)
    finally:
        box.close()


@pytest.fixture
def sandbox_env(request: pytest.FixtureRequest, harness_env: tuple[str, HarnessSandboxEnvironment]):
    mode, env = harness_env
    reason = EXPECTED_FAILURES[mode].get(request.node.originalname)
    if reason:
        request.node.add_marker(pytest.mark.xfail(reason=reason, strict=True))
    return env


def test_expected_failures_are_checks_of_the_suite() -> None:
    """Every name in the expected-failure lists is a check the suite has (a renamed check must not
    silently turn an expected failure into a pass)."""
    from inspect_ai.util._sandbox import self_check

    for names in EXPECTED_FAILURES.values():
        assert set(names) <= set(self_check.__all__)


def test_calls_are_session_steps(harness_env: tuple[str, HarnessSandboxEnvironment]) -> None:
    """A call that changed the workspace is the session's next step; one that changed nothing is not."""
    _, env = harness_env
    session = env.box.session
    before = session.step
    env.box.write_file("steps/note.txt", b"one")
    assert session.step == before + 1
    env.box.exec(["cat", "steps/note.txt"])
    assert session.step == before + 1
    assert (Path(env.session_dir()) / "session.json").is_file()
