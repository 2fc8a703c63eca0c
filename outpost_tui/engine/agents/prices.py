"""Estimated cost for agents that report tokens but no cost (Codex, Gemini, some aider models).

Prices are USD per million tokens, keyed by model-name prefix; the longest matching prefix wins,
so "claude-sonnet-4-5-20250929" uses "claude-sonnet-4" and "gpt-5-mini" beats "gpt-5". A race
file's `[prices."model"]` entries are looked up first, by exact name and then by prefix. Costs
computed here are marked estimated; a cost the agent reports itself always wins. A model that is in
no table (agents move to new models faster than any table) is priced by its family ("sonnet",
"gpt mini", "gemini flash", ...) at that family's newest listed price, still marked estimated;
when not even a family applies, the cost is unknown (`Usage.cost_unknown`), never $0.

List prices as published by the providers in late 2025 (standard tier, prompts under 200k tokens).
"""

from __future__ import annotations

from collections.abc import Mapping

from ..core.spec import Price
from ..core.usage import Usage

_SONNET = Price(input=3.0, cached=0.30, cache_write=3.75, output=15.0)
_OPUS_4_5 = Price(input=5.0, cached=0.50, cache_write=6.25, output=25.0)
_OPUS_4 = Price(input=15.0, cached=1.50, cache_write=18.75, output=75.0)
_HAIKU_4_5 = Price(input=1.0, cached=0.10, cache_write=1.25, output=5.0)
_GPT_5 = Price(input=1.25, cached=0.125, output=10.0)
_GPT_5_MINI = Price(input=0.25, cached=0.025, output=2.0)

DEFAULT_PRICES: Mapping[str, Price] = {
    # Anthropic (cache_write: 5-minute cache writes)
    "claude-opus-4-5": _OPUS_4_5,
    "claude-opus-4": _OPUS_4,
    "claude-sonnet-4": _SONNET,
    "claude-3-7-sonnet": _SONNET,
    "claude-haiku-4-5": _HAIKU_4_5,
    "claude-3-5-haiku": Price(input=0.80, cached=0.08, cache_write=1.0, output=4.0),
    # aliases accepted by `claude --model`
    "opus": _OPUS_4_5,
    "sonnet": _SONNET,
    "haiku": _HAIKU_4_5,
    # OpenAI (no separate cache-write charge)
    "gpt-5": _GPT_5,
    "gpt-5-mini": _GPT_5_MINI,
    "gpt-5.1-codex-mini": _GPT_5_MINI,
    "codex-mini": Price(input=1.5, cached=0.375, output=6.0),
    "gpt-5-nano": Price(input=0.05, cached=0.005, output=0.40),
    "gpt-4.1": Price(input=2.0, cached=0.50, output=8.0),
    "gpt-4.1-mini": Price(input=0.40, cached=0.10, output=1.60),
    "gpt-4o": Price(input=2.50, cached=1.25, output=10.0),
    "o3": Price(input=2.0, cached=0.50, output=8.0),
    "o4-mini": Price(input=1.10, cached=0.275, output=4.40),
    # Google
    "gemini-2.5-pro": Price(input=1.25, cached=0.125, output=10.0),
    "gemini-2.5-flash": Price(input=0.30, cached=0.03, output=2.50),
    "gemini-2.5-flash-lite": Price(input=0.10, cached=0.01, output=0.40),
    "gemini-3-pro": Price(input=2.0, cached=0.20, output=12.0),
}


# (name pattern, table entry): the first family whose words all occur in the model's name.
_FAMILIES: tuple[tuple[tuple[str, ...], str], ...] = (
    (("claude", "opus"), "claude-opus-4-5"),
    (("opus",), "claude-opus-4-5"),
    (("claude", "sonnet"), "claude-sonnet-4"),
    (("sonnet",), "claude-sonnet-4"),
    (("claude", "haiku"), "claude-haiku-4-5"),
    (("haiku",), "claude-haiku-4-5"),
    (("gemini", "flash-lite"), "gemini-2.5-flash-lite"),
    (("gemini", "flash"), "gemini-2.5-flash"),
    (("gemini", "pro"), "gemini-3-pro"),
    (("gpt", "nano"), "gpt-5-nano"),
    (("gpt", "mini"), "gpt-5-mini"),
    (("codex", "mini"), "gpt-5-mini"),
    (("gpt",), "gpt-5"),
    (("codex",), "gpt-5"),
)


def family_of(model: str | None) -> str | None:
    """The price-table entry of the model's family, for a model no table lists by name."""
    if not model:
        return None
    name = model.rsplit("/", 1)[-1].lower()
    for words, entry in _FAMILIES:
        if all(word in name for word in words):
            return entry
    return None


def price_note(model: str | None, overrides: Mapping[str, Price] | None = None) -> str | None:
    """One line saying how the model is priced when it is not listed by name; None when it is."""
    if not model:
        return "model not known: cost unknown"
    if _listed(model, overrides) is not None:
        return None
    family = family_of(model)
    if family is None:
        return f'model {model} has no price (add [prices."{model}"] to the race file): cost unknown'
    return f"model {model} is not in the price table: priced as {family} (estimated)"


def _by_prefix(table: Mapping[str, Price], model: str) -> Price | None:
    if model in table:
        return table[model]
    best: str | None = None
    for prefix in table:
        if model.startswith(prefix) and (best is None or len(prefix) > len(best)):
            best = prefix
    return table[best] if best is not None else None


def price_for(model: str | None, overrides: Mapping[str, Price] | None = None) -> Price | None:
    """The price of `model`: race-file overrides, the table, then its family; None when none applies."""
    if not model:
        return None
    listed = _listed(model, overrides)
    if listed is not None:
        return listed
    family = family_of(model)
    return DEFAULT_PRICES[family] if family is not None else None


def _listed(model: str, overrides: Mapping[str, Price] | None) -> Price | None:
    names = [model]
    bare = model.rsplit("/", 1)[-1]  # "anthropic/claude-sonnet-4-5" (opencode), "openai/gpt-5"
    if bare != model:
        names.append(bare)
    for table, fold_case in ((overrides or {}, False), (DEFAULT_PRICES, True)):
        for name in names:
            price = _by_prefix(table, name.lower() if fold_case else name)
            if price is not None:
                return price
    return None


def cost_of(usage: Usage, price: Price) -> float:
    total = (
        usage.input * price.input
        + usage.cached * price.cached
        + usage.cache_write * price.cache_write
        + usage.output * price.output
    ) / 1_000_000
    return round(total, 6)


def with_estimated_cost(
    usage: Usage, model: str | None, overrides: Mapping[str, Price] | None = None
) -> Usage:
    """`usage` with cost_usd from the price table, marked estimated (cost unknown when no price applies)."""
    price = price_for(model, overrides)
    cost = cost_of(usage, price) if price is not None else 0.0
    return Usage(
        input=usage.input,
        cached=usage.cached,
        cache_write=usage.cache_write,
        output=usage.output,
        cost_usd=cost,
        complete=usage.complete,
        estimated=True,
        cost_unknown=price is None and usage.tokens > 0,
    )
