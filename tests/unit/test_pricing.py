"""Putting dollars on usage: the agent's figure, the override table, genai-prices, an estimate.

List prices asserted here are those bundled in genai-prices 0.2.3 (pinned in
pyproject.toml): Claude Sonnet 4.5 $3 in / $15 out / $0.30 cache read / $3.75 cache
write; GPT-5 and Gemini 2.5 Pro $1.25 in / $10 out / $0.125 cache read, per million tokens.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from tasks.agents.pricing import (
    ESTIMATE_RATES,
    PriceConfigError,
    Rates,
    load_overrides,
    parse_overrides,
    price,
)
from tasks.agents.usage import Usage

M = 1_000_000


def usage(model, inp=0, out=0, read=0, write=0, cost=None, source="unpriced"):
    return Usage(model, inp, out, read, write, 0, cost, source)


@pytest.mark.parametrize(
    "bill, provider, overrides, dollars, source",
    [
        pytest.param(
            usage("claude-sonnet-4-5", M, M, M, M, Decimal("9.99"), "agent"),
            None,
            None,
            Decimal("9.99"),
            "agent",
            id="dollars the agent reported are kept",
        ),
        pytest.param(
            usage("claude-sonnet-4-5-20250929", M, M, M, M),
            None,
            None,
            Decimal("22.05"),
            "computed",
            id="claude tokens priced by genai-prices, cache kinds apart",
        ),
        pytest.param(
            usage("gpt-5", 2 * M, M, 4 * M),
            "openai",
            None,
            Decimal("13.00"),
            "computed",
            id="codex tokens priced with the provider given",
        ),
        pytest.param(
            usage("gemini-2.5-pro", 3 * M, M, M),
            None,
            None,
            Decimal("13.875"),
            "computed",
            id="summed input over 200k still priced at the base tier",
        ),
        pytest.param(
            usage("anthropic/claude-sonnet-4-5", M),
            None,
            None,
            Decimal("3"),
            "computed",
            id="opencode provider/model refs are split",
        ),
        pytest.param(
            usage("claude-opus-4-6[1m]", 0, M),
            None,
            None,
            Decimal("25"),
            "computed",
            id="claude's [1m] context suffix is dropped",
        ),
        pytest.param(
            usage("my-local-coder", M, M, M),
            None,
            {"my-local-coder": {"input_per_mtok": 0.2, "output_per_mtok": 0.6}},
            Decimal("1.0"),
            "computed",
            id="override with cache rates defaulting to input",
        ),
        pytest.param(
            usage("openai/gpt-5", M),
            None,
            {"gpt-5": {"input_per_mtok": 1, "output_per_mtok": 2, "cache_read_per_mtok": 0}},
            Decimal("1"),
            "computed",
            id="override wins over the library and matches the bare name",
        ),
        pytest.param(
            usage("my-local-coder", M, M, M, M),
            None,
            None,
            Decimal("110.25"),
            "estimated",
            id="unknown model is estimated at the conservative rates",
        ),
        pytest.param(
            usage(None, 0, M),
            None,
            None,
            Decimal("75"),
            "estimated",
            id="no model is estimated at the conservative rates",
        ),
        pytest.param(
            usage("gpt-5"),
            None,
            None,
            Decimal("0"),
            "estimated",
            id="no tokens cost nothing",
        ),
    ],
)
def test_price(bill, provider, overrides, dollars, source):
    priced = price(bill, provider=provider, overrides=overrides)
    assert priced.cost_usd == dollars
    assert priced.cost_source == source
    assert priced.input_tokens == bill.input_tokens


def test_estimate_rates_are_the_documented_ones():
    expected = Rates(Decimal(15), Decimal(75), Decimal("1.5"), Decimal("18.75"))
    assert expected == ESTIMATE_RATES


@pytest.mark.parametrize(
    "raw, message",
    [
        pytest.param({"m": {"input_per_mtok": 1}}, "`output_per_mtok` is required", id="missing"),
        pytest.param(
            {"m": {"input_per_mtok": 1, "output_per_mtok": -2}}, "must be a number", id="negative"
        ),
        pytest.param(
            {"m": {"input_per_mtok": "x", "output_per_mtok": 2}}, "must be a number", id="text"
        ),
        pytest.param(
            {"m": {"input_per_mtok": 1, "output_per_mtok": 2, "input": 3}},
            "unknown key 'input'",
            id="key typo",
        ),
        pytest.param({"m": 3}, "must be a mapping", id="not a mapping"),
    ],
)
def test_bad_overrides_say_which_model_and_field(raw, message):
    with pytest.raises(PriceConfigError, match="price for 'm'") as caught:
        parse_overrides(raw)
    assert message in str(caught.value)


def test_shipped_override_file_loads_empty():
    assert load_overrides() == {}


def test_override_file_is_read(tmp_path: Path):
    path = tmp_path / "prices.yml"
    path.write_text(
        "mine:\n  input_per_mtok: 1\n  output_per_mtok: 4\n  cache_read_per_mtok: 0.1\n"
    )
    rates = load_overrides(path)["mine"]
    assert rates == Rates(Decimal(1), Decimal(4), Decimal("0.1"), Decimal(1))
