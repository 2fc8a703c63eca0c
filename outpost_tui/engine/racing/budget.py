"""Budget accounting: attempts gate admissions; token and cost limits stop the race.

Reaching a limit exactly exhausts it (outpost semantics). Running candidates can overshoot before
their usage arrives: a budget gates work, it is not a hard monetary cap.
"""

from __future__ import annotations

from typing import Any

from ..core.spec import BudgetSpec
from ..core.usage import Usage


class Accounting:
    def __init__(self, spec: BudgetSpec, *, attempts: int = 0, usage: Usage | None = None) -> None:
        self.spec = spec
        self.attempts = attempts
        self.usage = usage or Usage()
        # Why admissions stopped or the race was stopped; None while within budget.
        self.exhausted: str | None = None
        self.stops_race = False  # token or cost limit: running candidates are cancelled

    def _usage_limit_reached(self) -> str | None:
        for name, limit in self.spec.tokens.items():
            observed = getattr(self.usage, name)
            if observed >= limit:
                return f"token budget exhausted: {name} {observed} >= {limit}"
        if self.spec.cost_usd is not None and self.usage.cost_usd >= self.spec.cost_usd:
            return f"cost budget exhausted: ${self.usage.cost_usd:.4f} >= ${self.spec.cost_usd:.4f}"
        return None

    def admit(self) -> str | None:
        """Spend one attempt; returns the reason when no further candidate may start."""
        has_usage_limits = bool(self.spec.tokens.items()) or self.spec.cost_usd is not None
        reason: str | None = None
        if not self.usage.complete and self.spec.attempts is None and has_usage_limits:
            reason = (
                "token usage is incomplete (an attempt was interrupted); "
                "configure budget.attempts to bound further work"
            )
        elif self.spec.attempts is not None and self.attempts >= self.spec.attempts:
            reason = f"attempt budget exhausted: {self.attempts} of {self.spec.attempts} used"
        else:
            reason = self._usage_limit_reached()
        if reason is not None:
            self.exhausted = self.exhausted or reason
            return reason
        self.attempts += 1
        return None

    def report(self, delta: Usage) -> str | None:
        """Add usage; returns the reason the first time a token or cost limit is reached."""
        if delta.is_zero() and delta.complete:
            return None
        self.usage = self.usage + delta
        if self.stops_race:
            return None
        reason = self._usage_limit_reached()
        if reason is not None:
            self.exhausted = reason
            self.stops_race = True
        return reason

    def to_json(self) -> dict[str, Any]:
        return {"attempts": self.attempts, **dict(self.usage.to_json().items())}
