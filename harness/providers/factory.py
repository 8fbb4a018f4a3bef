"""Build a provider from a `PREFIX:TARGET` spec: the registry of factories (each module registers its
own, imported when its prefix is first named: see `harness.providers.vendor`), and the retry policy
and price table around networked ones."""

from __future__ import annotations

import importlib
from collections.abc import Callable

from harness.errors import ConfigError
from harness.providers.config import ProviderConfig, check_base_url
from harness.providers.protocol import Provider
from harness.providers.vendor import VENDORS, ModelSpec

ProviderFactory = Callable[[str, ProviderConfig, "str | None"], Provider]
"""(target after the prefix, config, api key) -> Provider."""

_FACTORIES: dict[str, ProviderFactory] = {}
"""Factories by prefix; a provider's module registers its own on import (imported when first named)."""


def register_provider(prefix: str, factory: ProviderFactory) -> None:
    """Make `PREFIX:TARGET` specs build providers with `factory` (e.g. `replay`)."""
    _FACTORIES[prefix] = factory


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
    parsed = ModelSpec.parse(spec)
    prefix, vendor = parsed.prefix, parsed.vendor
    if vendor.hosted_by:
        raise ConfigError(
            f"{prefix}: models are given to a hosted agent (`--agent {vendor.hosted_by} --model {spec}`): "
            "harness's own loop speaks OpenAI's and Anthropic's APIs"
        )
    config = config or ProviderConfig()
    check_base_url(config.base_url)
    if prefix not in _FACTORIES and vendor.module:
        try:
            importlib.import_module(vendor.module)
        except ModuleNotFoundError as error:
            raise ConfigError(f"model provider {prefix!r} is not available ({error.name} missing)") from error
    factory = _FACTORIES.get(prefix)
    if factory is None:
        known = ", ".join(sorted(set(_FACTORIES) | set(VENDORS)))
        raise ConfigError(f"unknown model provider {prefix!r} (known: {known})")
    provider = factory(parsed.target, config, api_key)
    if not vendor.networked:
        return provider
    from harness.providers.pricing import PriceTable  # a networked model's only (tenacity loads asyncio)
    from harness.providers.retry import RetryingProvider, RetryPolicy

    policy = RetryPolicy(config.retry, sleep=sleep) if sleep else RetryPolicy(config.retry)
    return RetryingProvider(provider, policy, PriceTable(config.prices, vendor=prefix))
