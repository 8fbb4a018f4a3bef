import pytest

from harness.config import load_config
from harness.errors import ConfigError
from sandbox.named import NamedFileError


def test_defaults_without_any_file(tmp_path):
    config = load_config(None, {"model": "scripted:x.yaml"}, repo=tmp_path)
    assert config.limits.max_steps == 40
    assert config.gate.read_only_paths == ["tests/"]
    assert config.spec().image == "py311"


def test_file_then_flags_override(tmp_path):
    file = tmp_path / "config.toml"
    file.write_text("""
model = "openai:gpt-4.1"
verify = "pytest -q"
[limits]
max_steps = 12
max_cost_usd = 1.5
[providers.openai]
base_url = "http://127.0.0.1:9/v1"
api_key_env = "MY_KEY"
""")
    config = load_config(file, {"limits.max_steps": 5, "limits.max_cost_usd": None, "base_url": None})
    assert config.limits.max_steps == 5 and config.limits.max_cost_usd == 1.5
    entry = config.provider_config()
    assert entry.base_url == "http://127.0.0.1:9/v1" and entry.api_key_env == "MY_KEY"
    assert load_config(file, {"base_url": "http://x/v1"}).provider_config().base_url == "http://x/v1"


def test_unknown_keys_and_bad_values_are_one_line_errors(tmp_path):
    file = tmp_path / "config.toml"
    file.write_text("[limits]\nmax_stepz = 3\n")
    with pytest.raises(ConfigError, match=r"limits\.max_stepz"):
        load_config(file)
    file.write_text("not toml = = =")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(file)
    with pytest.raises(NamedFileError, match="cannot open it"):
        load_config(tmp_path / "missing.toml")


def test_never_loaded_from_the_repository_under_test(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "config.toml").write_text('verify = "true"\n')
    with pytest.raises(ConfigError, match="inside the repository"):
        load_config(repo / "config.toml", repo=repo)


def test_session_settings_are_one_sub_model_spelled_flat_or_as_a_table(tmp_path):
    from harness.config import with_overrides

    flat = tmp_path / "flat.toml"
    flat.write_text('setup = ["pip install -e ."]\nsetup_network = true\nworkspace_quota = "2g"\n')
    table = tmp_path / "table.toml"
    table.write_text('[session]\nsetup = ["pip install -e ."]\nsetup_network = true\nworkspace_quota = "2g"\n')
    assert load_config(flat).session == load_config(table).session
    assert load_config(flat).session.workspace_quota == 2 * 1024**3
    # a flag goes over the file whichever way the file spells the key
    assert load_config(table, {"setup": ["npm ci"]}).session.setup == ["npm ci"]
    # what a run saves (nested) and what earlier runs saved (flat) both read back the same
    saved = load_config(table).model_dump(mode="json")
    assert "session" in saved and "setup" not in saved
    older = {**{k: v for k, v in saved.items() if k != "session"}, **saved["session"]}
    assert with_overrides(saved, {}).session == with_overrides(older, {}).session == load_config(flat).session
    both = tmp_path / "both.toml"
    both.write_text('setup = ["a"]\n[session]\nsetup = ["b"]\n')
    with pytest.raises(ConfigError, match="given both at the top level and in"):
        load_config(both)
