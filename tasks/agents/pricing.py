"""Put dollars on token usage: the agent's own figure, a price table, or a stated estimate."""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml
from genai_prices import Usage as PriceUsage
from genai_prices import calc_price

from tasks.agents.usage import AGENT, COMPUTED, ESTIMATED, Usage

PRICES_FILE = Path(__file__).resolve().parents[2] / "config" / "prices.yml"
MTOK = Decimal(1_000_000)
# Rates come from pricing a small probe rather than the whole run: a run's tokens are
# summed over many API calls, and the summed input would cross long-context price tiers
# (e.g. above 200k tokens) that no single call reached.
PROBE_TOKENS = 1_000
RATE_KEYS = ("input_per_mtok", "output_per_mtok", "cache_read_per_mtok", "cache_write_per_mtok")


class PriceConfigError(ValueError):
    """A price override is malformed; the message names the model and the field."""


@dataclass(frozen=True)
class Rates:
    """Dollars per million tokens of each billed kind."""

    input: Decimal
    output: Decimal
    cache_read: Decimal
    cache_write: Decimal

    def cost(self, usage: Usage) -> Decimal:
        """Return what the usage costs at these rates."""
        return (
            usage.input_tokens * self.input
            + usage.output_tokens * self.output
            + usage.cache_read_tokens * self.cache_read
            + usage.cache_write_tokens * self.cache_write
        ) / MTOK


# A model no table knows is priced as if it were Claude Opus 4.1 at list price ($15 in,
# $75 out, $1.50 cache read, $18.75 cache write per million tokens): the dearest model in
# common use for coding agents, so a budget stops a run early rather than late.
ESTIMATE_RATES = Rates(
    input=Decimal("15"),
    output=Decimal("75"),
    cache_read=Decimal("1.50"),
    cache_write=Decimal("18.75"),
)


def _rate(model: str, key: str, value: Any) -> Decimal:
    """Read one per-million rate from an override entry."""
    try:
        rate = Decimal(str(value))
    except InvalidOperation:
        rate = Decimal(-1)
    if isinstance(value, bool) or not rate.is_finite() or rate < 0:
        raise PriceConfigError(f"price for {model!r}: `{key}` must be a number ≥ 0, not {value!r}")
    return rate


def parse_overrides(raw: Mapping[str, Any] | None) -> dict[str, Rates]:
    """Check an override table; missing cache rates fall back to the input rate."""
    table: dict[str, Rates] = {}
    for model, entry in (raw or {}).items():
        if isinstance(entry, Rates):
            table[str(model)] = entry
            continue
        if not isinstance(entry, Mapping):
            raise PriceConfigError(f"price for {model!r} must be a mapping of rates")
        unknown = sorted(set(entry) - set(RATE_KEYS))
        if unknown:
            raise PriceConfigError(f"price for {model!r}: unknown key {unknown[0]!r}")
        for required in RATE_KEYS[:2]:
            if required not in entry:
                raise PriceConfigError(f"price for {model!r}: `{required}` is required")
        rates = {key: _rate(str(model), key, entry[key]) for key in RATE_KEYS if key in entry}
        table[str(model)] = Rates(
            input=rates["input_per_mtok"],
            output=rates["output_per_mtok"],
            cache_read=rates.get("cache_read_per_mtok", rates["input_per_mtok"]),
            cache_write=rates.get("cache_write_per_mtok", rates["input_per_mtok"]),
        )
    return table


def load_overrides(path: Path = PRICES_FILE) -> dict[str, Rates]:
    """Read the price override table from config/prices.yml."""
    raw = yaml.safe_load(path.read_text()) if path.exists() else None
    if raw is not None and not isinstance(raw, Mapping):
        raise PriceConfigError(f"{path.name} must be a mapping of model to rates")
    return parse_overrides(raw)


def split_model(model: str, provider: str | None) -> tuple[str | None, str]:
    """Split `provider/model` refs (OpenCode, aider) and drop Claude's `[1m]` suffix."""
    bare = model.split("[", 1)[0].strip()
    if provider is None and "/" in bare:
        prefix, bare = bare.split("/", 1)
        return prefix, bare
    return provider, bare


def _probe_price(model: str, provider: str | None, probe: PriceUsage) -> Decimal:
    """Price one probe with genai-prices, per million tokens."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = calc_price(probe, model_ref=model, provider_id=provider)
    return Decimal(result.total_price) * MTOK / PROBE_TOKENS


def _rates_from_library(model: str, provider: str | None) -> Rates:
    """Derive per-million rates from genai-prices; raise LookupError for unknown models."""
    n = PROBE_TOKENS
    return Rates(
        input=_probe_price(model, provider, PriceUsage(input_tokens=n)),
        output=_probe_price(model, provider, PriceUsage(output_tokens=n)),
        cache_read=_probe_price(model, provider, PriceUsage(input_tokens=n, cache_read_tokens=n)),
        cache_write=_probe_price(model, provider, PriceUsage(input_tokens=n, cache_write_tokens=n)),
    )


@lru_cache(maxsize=256)
def library_rates(model: str, provider: str | None = None) -> Rates | None:
    """Return genai-prices' rates for a model, trying without the provider too, or None."""
    for provider_id in dict.fromkeys((provider, None)):
        try:
            return _rates_from_library(model, provider_id)
        except LookupError:
            continue
    return None


def _override_for(model: str, table: Mapping[str, Rates]) -> Rates | None:
    """Find an override by the full model ref or by the bare model name."""
    _, bare = split_model(model, None)
    return table.get(model) or table.get(bare)


def price(
    usage: Usage, *, provider: str | None = None, overrides: Mapping[str, Any] | None = None
) -> Usage:
    """Return the usage with dollars filled in and cost_source saying where they came from.

    Dollars the agent reported are kept. Otherwise an override for the model wins over
    genai-prices (both "computed"). A model neither knows, or no model at all, is priced
    at ESTIMATE_RATES ("estimated"); no tokens at all cost 0 ("estimated").
    """
    if usage.cost_source == AGENT and usage.cost_usd is not None:
        return usage
    if usage.total_tokens == 0:
        return replace(usage, cost_usd=Decimal(0), cost_source=ESTIMATED)
    rates = None
    if usage.model:
        rates = _override_for(usage.model, parse_overrides(overrides))
        if rates is None:
            provider_id, bare = split_model(usage.model, provider)
            rates = library_rates(bare, provider_id)
    if rates is None:
        return replace(usage, cost_usd=ESTIMATE_RATES.cost(usage), cost_source=ESTIMATED)
    return replace(usage, cost_usd=rates.cost(usage), cost_source=COMPUTED)
