"""Usage counted as the agents report it: each report checked, added to the race's total, and
the budget's limit enforced (every attempt cancelled when it is reached)."""

from __future__ import annotations

from ..agents.base import Decoder
from ..core.events import BudgetExhausted, UsageReported, Warned
from ..core.usage import Usage
from .attempt import Attempt
from .preparing import Preparing


class Metering(Preparing):
    """The agents' usage, counted against the budget."""

    def _take_usage(self, attempt: Attempt, decoder: Decoder, *, final: bool = False) -> None:
        """Count the decoder's total, unless it or the race's sum with it is not a finite,
        non-negative number: then it is refused with a warning and the last sound total stands."""
        total = decoder.usage
        problem = total.problem()
        if problem is None:
            _, problem = self.accounting.usage.plus(total - attempt.usage_seen)
        if problem is not None:
            self.bus.publish(
                Warned(key=attempt.key, attempt=attempt.number, message=f"refused a usage report: {problem}")
            )
            decoder.usage = total = attempt.usage_seen
            if not final:
                return
        self._report_usage(attempt, total, final=final)

    def _report_usage(self, attempt: Attempt, total: Usage, *, final: bool = False) -> None:
        delta = total - attempt.usage_seen
        attempt.usage_seen = total if not final else attempt.usage_seen + delta
        attempt.record.usage = total
        if delta.is_zero() and not final:
            return
        reason = self.accounting.report(delta)
        if not delta.is_zero():
            self.bus.publish(
                UsageReported(
                    key=attempt.key,
                    attempt=attempt.number,
                    delta=delta.to_json(),
                    total=total.to_json(),
                    race_total=self.accounting.usage.to_json(),
                )
            )
        if self._durable is not None:
            self._durable.usage_changed()
        if reason is not None:
            self._admissions_closed = True
            self.bus.publish(BudgetExhausted(reason=reason, stops_race=True))
            for other in self.attempts.values():
                if other.scope is not None:
                    other.cancel_reason = other.cancel_reason or f"cancelled: {reason}"
                    other.scope.cancel()
