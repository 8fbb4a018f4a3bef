"""Shared fixtures: the Docker engine client and a unique run id for everything a test session creates.

Docker objects made by tests carry `harness.run=<run_label>`; at the end of the session only those
are removed (other engineers' tests share the engine). The cached images the suite made (a
devcontainer's, a setup's: shared by content, so no worker may remove them while others run) go once
every worker has ended. With the environment variable CI set, a missing engine fails every docker test
instead of skipping it.
"""

from __future__ import annotations

import ast
import atexit
import contextlib
import os
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from sandbox.docker.engine import connect, elsewhere, engine_kind
from sandbox.docker.ids import image_summaries, present_containers
from sandbox.docker.prune import remove_image
from sandbox.errors import EngineUnavailable

RUN_ID = f"test-{uuid.uuid4().hex[:12]}"
SUITE_START = time.time()
os.environ["HARNESS_WARM_DIR"] = tempfile.mkdtemp(prefix="harness-test-warm-")
"""A warm service the developer runs never serves the tests' one-shot commands (a test that wants one
starts its own in a folder of its own)."""
atexit.register(shutil.rmtree, os.environ["HARNESS_WARM_DIR"], ignore_errors=True)


LONGEST_FIRST = (
    "tests/history/test_check.py",
    "tests/integrations/test_harbor.py",
    "tests/batch/test_batch_run.py",
    "tests/history/test_night.py",
    "tests/sandbox/docker/test_remote_engine.py",
    "tests/tools/test_services.py",
    "tests/agents/test_batch_agents.py",
    "tests/agents/test_opencode.py",
    "tests/agents/test_codex.py",
    "tests/agents/test_claude_code.py",
    "tests/agents/test_gemini.py",
    "tests/batch/test_fork.py",
    "tests/batch/test_cluster.py",
    "tests/integrations/test_inspect_self_check.py",
    "tests/agent/test_delegate.py",
    "tests/tools/test_mcp.py",
    "tests/agent/test_local_model.py",
    "tests/sandbox/warm/test_warm.py",
    "tests/agent/test_loop_resume.py",
    "tests/agent/test_loop_wire.py",
    "tests/setup/test_real_projects.py",
    "tests/agent/test_done_cannot_be_faked.py",
    "tests/environment/test_devcontainer.py",
    "tests/cli/test_benches.py",
    "tests/cli/test_bench_sandbox.py",
    "tests/agent/test_loop_e2e.py",
    "tests/sandbox/network/test_egress_docker.py",
    "tests/agent/test_models_end_to_end.py",
    "tests/agent/test_bench_run.py",
    "tests/landing/test_apply.py",
    "tests/agent/test_engine_restart.py",
    "tests/batch/test_disk_benches.py",
)
"""The files that take longest (`make test` prints the slowest tests), scheduled first: with one file per
worker at a time (`--dist loadfile`), a long file that starts last is the suite's tail. xdist would
otherwise order the files by how many tests each has (its loadscope reordering, which `make test` turns
off): the long end-to-end files, with two or three tests each, would start last. The order of the tests
within a file stays as written."""


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Once every test has ended (the controller of the workers, or a run without them): the cached
    images made since the suite started go, as `harness images prune` removes them (never one a
    container uses, nor one a session of the developer's own state directory names)."""
    if hasattr(session.config, "workerinput"):
        return
    from harness.api import default_state_dir
    from sandbox.docker.prune import names_in_sessions, prune_cache

    with contextlib.suppress(Exception):  # no engine, or one that went away: nothing of ours is there
        client = connect(os.environ.get("DOCKER_HOST") or None)
        mine = Path(os.environ.get("HARNESS_STATE_DIR") or default_state_dir())
        prune_cache(client, names_in_sessions([mine]), created_since=SUITE_START)
        client.close()


MODULE_MARKS = re.compile(r"^pytestmark\s*=\s*(\[[^\]]*\]|[^\n]*)", re.MULTILINE)


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """A test module whose every test `-m` deselects by the module's own marks is not imported: the
    end-to-end modules import the SDKs they drive (inspect_ai, anthropic, distributed, mcp: seconds in
    every worker of `make test-fast`, which runs none of their tests). The marks are read from the
    module's `pytestmark` line, not by importing it; anything this cannot read is collected as usual."""
    expression = config.getoption("markexpr")
    if not expression or not collection_path.name.startswith("test_") or collection_path.suffix != ".py":
        return None
    found = MODULE_MARKS.search(collection_path.read_text(encoding="utf-8"))
    if found is None:
        return None
    return True if never_selected(expression, module_marks(found.group(1))) else None


def module_marks(source: str) -> set[str]:
    """The names of `pytest.mark.NAME` (or `pytest.mark.NAME(...)`) in a `pytestmark` value."""
    try:
        tree = ast.parse(source.strip(), mode="eval")
    except SyntaxError:
        return set()
    names = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "mark"
            and isinstance(node.value.value, ast.Name)
            and node.value.value.id == "pytest"
        ):
            names.add(node.attr)
    return names


