"""Build a provider from a `PREFIX:TARGET` spec: the registry of prefixes, lazily imported modules,
and the retry policy and price table around networked ones."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from harness.errors import ConfigError
from harness.providers.config import ProviderConfig, check_base_url
from harness.providers.protocol import Provider

ProviderFactory = Callable[[str, ProviderConfig, "str | None"], Provider]
"""(target after the prefix, config, api key) -> Provider."""

_FACTORIES: dict[str, ProviderFactory] = {}
# Providers whose module registers itself on import; imported only when first named.
_LAZY_MODULES = {
    "openai": "harness.providers.openai_compat",
    "openai-responses": "harness.providers.openai_responses",
    "anthropic": "harness.providers.anthropic",
    "bedrock": "harness.providers.anthropic_cloud",
    "vertex": "harness.providers.anthropic_cloud",
    "scripted": "harness.providers.scripted",
    "replay": "harness.providers.replay",
    "reference": "harness.providers.reference",
}
# Providers that talk to a network endpoint get the retry policy; canned ones do not need it.
_NETWORK_PREFIXES = {"openai", "openai-responses", "anthropic", "bedrock", "vertex"}


def register_provider(prefix: str, factory: ProviderFactory) -> None:
    """Make `PREFIX:TARGET` specs build providers with `factory` (e.g. `replay`)."""
    _FACTORIES[prefix] = factory


def parse_spec(spec: str) -> tuple[str, str]:
    """Split `prefix:target`; raise ConfigError when the form is wrong."""
    prefix, sep, target = spec.partition(":")
    if prefix == "reference" and sep and not target:
        raise ConfigError(
            "reference: needs a task's reference file: use `harness batch --model reference:` on mined tasks "
            "(each task names its own), or reference:PATH/reference.json"
        )
    if not sep or not prefix or not target:
        raise ConfigError(
            f"model spec {spec!r} must look like openai:MODEL, openai-responses:MODEL, anthropic:MODEL, "
            "bedrock:MODEL, vertex:MODEL or scripted:FILE"
        )
    return prefix, target


def make_provider(
    spec: str,
    config: ProviderConfig | None = None,
    *,
    api_key: str | None,
    sleep: Callable[[float], None] | None = None,
) -> Provider:
    """Build the provider named by `spec`, wrapped in the retry policy and priced when networked.

    `api_key` comes from the CLI (environment or user config); `sleep` is injectable for tests.
    """
    from harness.providers.pricing import PriceTable
    from harness.providers.retry import RetryingProvider, RetryPolicy

    prefix, target = parse_spec(spec)
    config = config or ProviderConfig()
    check_base_url(config.base_url)
    if prefix not in _FACTORIES and prefix in _LAZY_MODULES:
        try:
            importlib.import_module(_LAZY_MODULES[prefix])
        except ModuleNotFoundError as error:
            raise ConfigError(f"model provider {prefix!r} is not available ({error.name} missing)") from error
    factory = _FACTORIES.get(prefix)
    if factory is None:
        known = ", ".join(sorted(set(_FACTORIES) | set(_LAZY_MODULES)))
        raise ConfigError(f"unknown model provider {prefix!r} (known: {known})")
    provider = factory(target, config, api_key)
    if prefix not in _NETWORK_PREFIXES:
        return provider
    policy = RetryPolicy(config.retry, sleep=sleep) if sleep else RetryPolicy(config.retry)
    return RetryingProvider(provider, policy, PriceTable(config.prices, vendor=prefix))
