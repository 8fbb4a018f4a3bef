"""The setup container's removal: one the engine is already removing, or one already gone, is removed
(a setup stopped at its time bound once failed with "removal ... already in progress" instead of
saying why it stopped); any other refusal is an error that names the step."""

from __future__ import annotations

import docker
import pytest
import requests

from sandbox.errors import SandboxError
from sandbox.session.setup import _remove


class Engine:
    def __init__(self, status: int, text: str) -> None:
        self.status, self.text, self.calls = status, text, 0

    def remove_container(self, cid: str, force: bool = False, v: bool = False) -> None:
        self.calls += 1
        response = requests.Response()
        response.status_code = self.status
        error = docker.errors.NotFound if self.status == 404 else docker.errors.APIError
        raise error(self.text, response=response, explanation=self.text)


@pytest.mark.parametrize("status", [404, 409])
def test_a_container_gone_or_going_is_removed(status: int) -> None:
    engine = Engine(status, "removal of container abc is already in progress")
    _remove(engine, "abc")  # type: ignore[arg-type]
    assert engine.calls == 1


def test_another_refusal_names_the_step() -> None:
    with pytest.raises(SandboxError, match="removing the setup container"):
        _remove(Engine(500, "driver failed"), "abc")  # type: ignore[arg-type]
