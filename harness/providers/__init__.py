"""Model providers: the `Provider` seam, its config and factory, and the single retry policy.

`make_provider("openai:gpt-4.1" | "anthropic:MODEL" | "scripted:FILE" | "replay:SESSION", config,
api_key=...)` builds one; the SDK-backed modules are imported only when named.
"""

from harness.providers.base import (
    ModelPrice,
    Provider,
    ProviderConfig,
    RetryConfig,
    make_provider,
    parse_spec,
    register_provider,
)

__all__ = [
    "ModelPrice",
    "Provider",
    "ProviderConfig",
    "RetryConfig",
    "make_provider",
    "parse_spec",
    "register_provider",
]
