"""harness works as an installed package, not only from this checkout: every import it makes is a
declared dependency, and the built wheel, installed into a fresh venv in a temporary folder, builds
its images, runs a command and fixes the example from a folder far from the checkout."""

from __future__ import annotations

import ast
import importlib.metadata
import re
import shutil
import site
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


OPTIONAL = {
    "harness/integrations/inspect_sandbox.py": "inspect",
    "harness/integrations/minisweagent.py": "mini",
    "harness/bench/integrations.py": "inspect,mini",
    "harness/providers/anthropic_cloud.py": "bedrock,vertex",
    "harness/integrations/harbor.py": "harbor",
}
"""Modules that may import an extra's packages (and only they: harness without the extras runs)."""


def _third_party_imports(paths: list[Path] | None = None) -> set[str]:
    local = {
        "harness",
        "sandbox",
        "unified_diff",
        "pathguard",
        "fileops",
        "testrun",
    }  # the runner's siblings, inside the container
    found: set[str] = set()
    core = [
        p
        for p in [*ROOT.glob("harness/**/*.py"), *ROOT.glob("sandbox/**/*.py")]
        if str(p.relative_to(ROOT)) not in OPTIONAL
    ]
    for path in core if paths is None else paths:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            found |= {name.split(".")[0] for name in names}
    return {name for name in found if name not in sys.stdlib_module_names and name not in local}


def _declared(*extras: str) -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    requirements = [*project["dependencies"], *(r for extra in extras for r in project["optional-dependencies"][extra])]
    return {re.split(r"[<>=!~\[ ;]", requirement)[0].lower().replace("_", "-") for requirement in requirements}


def test_every_import_is_a_declared_dependency() -> None:
    distributions = importlib.metadata.packages_distributions()
    undeclared = {}
    for module in sorted(_third_party_imports()):
        owners = {name.lower().replace("_", "-") for name in distributions.get(module, [module])}
        if not owners & _declared():
            undeclared[module] = sorted(owners)
    assert undeclared == {}, f"imported but not in [project.dependencies]: {undeclared}"


def test_the_integrations_import_only_core_and_their_extras() -> None:
    distributions = importlib.metadata.packages_distributions()
    for path, extras in OPTIONAL.items():
        allowed = _declared(*extras.split(","))
        for module in sorted(_third_party_imports([ROOT / path])):
            owners = {name.lower().replace("_", "-") for name in distributions.get(module, [module])}
            assert owners & allowed, f"{path} imports {module}, not declared in its extras ({extras})"


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_built_wheel_works_outside_the_checkout(tmp_path: Path, run_label: str) -> None:
    wheels = tmp_path / "wheels"
    # from a copy without the checkout's own build folder: setuptools copies into build/lib only what is
    # newer there, so a wheel built there once would ship a module since changed (or removed)
    source = tmp_path / "source"
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".*", "build", "*.egg-info", "__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(source), "-w", wheels],
        check=True,
        capture_output=True,
        cwd=tmp_path,
    )
    [wheel] = wheels.glob("harness-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [venv / "bin" / "python", "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
    )
    # The dependencies come from this venv's site-packages, listed as a plain path: its .pth files
    # (the editable install of this checkout among them) are not processed, so harness is the wheel's.
    [packages] = (venv / "lib").glob("python3*/site-packages")
    (packages / "deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(ROOT / "examples", elsewhere / "examples")
    env = {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HOME": str(tmp_path),
        "HARNESS_RUN_ID": run_label,
        "HARNESS_STATE_DIR": str(tmp_path / "state"),
        "XDG_CONFIG_HOME": str(tmp_path / "config"),
    }

    def harness(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(venv / "bin" / "harness"), *args], cwd=elsewhere, env=env, capture_output=True, text=True, timeout=240
        )

    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import harness, sandbox; print(harness.__file__, sandbox.__file__)"],
        env=env,
        cwd=elsewhere,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert str(ROOT) not in where and str(packages) in where, where
    assert (packages / "sandbox" / "docker" / "hosts.txt").is_file(), "a call's /etc/hosts ships with the wheel"
    built = harness("images", "build")
    assert built.returncode == 0, built.stderr
    listed = harness("images", "list", "--json")
    assert listed.returncode == 0 and '"missing"' not in listed.stdout and '"stale"' not in listed.stdout, listed.stdout
    ran = harness("exec", "examples/calc", "--", "python3", "-c", "print('inside')")
    assert ran.returncode == 0 and "inside" in ran.stdout, ran.stdout + ran.stderr
    fixed = harness(
        "run",
        "--image",
        "py311",
        "--model",
        "scripted:examples/calc-fix.yaml",
        "examples/calc",
        "--task",
        "Fix the failing tests in calc.",
        "--verify",
        "python3 -m pytest -q",
        "--json",
    )
    assert fixed.returncode == 0 and '"outcome": "verified"' in fixed.stdout, fixed.stdout + fixed.stderr
