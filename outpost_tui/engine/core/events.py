"""The one event stream every consumer reads: flight log, progress printer, live model, UI.

Events are plain frozen records with a kind, a timestamp and a payload. Consumers subscribe with a
callable; delivery is synchronous and in order, so a consumer must be cheap (the UI only updates a
model here and renders on its own timer).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Callable, Mapping


class EventKind(StrEnum):
    RACE_STARTED = "race-started"
    ADMITTED = "admitted"
    WORKTREE_READY = "worktree-ready"
    SETUP_STARTED = "setup-started"  # payload: command, ports
    SETUP_FINISHED = "setup-finished"  # payload: status, exit_code, duration, cache, copied, reason
    AGENT_STARTED = "agent-started"
    LOG = "log"  # payload: lines (a batch, one per output line), stream ("stdout" | "stderr")
    TEXT = "text"  # the agent's own words
    TOOL = "tool"  # payload: name, input
    TOOL_RESULT = "tool-result"
    FILE_CHANGE = "file-change"
    # The engine committed the agent's leftover edits for it; payload: commit, message (in full)
    COMMITTED_ON_BEHALF = "committed-on-behalf"
    USAGE = "usage"  # payload: delta (usage this report), total (the attempt so far)
    RETRY = "retry"  # transient rate limit: the agent backs off by itself
    QUOTA = "quota"  # payload: message, reset_at
    AGENT_EXITED = "agent-exited"  # payload: exit_code, reason, duration, result (final message)
    VALIDATION_STARTED = "validation-started"
    VALIDATION_FINISHED = "validation-finished"  # payload: status, exit_code, reason, verdict
    BASELINE_VALIDATED = "baseline-validated"  # payload: the baseline's outcome (see verdict/)
    SCORED = "scored"
    SETTLED = "settled"  # payload: status, reason, commit
    CLEANUP = "cleanup"  # payload: retained_directory, cleanup
    BUDGET_EXHAUSTED = "budget-exhausted"
    WARNING = "warning"  # payload: message (one line: something was refused or could not be done)
    OPERATOR = "operator"  # payload: action (cancel | accept | abort)
    # payload: changes (each: candidate, attempt, running, kind, name, change, before, after, undo,
    # restored, evidence, checkout, description): the user's repository was changed
    TAMPERING = "tampering"
    RACE_FINISHED = "race-finished"  # payload: status, winner


@dataclass(frozen=True, slots=True)
class Event:
    kind: EventKind
    key: str | None = None
    attempt: int | None = None
    data: Mapping[str, Any] = field(default_factory=dict)
    at: float = field(default_factory=time.time)

    def to_json(self) -> dict:
        # The envelope fields are written last so that a payload can never overwrite them.
        out: dict[str, Any] = dict(self.data)
        out["at"] = round(self.at, 6)
        out["kind"] = str(self.kind)
        if self.key is not None:
            out["key"] = self.key
            out["attempt"] = self.attempt
        return out


Subscriber = Callable[[Event], None]


class EventBus:
    """Fan-out of events to subscribers, in subscription order."""

    MAX_ERRORS = 20

    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []
        # A failing consumer (a UI bug, a full disk under the flight log) must not fail the race:
        # its errors are kept here, bounded, for the caller to report.
        self.errors: list[str] = []

    def subscribe(self, subscriber: Subscriber) -> Callable[[], None]:
        self._subscribers.append(subscriber)
        return lambda: self._subscribers.remove(subscriber)

    def publish(self, event: Event) -> None:
        for subscriber in tuple(self._subscribers):
            try:
                subscriber(event)
            except Exception as error:
                if len(self.errors) < self.MAX_ERRORS:
                    self.errors.append(f"{getattr(subscriber, '__qualname__', subscriber)!s}: "
                                       f"{type(error).__name__}: {error}")

    def emit(self, kind: EventKind, key: str | None = None, attempt: int | None = None, **data: Any) -> Event:
        event = Event(kind, key, attempt, data)
        self.publish(event)
        return event
