"""`PROVIDER:MODEL` has one owner: the spec's parts, the forms refused, and the one table of vendors
that the factory, the key lookup and the endpoint fallbacks all read."""

from __future__ import annotations

import pytest

from harness.cli import environment
from harness.config import RunConfig
from harness.errors import ConfigError
from harness.providers.config import ProviderConfig
from harness.providers.factory import make_provider
from harness.providers.vendor import UNKNOWN, VENDORS, ModelSpec, prefix_of


def test_a_spec_splits_at_its_first_colon_only() -> None:
    spec = ModelSpec.parse("openai:qwen2.5-coder:7b")
    assert (spec.prefix, spec.target, str(spec)) == ("openai", "qwen2.5-coder:7b", "openai:qwen2.5-coder:7b")
    assert spec.with_target("/abs/file") == "openai:/abs/file"
    assert prefix_of("vertex:claude-sonnet-4-6@20250929") == "vertex" and prefix_of(None) == ""


@pytest.mark.parametrize("text", ["gpt-4.1", "openai:", ":gpt-4.1", ""])
def test_a_malformed_spec_is_a_config_error_naming_the_forms(text: str) -> None:
    with pytest.raises(ConfigError, match="must look like openai:MODEL"):
        ModelSpec.parse(text)


def test_a_bare_reference_says_where_its_file_comes_from() -> None:
    with pytest.raises(ConfigError, match="needs a task's reference file"):
        ModelSpec.parse("reference:")


def test_an_unknown_prefix_is_unknown_to_the_table_and_to_the_factory() -> None:
    assert ModelSpec.of("mystery:model").vendor is UNKNOWN
    with pytest.raises(ConfigError, match="unknown model provider 'mystery'"):
        make_provider("mystery:model", api_key=None)


def test_the_table_says_which_vendors_need_a_key_and_where_it_usually_is() -> None:
    assert {p for p, v in VENDORS.items() if v.key_required} == {"openai", "openai-responses", "anthropic"}
    assert {p for p, v in VENDORS.items() if v.networked} == {
        "openai",
        "openai-responses",
        "anthropic",
        "bedrock",
        "vertex",
    }
    assert {p for p, v in VENDORS.items() if v.file_target} == {"scripted", "reference", "reference-change"}
    assert VENDORS["anthropic"].key_env == "ANTHROPIC_API_KEY" and VENDORS["vertex"].key_env is None


def test_a_key_variable_named_in_the_config_beats_the_vendors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEAM_KEY", "k-team")
    monkeypatch.setenv("OPENAI_API_KEY", "k-default")
    config = RunConfig(providers={"openai": ProviderConfig(api_key_env="TEAM_KEY")})
    assert environment.model_key("openai:gpt-4.1", config) == ("TEAM_KEY", "k-team")
    assert environment.model_key("openai-responses:gpt-5", config) == ("OPENAI_API_KEY", "k-default")
    assert environment.model_key("scripted:file.yaml", config) == (None, None)
