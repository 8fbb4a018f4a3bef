"""Harbor (and OpenEnv's client) in a virtual environment of its own: Harbor needs Python 3.12 or newer and harness runs on
3.11, so the tests that use Harbor's own code (its ATIF validator, its converters, `harbor run`)
make a 3.12+ environment from an interpreter this machine carries and install Harbor there from the
package registry, once per machine (kept under /var/tmp or HARNESS_TEST_TOOLS, keyed by Harbor's version). Standard library
only: `make test` runs `python3 tests/harbor_venv.py` in the background before the rest of its set-up
(as it does the local model), and the tests wait for it under the same lock (and make it themselves
when nothing started it): three workers asking at once on a fresh machine each made it anew before,
one removing what another was installing into."""

from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

HARBOR = "harbor==0.26.0"
OPENENV = "openenv-core==0.3.0"
"""OpenEnv's own client and server (`harness env serve` is tested against its client, unchanged)."""
HOW = (
    "Harbor needs Python 3.12 or newer beside harness: install one (`apt-get install python3.12`, "
    "`pyenv install 3.12`, or put python3.12/python3.13 on PATH) and run the tests again"
)


def interpreter() -> Path:
    """A Python 3.12+ interpreter: on PATH, else pyenv's versions; AssertionError saying how to get one."""
    candidates = [shutil.which(name) for name in ("python3.13", "python3.12")]
    root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
    candidates += sorted(glob.glob(str(root / "versions" / "3.1[23]*" / "bin" / "python3.1[23]")), reverse=True)
    for found in candidates:
        if not found:
            continue
        done = subprocess.run(
            [found, "-c", "import sys, venv; assert sys.version_info >= (3, 12)"], capture_output=True, timeout=30
        )
        if done.returncode == 0:  # a pyenv shim for a version that is not selected fails here
            return Path(found)
    raise AssertionError(HOW)


def harbor_python() -> Path:
    """The python of a virtual environment holding Harbor (made on first use)."""
    return package_python(HARBOR, interpreter())


def openenv_python() -> Path:
    """The python of a virtual environment holding openenv-core, OpenEnv's own client (made on first
    use, from the interpreter running this: it needs 3.10 or newer, as harness does)."""
    return package_python(OPENENV, Path(sys.executable))


def package_python(requirement: str, python: Path) -> Path:
    """The python of a virtual environment of python's version holding requirement, kept under
    /var/tmp by both (made once per machine, under a lock)."""
    version = subprocess.run(
        [str(python), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], capture_output=True, text=True
    ).stdout.strip()
    venv = (
        Path(os.environ.get("HARNESS_TEST_TOOLS") or "/var/tmp")
        / f"harness-tests-{requirement.replace('==', '-')}-py{version}"
    )
    ready = venv / ".ready"
    with _locked(venv):
        if not ready.is_file():
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([str(python), "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
            done = subprocess.run(
                [
                    str(venv / "bin" / "python"),
                    "-m",
                    "pip",
                    "install",
                    "-q",
                    "--disable-pip-version-check",
                    requirement,
                ],
                capture_output=True,
                text=True,
                timeout=1200,
            )
            assert done.returncode == 0, f"installing {requirement} failed: {done.stderr[-2000:]}"
            ready.write_text(requirement + "\n")
    return venv / "bin" / "python"


@contextlib.contextmanager
def _locked(venv: Path) -> Iterator[None]:
    """Held while the environment is made or completed (another process's making is waited for)."""
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{venv}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def with_harness(python: Path) -> dict[str, str]:
    """The environment variables that run Harbor in python's venv with this checkout's harness (its
    dependencies installed there once, its source first on PYTHONPATH)."""
    root = Path(__file__).resolve().parents[1]
    venv = python.parent.parent
    marker = venv / ".harness-deps"
    wanted = (root / "pyproject.toml").read_bytes()
    with _locked(venv):
        if not marker.is_file() or marker.read_bytes() != wanted:
            done = subprocess.run(
                [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(root)],
                capture_output=True,
                text=True,
                timeout=1200,
            )
            assert done.returncode == 0, (
                f"installing harness's dependencies beside Harbor failed: {done.stderr[-2000:]}"
            )
            marker.write_bytes(wanted)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIRTUAL_ENV", "PYTHONHOME"))}
    env["PYTHONPATH"] = str(root)
    env["PATH"] = f"{python.parent}{os.pathsep}{env.get('PATH', '')}"
    return env


VALIDATE = """
import json, sys
from harbor.utils.trajectory_validator import TrajectoryValidator
bad = {}
for path in sys.argv[1:]:
    validator = TrajectoryValidator()
    if not validator.validate(path):
        bad[path] = validator.get_errors()
print(json.dumps(bad))
"""


def validate(python: Path, *paths: Path) -> dict[str, list[str]]:
    """Harbor's own ATIF validator on each file: {path: errors} of the invalid ones."""
    import json

    done = subprocess.run([str(python), "-c", VALIDATE, *map(str, paths)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


if __name__ == "__main__":  # `make test`'s background start: Harbor (harness's dependencies beside it), OpenEnv
    failed = False
    for make in (lambda: with_harness(harbor_python()), openenv_python):
        try:
            make()
        except AssertionError as error:  # the tests make it again and say why; here it is only a head start
            print(error, file=sys.stderr)
            failed = True
    sys.exit(1 if failed else 0)