def never_selected(expression: str, marks: set[str]) -> bool:
    """Whether `-m expression` is false for a test carrying marks, whatever other marks it also carries
    (every combination of the other names the expression uses). An expression beyond names, `and`,
    `or`, `not` and parentheses (marks with arguments) is never judged here: False."""
    try:
        tree = ast.parse(expression, mode="eval").body
    except SyntaxError:
        return False
    allowed = (ast.BoolOp, ast.And, ast.Or, ast.UnaryOp, ast.Not, ast.Name, ast.Load)
    if not all(isinstance(node, allowed) for node in ast.walk(tree)):
        return False
    others = sorted({node.id for node in ast.walk(tree) if isinstance(node, ast.Name)} - marks)
    if len(others) > 8:
        return False

    def holds(node: ast.expr, carried: set[str]) -> bool:
        if isinstance(node, ast.Name):
            return node.id in carried
        if isinstance(node, ast.UnaryOp):
            return not holds(node.operand, carried)
        assert isinstance(node, ast.BoolOp)
        parts = (holds(value, carried) for value in node.values)
        return all(parts) if isinstance(node.op, ast.And) else any(parts)

    combinations = (
        marks | {name for bit, name in enumerate(others) if mask >> bit & 1} for mask in range(1 << len(others))
    )
    return not any(holds(tree, carried) for carried in combinations)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    rank = {name: n for n, name in enumerate(LONGEST_FIRST)}
    root = Path(__file__).resolve().parent.parent
    items.sort(key=lambda item: rank.get(Path(item.path).resolve().relative_to(root).as_posix(), len(rank)))


@pytest.fixture(scope="session")
def run_label() -> str:
    """Unique id of this test session (per xdist worker); label every Docker object with it."""
    return RUN_ID


@pytest.fixture(scope="session")
def docker_client(run_label: str) -> Iterator[docker.DockerClient]:
    """A client for the engine; skip without one (fail when CI is set). Cleans up by run label."""
    try:
        client = connect(os.environ.get("DOCKER_HOST") or None)
    except EngineUnavailable as error:
        if os.environ.get("CI"):
            pytest.fail(f"CI requires a Docker engine: {error}", pytrace=False)
        pytest.skip(str(error))
    yield client
    _remove_labelled(client, run_label)
    client.close()


@dataclass(frozen=True)
class EngineHere:
    """What the engine under test is, from its own answers (the suite runs on Docker, and its engine
    tests on Podman too: docs/scale.md)."""

    product: str
    rootless: bool
    cgroup_version: str
    elsewhere: str | None
    """Why its calls' workspaces travel as archives (rootless, or on another machine), or None: bound."""

    @property
    def limits_unenforced(self) -> bool:
        """A rootless engine on cgroup v1 sets no memory, cpu or pids limit: the envelopes name them
        unenforced instead (tests check that in place of the limit)."""
        return self.rootless and self.cgroup_version == "1"


@pytest.fixture(scope="session")
def engine_here(docker_client: docker.DockerClient) -> EngineHere:
    info = docker_client.info()
    product, rootless = engine_kind(docker_client.version(), info)
    return EngineHere(product, rootless, str(info.get("CgroupVersion")), elsewhere(docker_client, info))


@pytest.fixture(scope="session")
def sandbox_image(docker_client: docker.DockerClient) -> str:
    """Make sure py311 is current (a no-op when it is) and return its name."""
    from sandbox.docker import images

    images.build(docker_client, "py311")
    return "py311"


def _remove_labelled(client: docker.DockerClient, run_label: str) -> None:
    """Remove what this test session made: objects labelled with run_label, or with a label a test
    derived from it (`<run_label>-mcp`, `<run_label>-harbor-...`)."""

    def ours(labels: dict[str, str] | None) -> bool:
        run = (labels or {}).get("harness.run", "")
        return run == run_label or run.startswith(run_label + "-")

    key = {"label": "harness.run"}
    for container in present_containers(client, key):
        if ours(container.labels):
            with contextlib.suppress(docker.errors.APIError):
                container.remove(force=True, v=True)  # v: its anonymous volumes (an engine elsewhere)
    # Newest first, in passes: a step image is a child of the one before it, and the engine refuses
    # to remove a parent while a child exists (force or not).
    # One listing request (the SDK's images.list inspects each image after it, and another worker's
    # session may remove one in between).
    for _ in range(5):
        images = sorted(
            (image for image in image_summaries(client, filters=key) if ours(image.get("Labels"))),
            key=lambda image: image.get("Created", 0),
        )
        if not images:
            break
        for image in reversed(images):  # never forced: Podman's force removes the containers of other
            # workers' sessions that use the image (one derived for an engine elsewhere is shared by label)
            remove_image(client, image["Id"])
    for network in client.networks.list(filters=key):
        if ours(network.attrs.get("Labels")):
            with contextlib.suppress(docker.errors.APIError):
                network.remove()


@pytest.fixture(autouse=True)
def _engine_for_docker_tests(request: pytest.FixtureRequest) -> None:
    """Tests marked `docker` get the engine check even if they do not use docker_client directly."""
    if request.node.get_closest_marker("docker") is not None:
        request.getfixturevalue("docker_client")


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    """Debian's headless chromium through its own chromedriver (installed by `make test`)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not driver:
        pytest.fail(
            "chromium and chromedriver are not installed: run `make browser` (Debian: chromium chromium-driver)"
        )
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1200,1000",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    session = webdriver.Chrome(options=options, service=Service(executable_path=driver))
    try:
        yield session
    finally:
        session.quit()


@pytest.fixture(scope="session")
def harbor_python() -> Path:
    """The python of a 3.12+ virtual environment with Harbor installed (tests/harbor_venv.py)."""
    from tests.harbor_venv import harbor_python as made

    return made()
