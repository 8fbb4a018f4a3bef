"""`harness bench setup`: what `make demo` sets up on a bare machine, against its floor.

The demo needs the runtime package and the `py311` image, which stands on the sandbox layer over the
base. On a bare machine that is: a venv with the package installed (`make deps-run`), the base
bootstrapped (`debootstrap`, no registry needed), the sandbox layer, then `py311`. The floor the
issue names is bootstrapping the base plus installing the package: the rest (two `docker build`s) is
what the demo adds. Everything runs as on a bare machine: a fresh venv with no pip cache, images under
throwaway tags built without the build cache; the images are removed at the end (the machine's own
harness images are never touched).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from harness.bench.measure import ratio, run_checked

PROJECT = Path(__file__).resolve().parents[2]
"""The checkout the package is installed from (a wheel has none: the bench says so)."""


class SetupBench(BaseModel):
    """Result of `harness bench setup` (seconds)."""

    install_s: float
    """A fresh venv and `pip install --no-cache-dir` of the package (what `make deps-run` does)."""
    base_s: float
    """The base bootstrapped from the apt mirror and imported."""
    sandbox_s: float
    """The sandbox layer over it, without the build cache."""
    image_s: float
    """The demo's image (`py311`) over that, without the build cache."""
    image: str = "py311"
    demo_s: float
    """Everything `make demo` sets up: install + base + sandbox layer + image."""
    floor_s: float
    """Bootstrapping the base plus installing the package."""
    demo_over_floor: float
    """Target: at most 1.5."""


def measure(client: Any, *, run_id: str, image: str = "py311", log: Any = lambda line: None) -> SetupBench:
    """Install the package in a fresh venv, then build the demo's images from nothing."""
    from sandbox.docker import images
    from sandbox.docker.ids import present_images

    if not (PROJECT / "pyproject.toml").is_file():
        raise RuntimeError("the setup bench installs harness from its checkout, and this installation has none")
    repository = f"harness-bench/{run_id}".lower()
    with tempfile.TemporaryDirectory(prefix="harness-bench-setup-") as tmp:
        started = time.monotonic()
        venv = Path(tmp) / "venv"
        run_checked([sys.executable, "-m", "venv", str(venv)])
        run_checked([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--no-cache-dir", str(PROJECT)])
        install_s = time.monotonic() - started
        shutil.rmtree(venv, ignore_errors=True)
    try:
        steps = images.build_from_scratch(client, repository, image, log)
    finally:
        for found in present_images(client, name=f"{repository}/*"):
            for tag in found.tags:
                client.images.remove(tag, force=True, noprune=False)
    demo = install_s + steps["base"] + steps[images.SANDBOX] + steps[image]
    floor = install_s + steps["base"]
    return SetupBench(
        install_s=round(install_s, 1),
        base_s=round(steps["base"], 1),
        sandbox_s=round(steps[images.SANDBOX], 1),
        image_s=round(steps[image], 1),
        image=image,
        demo_s=round(demo, 1),
        floor_s=round(floor, 1),
        demo_over_floor=ratio(demo, floor),
    )
