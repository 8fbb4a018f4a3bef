"""Listings that another process's removals race (the suite's workers, a prune), as Podman 4.3 answers
them: a 500 where Docker answers 404, or a whole image listing failed by one image removed meanwhile."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import docker
import pytest
import requests

from sandbox.docker.ids import image_summaries, present_containers, present_images


def _error(status: int, explanation: str) -> docker.errors.APIError:
    response = requests.Response()
    response.status_code = status
    return docker.errors.APIError("engine said no", response=response, explanation=explanation)


class Engine:
    """The few calls the listings make, answering the way Podman's Docker-compatible API does."""

    def __init__(self, listing_failures: list[str], gone: set[str]) -> None:
        self.listing_failures, self.gone, self.listings = listing_failures, gone, 0
        self.api = SimpleNamespace(images=self._images, containers=self._containers)
        self.images = SimpleNamespace(get=self._get)
        self.containers = SimpleNamespace(get=self._get)

    def _images(self, **query: Any) -> list[dict[str, Any]]:
        self.listings += 1
        if self.listing_failures:
            raise _error(500, self.listing_failures.pop(0))
        return [{"Id": "a"}, {"Id": "b"}]

    def _containers(self, **query: Any) -> list[dict[str, Any]]:
        self.listings += 1
        if self.listing_failures:
            raise _error(500, self.listing_failures.pop(0))
        return [{"Id": "a"}, {"Id": "b"}]

    def _get(self, object_id: str) -> SimpleNamespace:
        if object_id in self.gone:
            raise _error(500, f'reading image "{object_id}": locating image with ID "{object_id}": image not known')
        return SimpleNamespace(id=object_id, labels={})


def test_an_image_listing_failed_by_a_removal_meanwhile_is_asked_again():
    engine = Engine(['retrieving size of image "x": you may need to remove the image to resolve the error'], set())
    assert [s["Id"] for s in image_summaries(engine)] == ["a", "b"] and engine.listings == 2


def test_what_another_process_removed_is_left_out_and_any_other_error_raised():
    engine = Engine([], {"b"})
    assert [i.id for i in present_images(engine)] == ["a"]
    assert [c.id for c in present_containers(engine, {})] == ["a"]
    with pytest.raises(docker.errors.APIError):
        image_summaries(Engine(["database is locked"], set()))
    with pytest.raises(docker.errors.APIError):
        image_summaries(Engine(["retrieving size of image"] * 5, set()))  # not forever


def test_an_image_inspection_failed_for_another_images_sake_is_asked_again():
    from sandbox.docker.engine import INSPECT_TRIES, _inspected

    failures = [
        _error(500, 'failed to convert ImageData to ImageInspect \'harness/py311:1\': reading image "35330c": '
               'locating image with ID "35330c": image not known'),
    ]  # fmt: skip
    asked: list[str] = []

    def get(ref: str) -> SimpleNamespace:
        asked.append(ref)
        if failures:
            raise failures.pop(0)
        return SimpleNamespace(id="sha256:py311")

    engine = SimpleNamespace(images=SimpleNamespace(get=get))
    assert _inspected(engine, "harness/py311:1").id == "sha256:py311" and asked == ["harness/py311:1"] * 2
    failures[:] = [_error(500, "image not known")] * INSPECT_TRIES
    with pytest.raises(docker.errors.APIError):
        _inspected(engine, "harness/py311:1")  # not forever
    failures[:] = [_error(500, "database is locked")]
    with pytest.raises(docker.errors.APIError):
        _inspected(engine, "harness/py311:1")  # any other failure at once
    failures[:] = [docker.errors.ImageNotFound("no such image")]
    with pytest.raises(docker.errors.ImageNotFound):
        _inspected(engine, "harness/py311:1")


def test_a_container_listing_failed_by_one_ending_meanwhile_is_asked_again():
    """Rootless Podman 4.3 reads each container's cgroup to list them: one whose process ends meanwhile
    fails the whole listing (seen in `make test-podman`); asked again, a few times, never forever."""
    engine = Engine(["open /proc/24018/cgroup: no such process"], set())
    assert [c.id for c in present_containers(engine, {})] == ["a", "b"] and engine.listings == 2
    with pytest.raises(docker.errors.APIError):
        present_containers(Engine(["open /proc/1/cgroup: no such process"] * 4, set()), {})
    with pytest.raises(docker.errors.APIError):
        present_containers(Engine(["database is locked"], set()), {})
