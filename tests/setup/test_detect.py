"""`--setup auto`: what a repository's layout says to install, and the setup options' rules."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.config import RunConfig
from harness.environment.detect import detect_setup
from sandbox.named import NamedFileError
from sandbox.session.records import SessionConfig
from sandbox.session.setup import read_ca
from sandbox.settings import parse_setup_mount, redact_url


def _repo(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


@pytest.mark.parametrize(
    ("files", "commands", "why"),
    [
        (
            {"pyproject.toml": "[project]\nname='x'\n"},
            ["python3 -m pip install -e ."],
            "pyproject.toml declares a package",
        ),
        (
            {"setup.py": "", "requirements-dev.txt": "pytest\n"},
            ["python3 -m pip install -e .", "python3 -m pip install -r requirements-dev.txt"],
            "setup.py, requirements-dev.txt",
        ),
        ({"requirements.txt": "six\n"}, ["python3 -m pip install -r requirements.txt"], "requirements.txt"),
        ({"package.json": "{}", "package-lock.json": "{}"}, ["npm ci"], "package.json with package-lock.json"),
        ({"package.json": "{}"}, ["npm install"], "package.json without a lockfile"),
        ({"go.mod": "module x\n"}, ["go mod download"], "go.mod"),
        ({"Cargo.toml": "[package]\n"}, ["cargo fetch"], "Cargo.toml"),
    ],
)
def test_the_layout_names_the_install(tmp_path: Path, files: dict[str, str], commands: list[str], why: str) -> None:
    assert detect_setup(_repo(tmp_path, files)) == (commands, why)


def test_nothing_to_install_and_untrusted_files(tmp_path: Path) -> None:
    assert detect_setup(_repo(tmp_path, {"pyproject.toml": "[tool.ruff]\nline-length = 1\n"})) is None  # no package
    (tmp_path / "go.mod").write_text("module x\n")
    both = _repo(tmp_path, {"setup.py": "", "package.json": "{}"})
    assert detect_setup(both, "javascript") == (["npm install"], "package.json without a lockfile")
    assert detect_setup(both, "python") == (["python3 -m pip install -e ."], "setup.py")
    (tmp_path / "package.json").unlink()
    (tmp_path / "setup.py").unlink()
    (tmp_path / "go.mod").unlink()
    (tmp_path / "secret").write_text("[project]\n")
    (tmp_path / "setup.py").symlink_to(tmp_path / "secret")  # never read through a link
    (tmp_path / "package.json").write_text("[1, 2]")  # not a package manifest
    assert detect_setup(tmp_path) is None


def test_setup_options_need_setup_and_network() -> None:
    with pytest.raises(ValueError, match="need at least one --setup command"):
        RunConfig(setup_mounts=["/w:/wheels"])
    with pytest.raises(ValueError, match="add --setup-network"):
        RunConfig(setup=["pip install x"], setup_proxy="http://proxy:3128")
    config = RunConfig(setup=["pip install x"], setup_network=True, setup_proxy="http://me:s3cret-pw@proxy:3128")
    assert (
        "s3cret-pw" not in config.model_dump_json() and config.session.setup_proxy == "http://me:s3cret-pw@proxy:3128"
    )


def test_mounts_ca_and_redaction(tmp_path: Path) -> None:
    assert parse_setup_mount("/srv/wheels:/wheels") == (Path("/srv/wheels"), "/wheels")
    for bad in ("/srv/wheels", "/srv:relative", "/srv:/workspace", "/srv:/workspace/x", ":/x"):
        with pytest.raises(ValueError):
            parse_setup_mount(bad)
    assert redact_url("https://user:s3cret@proxy.example:8080/") == "https://user:***@proxy.example:8080/"
    assert redact_url("http://proxy:3128") == "http://proxy:3128"
    recorded = SessionConfig(setup=["pip install x"], setup_network=True, setup_proxy="http://u:s3cret@p:1")
    assert "s3cret" not in recorded.model_dump_json()
    (tmp_path / "not.pem").write_text("hello")
    with pytest.raises(NamedFileError, match=r"^--setup-ca .*no PEM certificate"):
        read_ca(tmp_path / "not.pem")
    with pytest.raises(NamedFileError, match=r"^--ca-bundle .*missing.pem: cannot open it"):
        read_ca(tmp_path / "missing.pem", "--ca-bundle")
