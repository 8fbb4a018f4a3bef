"""The box's config: a TOML file, a mapping or the defaults; every mistake names the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import ConfigError
from harness.integrations.box import Box, BoxConfig, load_config


def test_a_toml_file_resolves_paths_against_its_folder(tmp_path: Path) -> None:
    config = tmp_path / "conf" / "harness.toml"
    config.parent.mkdir()
    config.write_text('[harness]\nrepo = "../repo"\nstate_dir = "sessions"\nmemory = "512m"\nwritable_root = false\n')
    loaded = load_config(config)
    assert loaded.repo == (tmp_path / "repo").resolve()
    assert loaded.state_dir == (tmp_path / "conf" / "sessions").resolve()
    assert loaded.memory == 512 * 1024**2 and loaded.writable_root is False
    assert load_config(None) == BoxConfig() and load_config({"image": "x"}).image == "x"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[harness]\nmemroy = 1\n", "harness.toml: memroy: Extra inputs are not permitted"),
        ("[harness]\ntimeout_s = -1\n", "harness.toml: timeout_s: Input should be greater than 0"),
        ("[harness\n", "harness.toml is not valid TOML"),
        ("harness = 3\n", "[harness] must be a table"),
    ],
)
def test_a_bad_file_says_where(tmp_path: Path, text: str, expected: str) -> None:
    config = tmp_path / "harness.toml"
    config.write_text(text)
    with pytest.raises(ConfigError, match=expected.replace("[", r"\[").replace("]", r"\]")):
        load_config(config)


def test_a_missing_file_or_a_bad_mapping(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"the harness sandbox config .*nope.toml: cannot open it"):
        load_config(tmp_path / "nope.toml")
    with pytest.raises(ConfigError, match="harness sandbox config: cpus"):
        load_config({"cpus": 0})


@pytest.mark.docker
def test_a_missing_image_fails_before_anything_is_made(tmp_path: Path, run_label: str) -> None:
    from sandbox.errors import SandboxError

    with pytest.raises(SandboxError, match="no-such-image"):
        Box(BoxConfig(image="no-such-image:1", state_dir=tmp_path / "s", run_id=run_label))
    assert not (tmp_path / "s").exists() or list((tmp_path / "s").iterdir()) == []
