"""Ship the image build inputs and the example inside the wheel.

`Dockerfile.sandbox`, `images/` and `examples/` stay at the top level of the checkout (where people
read and change them); the wheel carries copies beside the code that uses them, so an installed
`harness` can `images build` and `bench run` without the checkout. Everything else is pyproject.toml.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
ASSETS = {
    "sandbox/docker/assets": ["Dockerfile.sandbox", "images"],
    "harness/bench/assets": ["examples"],
}


class BuildWithAssets(build_py):
    """build_py that also copies the top-level assets into the built packages."""

    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads them from the checkout itself
            return
        for target, names in ASSETS.items():
            destination = Path(self.build_lib) / target
            for name in names:
                source = ROOT / name
                if source.is_dir():
                    shutil.copytree(
                        source,
                        destination / name,
                        dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache"),
                    )
                else:
                    destination.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(source, destination / name)


setup(cmdclass={"build_py": BuildWithAssets})
