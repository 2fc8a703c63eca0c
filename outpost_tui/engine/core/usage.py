"""Token usage and cost, normalised across agents.

`input` is always *uncached* input: agents that count cached tokens inside their input
(Codex, Gemini) are normalised by their adapter before a Usage is built.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields
from typing import Any

TOKEN_DIMENSIONS = ("input", "cached", "cache_write", "output")
FIGURES = (*TOKEN_DIMENSIONS, "cost_usd")
# The largest token count a report or a total may hold: what a signed 64-bit reader of the result
# JSON can represent.
MAX_TOKENS = 2**63 - 1


def figure_problem(name: str, value: object) -> str | None:
    """Why one reported figure cannot be counted (not a finite, non-negative number), or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{name} {json.dumps(value, default=str)[:60]} is not a number"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{name} {json.dumps(value)} is not a finite number"
    if value < 0:
        return f"{name} {json.dumps(value)} is negative"
    if name != "cost_usd" and value > MAX_TOKENS:
        return f"{name} {json.dumps(value)} is too large to count"
    return None


@dataclass(frozen=True, slots=True)
class Usage:
    input: int = 0
    cached: int = 0
    cache_write: int = 0
    output: int = 0
    cost_usd: float = 0.0
    # False when some of the work was not counted (a crash, an agent that reports nothing):
    # the figures are then a lower bound.
    complete: bool = True
    # True when cost_usd comes from a price table rather than from the agent itself.
    estimated: bool = False
    # True when some tokens could not be priced (no price applies to their model): cost_usd leaves
    # them out, so a cost of 0 is "unknown", never "free".
    cost_unknown: bool = False

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input=self.input + other.input,
            cached=self.cached + other.cached,
            cache_write=self.cache_write + other.cache_write,
            output=self.output + other.output,
            cost_usd=round(self.cost_usd + other.cost_usd, 10),
            complete=self.complete and other.complete,
            estimated=self.estimated or other.estimated,
            cost_unknown=self.cost_unknown or other.cost_unknown,
        )

    def __sub__(self, other: Usage) -> Usage:
        """The delta from `other` to self, never negative in any dimension."""
        return Usage(
            input=max(0, self.input - other.input),
            cached=max(0, self.cached - other.cached),
            cache_write=max(0, self.cache_write - other.cache_write),
            output=max(0, self.output - other.output),
            cost_usd=max(0.0, round(self.cost_usd - other.cost_usd, 10)),
            complete=self.complete,
            estimated=self.estimated,
            cost_unknown=self.cost_unknown,
        )

    @property
    def tokens(self) -> int:
        return self.input + self.cached + self.cache_write + self.output

    def is_zero(self) -> bool:
        return self.tokens == 0 and self.cost_usd == 0

    def problem(self) -> str | None:
        """Why these figures cannot be counted, or None; a sum that overflowed says so."""
        for name in FIGURES:
            problem = figure_problem(name, getattr(self, name))
            if problem is not None:
                return problem
        return None

    def plus(self, other: Usage) -> tuple[Usage, str | None]:
        """self + other, or self and the reason when other or the sum cannot be counted: a report
        that is refused is never summed."""
        problem = other.problem()
        if problem is None:
            total = self + other
            if total.problem() is not None:
                return self, f"adding it would overflow the total ({total.problem()})"
            return total, None
        return self, problem

    def cost_text(self, digits: int = 4) -> str:
        """The cost for people: "$0.0123", "cost unknown", or "$0.0123 + unknown"."""
        return cost_text(self.cost_usd, self.cost_unknown, digits)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Usage:
        if not data:
            return cls()
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


ZERO = Usage()


def cost_text(cost_usd: float, unknown: bool, digits: int = 4) -> str:
    if unknown and not cost_usd:
        return "cost unknown"
    return f"${cost_usd:.{digits}f}" + (" + unknown" if unknown else "")
