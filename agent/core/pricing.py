"""Model prices in USD per million tokens, for the token and cost meter.

Cache writes cost 1.25x the input price and cache reads 0.1x (5-minute cache), as Anthropic
bills them. Unknown models (a proxy, Ollama, vLLM) cost 0: we would rather show no cost than
a made-up one.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Price:
    input: float
    output: float


# Longest prefix wins, so dated snapshots ("claude-haiku-4-5-20251001") match their family.
PRICES: dict[str, Price] = {
    "claude-opus-4-5": Price(5.0, 25.0),
    "claude-opus-4-1": Price(15.0, 75.0),
    "claude-opus-4": Price(15.0, 75.0),
    "claude-sonnet-4-5": Price(3.0, 15.0),
    "claude-sonnet-4": Price(3.0, 15.0),
    "claude-haiku-4-5": Price(1.0, 5.0),
    "claude-3-7-sonnet": Price(3.0, 15.0),
    "claude-3-5-sonnet": Price(3.0, 15.0),
    "claude-3-5-haiku": Price(0.8, 4.0),
    "claude-3-opus": Price(15.0, 75.0),
    "claude-3-haiku": Price(0.25, 1.25),
}


def price_for(model: str) -> Price | None:
    best = None
    for prefix in PRICES:
        if model.startswith(prefix) and (best is None or len(prefix) > len(best)):
            best = prefix
    return PRICES[best] if best else None


def cost_usd(
    model: str,
    input_tokens: int,
    output_tokens: int,
    cache_read_input_tokens: int = 0,
    cache_creation_input_tokens: int = 0,
) -> float:
    price = price_for(model)
    if price is None:
        return 0.0
    total = (
        input_tokens * price.input
        + output_tokens * price.output
        + cache_creation_input_tokens * price.input * 1.25
        + cache_read_input_tokens * price.input * 0.1
    )
    return round(total / 1_000_000, 8)
