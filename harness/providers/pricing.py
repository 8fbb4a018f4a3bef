"""Cost of model usage: config overrides first, then the maintained `genai-prices` table.

Our `Usage` and genai-prices agree on the normalisation: input tokens include cached ones, and
cache reads/writes are the priced sub-parts. An unknown model costs 0 and is flagged (`known=False`).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict

from harness.providers.config import ModelPrice
from harness.types import Usage

# genai-prices provider ids for our spec prefixes; OpenAI-compatible servers often host other
# vendors' models, so for those we also let genai-prices guess from the model name.
_VENDOR_IDS = {
    "openai": "openai",
    "openai-responses": "openai",
    "anthropic": "anthropic",
    "bedrock": "aws",
    "vertex": "google",
    "gemini": "google",
}


class Cost(BaseModel):
    """The price of some usage; `known` is False when no price table had the model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    usd: float = 0.0
    known: bool = True


class PriceTable:
    """Prices usage for one vendor, with per-model overrides from `ProviderConfig.prices`."""

    def __init__(self, overrides: Mapping[str, ModelPrice] | None = None, *, vendor: str | None = None) -> None:
        self._overrides = dict(overrides or {})
        self._vendor = _VENDOR_IDS.get(vendor or "")

    def cost(self, model: str, usage: Usage) -> Cost:
        """USD cost of `usage` on `model` (0 and known=False when the model has no price)."""
        if usage == Usage():
            return Cost(usd=0.0, known=True)
        override = self._overrides.get(model)
        if override is not None:
            return Cost(usd=_override_cost(override, usage), known=True)
        return self._table_cost(model, usage)

    def _table_cost(self, model: str, usage: Usage) -> Cost:
        import genai_prices  # ~130 ms to import: only when a price is first needed, not at start-up

        priced = genai_prices.Usage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            cache_read_tokens=usage.cached_input_tokens,
            cache_write_tokens=usage.cache_write_tokens,
        )
        for provider_id in (self._vendor, None) if self._vendor else (None,):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    result = genai_prices.calc_price(priced, model, provider_id=provider_id)
            except LookupError:
                continue
            return Cost(usd=float(result.total_price), known=True)
        return Cost(usd=0.0, known=False)


def _override_cost(price: ModelPrice, usage: Usage) -> float:
    cached = usage.cached_input_tokens
    written = usage.cache_write_tokens
    uncached = max(usage.input_tokens - cached - written, 0)
    cached_price = price.input_per_mtok if price.cached_input_per_mtok is None else price.cached_input_per_mtok
    write_price = price.input_per_mtok if price.cache_write_per_mtok is None else price.cache_write_per_mtok
    total = (
        uncached * price.input_per_mtok
        + cached * cached_price
        + written * write_price
        + usage.output_tokens * price.output_per_mtok
    )
    return total / 1_000_000


def model_price_known(spec: str, prices: Mapping[str, ModelPrice] | None = None) -> bool:
    """Whether a `PREFIX:MODEL` spec has a price (a config override or the table's); an offline model
    (scripted, replay, reference) costs what its script says: known."""
    from harness.providers.vendor import ModelSpec

    model = ModelSpec.of(spec)
    if not model.vendor.networked:
        return True
    return PriceTable(prices, vendor=model.prefix).cost(model.target, Usage(input_tokens=1000)).known
