"""Setup on real projects, end to end through `harness exec --session` and the real engine:

- a Python package whose dependency comes from the package index through this machine's HTTPS
  proxy (its CA bundle given with --setup-ca), then its tests offline in tool calls;
- the same offline, from a wheelhouse bound with --setup-mount;
- a Node project whose `npm ci` installs a dev dependency from the npm registry, then `npm test`;
- a Go module and a Rust crate (standard library only) with `--setup auto`.

Setup may reach a package registry (an install); tool calls never have network, CA or proxy.
Each repository carries this test run's id in a dependency file, so no earlier run's cached setup
image can stand in for the install."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox.docker import images
from tests.cli_process import run_cli

HARNESS = str(Path(sys.executable).parent / "harness")
PROJECTS = Path(__file__).resolve().parents[1] / "integrations" / "projects"
CA_BUNDLE = os.environ.get("SSL_CERT_FILE") or "/etc/ssl/certs/ca-certificates.crt"
pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture(scope="module", autouse=True)
def _images(docker_client) -> None:
    for name in ("py311", "node", "go", "rust"):
        images.build(docker_client, name)


def harness(*args: str, run_label: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HARNESS_RUN_ID": run_label, "COLUMNS": "200"}
    return run_cli(args, env=env, timeout=540, console=True)


def python_package(root: Path, run_label: str, dependency: str = "six") -> Path:
    (root / "src" / "greet").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "greet"\nversion = "0.1.0"\ndescription = "test run {run_label}"\n'
        f'dependencies = ["{dependency}"]\n'
    )
    module = dependency.replace("-", "_")
    (root / "src" / "greet" / "__init__.py").write_text(
        f"import {module}\n\n\ndef hello(name):\n    return 'hello ' + name\n"
    )
    (root / "tests" / "test_greet.py").write_text(
        "from greet import hello\n\n\ndef test_hello():\n    assert hello('x') == 'hello x'\n"
    )
    return root


def session_setup(state: Path, session: str) -> dict:
    return json.loads((state / session / "session.json").read_text())["setup"]


def test_a_dependency_from_the_index_through_the_proxy_ca(tmp_path: Path, run_label: str) -> None:
    repo = python_package(tmp_path / "repo", run_label)
    state = tmp_path / "state"
    ran = harness(
        "exec", "--session", "index", "--state-dir", str(state), "--setup", "auto", "--setup-network",
        "--setup-ca", CA_BUNDLE, str(repo), "--", "python3", "-m", "pytest", "-q",
        run_label=run_label,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr + ran.stdout
    assert "setup: `python3 -m pip install -e .` (detected: pyproject.toml declares a package)" in ran.stderr
    assert "1 passed" in ran.stdout
    record = session_setup(state, "index")
    assert record["ca_sha256"] and record["network_mode"] == "bridge" and not record["cached"]

    # Tool calls: the package is installed (a venv first on PATH), and there is no CA, proxy or network.
    probe = (
        "import os, socket, six, greet\n"
        "print(sorted(k for k in os.environ if 'CERT' in k or 'CA_BUNDLE' in k or 'PROXY' in k.upper()))\n"
        "try:\n    socket.create_connection(('pypi.org', 443), 3)\n    print('online')\n"
        "except OSError:\n    print('offline')\n"
    )
    after = harness("exec", "--session", "index", "--state-dir", str(state), str(repo), "--", "python3", "-c", probe,
                    run_label=run_label)  # fmt: skip
    assert after.returncode == 0, after.stderr
    assert after.stdout.split("--- stdout ---")[-1].split() == ["[]", "offline"]


def test_without_the_ca_the_setup_fails_naming_the_command(tmp_path: Path, run_label: str) -> None:
    repo = python_package(tmp_path / "repo", f"{run_label}-no-ca")
    ran = harness(
        "exec", "--session", "noca", "--state-dir", str(tmp_path / "state"), "--setup", "python3 -m pip install -e .",
        "--setup-network", str(repo), "--", "true",
        run_label=run_label,
    )  # fmt: skip
    assert ran.returncode == 75, ran.stderr
    lines = ran.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: setup command 'python3 -m pip install -e .' exited 1:")
    assert "certificate" in lines[0].lower(), "the first line names the TLS failure, not pip's closing lines"


def test_offline_from_a_wheelhouse_mount(tmp_path: Path, run_label: str) -> None:
    dep = tmp_path / "dep"
    (dep / "harnessdep").mkdir(parents=True)
    (dep / "harnessdep" / "__init__.py").write_text("VALUE = 42\n")
    (dep / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "harnessdep"\nversion = "1.0"\n'
    )
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(dep)],
        check=True,
        capture_output=True,
    )
    repo = python_package(tmp_path / "repo", run_label, dependency="harnessdep")
    state = tmp_path / "state"
    install = "python3 -m pip install --no-index --find-links /wheels --no-build-isolation -e ."
    ran = harness(
        "exec", "--session", "wheels", "--state-dir", str(state), "--setup", install,
        "--setup-mount", f"{wheels}:/wheels", str(repo), "--", "python3", "-m", "pytest", "-q",
        run_label=run_label,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr + ran.stdout
    assert "1 passed" in ran.stdout
    record = session_setup(state, "wheels")
    assert record["network_mode"] == "none" and record["mounts"] == [f"{wheels}:/wheels"]
    gone = harness("exec", "--session", "wheels", "--state-dir", str(state), str(repo), "--", "ls", "-A", "/wheels",
                   run_label=run_label)  # fmt: skip
    assert gone.returncode == 0 and "--- stdout ---" not in gone.stdout  # the wheelhouse was there for setup only


def test_a_node_project_installs_its_dev_dependency_then_runs_npm_test(tmp_path: Path, run_label: str) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(PROJECTS / "node", repo)
    manifest = json.loads((repo / "package.json").read_text())
    manifest["description"] += f" (test run {run_label})"
    (repo / "package.json").write_text(json.dumps(manifest, indent=2) + "\n")
    state = tmp_path / "state"
    ran = harness(
        "exec", "--image", "node", "--session", "node", "--state-dir", str(state), "--setup", "auto",
        "--setup-network", "--setup-ca", CA_BUNDLE, str(repo), "--", "npm", "test",
        run_label=run_label,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr + ran.stdout
    assert "setup: `npm ci` (detected: package.json with package-lock.json)" in ran.stderr
    assert "# pass 1" in ran.stdout and "# fail 0" in ran.stdout
    assert not (state / "node" / "workspace" / "node_modules").exists()  # kept in the image, not the workspace


@pytest.mark.parametrize(
    ("project", "image", "command", "passed"),
    [
        ("go", "go", ["go", "test", "./..."], "example.com/harness/mathx"),
        ("rust", "rust", ["cargo", "test"], "test tests::gcd_of_known_pairs ... ok"),
    ],
)
def test_go_and_rust_with_setup_auto(
    tmp_path: Path, run_label: str, project: str, image: str, command: list[str], passed: str
) -> None:
    repo = tmp_path / "repo"
    shutil.copytree(PROJECTS / project, repo)
    manifest = repo / ("go.mod" if project == "go" else "Cargo.toml")
    manifest.write_text(manifest.read_text() + ("\n// " if project == "go" else "\n# ") + f"test run {run_label}\n")
    ran = harness(
        "exec", "--image", image, "--session", project, "--state-dir", str(tmp_path / "state"), "--setup", "auto",
        str(repo), "--", *command,
        run_label=run_label,
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr + ran.stdout
    assert any(line.startswith("ok") or line.endswith("... ok") for line in ran.stdout.splitlines() if passed in line)


def test_the_proxy_reaches_setup_only_and_is_recorded_without_its_password(tmp_path: Path, run_label: str) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "requirements.txt").write_text(f"# test run {run_label}\n")
    state = tmp_path / "state"
    proxy = "http://builder:s3cret-pw@proxy.invalid:3128"
    ran = harness(
        "exec", "--session", "proxy", "--state-dir", str(state), "--setup", "env | grep -i _proxy > /var/tmp/seen",
        "--setup-network", "--setup-proxy", proxy, str(repo), "--", "sh", "-c", "cat /var/tmp/seen; env | grep -ci proxy",
        run_label=run_label,
    )  # fmt: skip
    out = ran.stdout.split("--- stdout ---")[-1].split()
    assert f"HTTPS_PROXY={proxy}" in out and f"http_proxy={proxy}" in out  # what setup saw
    assert out[-1] == "0"  # a tool call's own environment has no proxy
    text = (state / "proxy" / "session.json").read_text()
    assert "s3cret-pw" not in text and "http://builder:***@proxy.invalid:3128" in text
