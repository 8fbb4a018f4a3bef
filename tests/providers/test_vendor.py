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
    assert {p for p, v in VENDORS.items() if v.key_required} == {"openai", "openai-responses", "anthropic", "gemini"}
    assert {p for p, v in VENDORS.items() if v.networked} == {
        "openai",
        "openai-responses",
        "anthropic",
        "bedrock",
        "vertex",
        "gemini",
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


def test_a_model_may_name_the_hosted_agent_it_is_given_before_its_first_colon_only() -> None:
    given = ModelSpec.of("claude-code@anthropic:claude-sonnet-4-6")
    assert (given.agent, given.prefix, given.target) == ("claude-code", "anthropic", "claude-sonnet-4-6")
    assert given.model == "anthropic:claude-sonnet-4-6" and str(given) == "claude-code@anthropic:claude-sonnet-4-6"
    assert given.with_target("x") == "claude-code@anthropic:x"
    vertex = ModelSpec.of("vertex:claude-sonnet-4-5@20250929")  # a Vertex model's own @ is its target's
    assert (vertex.agent, vertex.prefix, vertex.target) == ("", "vertex", "claude-sonnet-4-5@20250929")


def test_a_model_only_a_hosted_agent_speaks_is_refused_for_harness_own_loop_saying_which() -> None:
    with pytest.raises(ConfigError, match="--agent gemini"):
        make_provider("gemini:gemini-2.5-pro", api_key="k")
