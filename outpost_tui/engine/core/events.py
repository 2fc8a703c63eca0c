"""The one event stream every consumer reads: flight log, progress printer, live model, UI.

Each kind of event is a frozen dataclass with its payload as typed fields; consumers `match` on the
classes; the engine publishes them with `bus.publish(Settled(key=..., attempt=..., status=...))`.
Every event carries the candidate's `key` and `attempt` (None for race-level events) and
its time `at`; `event.kind` is the contract string the flight log writes. Consumers subscribe with
a callable; delivery is synchronous and in order, so a consumer must be cheap (the UI only updates
a model here and renders on its own timer).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar, TypeVar, dataclass_transform


class EventKind(StrEnum):
    RACE_STARTED = "race-started"
    ADMITTED = "admitted"
    WORKTREE_READY = "worktree-ready"
    SETUP_STARTED = "setup-started"
    SETUP_FINISHED = "setup-finished"
    AGENT_STARTED = "agent-started"
    LOG = "log"
    TEXT = "text"
    TOOL = "tool"
    TOOL_RESULT = "tool-result"
    FILE_CHANGE = "file-change"
    COMMITTED_ON_BEHALF = "committed-on-behalf"
    USAGE = "usage"
    RETRY = "retry"
    QUOTA = "quota"
    AGENT_EXITED = "agent-exited"
    VALIDATION_STARTED = "validation-started"
    VALIDATION_FINISHED = "validation-finished"
    BASELINE_VALIDATED = "baseline-validated"
    SCORED = "scored"
    SETTLED = "settled"
    CLEANUP = "cleanup"
    BUDGET_EXHAUSTED = "budget-exhausted"
    WARNING = "warning"
    OPERATOR = "operator"
    TAMPERING = "tampering"
    RACE_FINISHED = "race-finished"


class _Unset:
    """A payload field an event does not carry (left out of its JSON, unlike None)."""

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET: Any = _Unset()
_ENVELOPE = ("key", "attempt", "at")


@dataclass(frozen=True, kw_only=True, slots=True)
class Event:
    kind: ClassVar[EventKind]
    key: str | None = None
    attempt: int | None = None
    at: float = field(default_factory=time.time)

    fields_: ClassVar[tuple[str, ...]] = ()  # the payload's field names, in declaration order

    def payload(self) -> dict[str, Any]:
        """The event's own fields, in declaration order, without the ones it does not carry."""
        out = {}
        for name in self.fields_:
            value = getattr(self, name)
            if value is not UNSET:
                out[name] = value
        return out

    def to_json(self) -> dict[str, Any]:
        # The envelope fields are written last so that a payload can never overwrite them.
        out: dict[str, Any] = self.payload()
        out["at"] = round(self.at, 6)
        out["kind"] = str(self.kind)
        if self.key is not None:
            out["key"] = self.key
            out["attempt"] = self.attempt
        return out


_E = TypeVar("_E", bound="Event")


# dataclass_transform: the checker sees each event class as the frozen, keyword-only dataclass it is
@dataclass_transform(frozen_default=True, kw_only_default=True)
def _kind(kind: EventKind) -> Callable[[type[_E]], type[_E]]:
    def register(cls: type[_E]) -> type[_E]:
        cls.kind = kind
        typed = dataclass(frozen=True, kw_only=True, slots=True)(cls)
        typed.fields_ = tuple(f.name for f in dataclasses.fields(typed) if f.name not in _ENVELOPE)
        return typed

    return register


# --- the race --------------------------------------------------------------------------------------


@_kind(EventKind.RACE_STARTED)
class RaceStarted(Event):
    id: str
    name: str
    mode: str
    select: str
    baseline: str
    candidates: list[str]
    run_id: str | None
    host_dirty: bool
    validate: dict[str, Any] | None  # the validation command and gate, as the result records them


@_kind(EventKind.BASELINE_VALIDATED)
class BaselineValidated(Event):
    """The baseline's validation (engine/verdict/), once, beside the candidates."""

    status: str
    exit_code: int | None
    reason: str | None
    runs: int
    duration: float | None
    source: str
    tests: dict[str, Any] | None
    failing: list[str]
    flaky: list[str]


@_kind(EventKind.BUDGET_EXHAUSTED)
class BudgetExhausted(Event):
    reason: str
    stops_race: bool


@_kind(EventKind.WARNING)
class Warned(Event):
    """Something was refused or could not be done (one line); for a candidate or the race."""

    message: str


@_kind(EventKind.OPERATOR)
class Operator(Event):
    action: str  # cancel | accept | abort


@_kind(EventKind.TAMPERING)
class Tampering(Event):
    """The user's repository was changed. Each change: candidate, attempt, running, ended_with,
    kind, name, change, before, after, undo, restored, evidence, checkout, description."""

    changes: list[dict[str, Any]]


@_kind(EventKind.RACE_FINISHED)
class RaceFinished(Event):
    status: str
    winner: str | None
    result: dict[str, Any]  # the result JSON (docs/result.md)
    saved: bool = UNSET  # a durable run: whether its final state was saved


# --- an attempt ------------------------------------------------------------------------------------


@_kind(EventKind.ADMITTED)
class Admitted(Event):
    branch: str
    agent: str
    attempts: int  # attempts started across the race so far


@_kind(EventKind.WORKTREE_READY)
class WorktreeReady(Event):
    directory: str


@_kind(EventKind.SETUP_STARTED)
class SetupStarted(Event):
    command: list[str] | None
    ports: list[int]


@_kind(EventKind.SETUP_FINISHED)
class SetupFinished(Event):
    status: str
    exit_code: int | None
    duration: float | None
    cache: str
    copied: list[str]
    reason: str | None


@_kind(EventKind.AGENT_STARTED)
class AgentStarted(Event):
    program: str
    timeout: float | None


@_kind(EventKind.COMMITTED_ON_BEHALF)
class CommittedOnBehalf(Event):
    """The engine committed the agent's leftover edits for it."""

    commit: str
    message: str  # in full
    agent: str


@_kind(EventKind.AGENT_EXITED)
class AgentExited(Event):
    exit_code: int | None
    reason: str | None
    duration: float | None
    result: str | None  # the agent's final message


@_kind(EventKind.VALIDATION_STARTED)
class ValidationStarted(Event):
    commits: int
    commit: str | None


@_kind(EventKind.VALIDATION_FINISHED)
class ValidationFinished(Event):
    status: str
    exit_code: int | None
    reason: str | None
    verdict: dict[str, Any] | None  # the candidate's verdict (docs/result.md)


@_kind(EventKind.SCORED)
class Scored(Event):
    score: float | None


@_kind(EventKind.SETTLED)
class Settled(Event):
    status: str
    reason: str | None
    commit: str | None
    retained_directory: str | None = UNSET


@_kind(EventKind.CLEANUP)
class Cleanup(Event):
    retained_directory: str | None
    cleanup: str


# --- what an agent says (engine/agents/ decode these from its output) -----------------------------


@_kind(EventKind.LOG)
class Log(Event):
    """A batch of output lines."""

    stream: str  # stdout | stderr | setup | validation
    lines: list[str]


@_kind(EventKind.TEXT)
class Text(Event):
    """The agent's own words."""

    text: str
    reasoning: bool = UNSET


@_kind(EventKind.TOOL)
class Tool(Event):
    name: str
    input: Any


@_kind(EventKind.TOOL_RESULT)
class ToolResult(Event):
    name: str
    output: Any
    error: bool


@_kind(EventKind.FILE_CHANGE)
class FileChange(Event):
    path: str
    change: str


@_kind(EventKind.USAGE)
class UsageReported(Event):
    delta: dict[str, Any]  # usage this report (usage.Usage as JSON)
    total: dict[str, Any]  # the attempt so far
    race_total: dict[str, Any] = UNSET  # the race so far


@_kind(EventKind.RETRY)
class Retry(Event):
    """A transient failure (a rate limit, the network): the agent backs off by itself."""

    message: str
    retry: int
    delay_ms: int = UNSET
    cause: str | None = UNSET
    status: Any = UNSET


@_kind(EventKind.QUOTA)
class Quota(Event):
    message: str
    reset_at: float | None


EVENT_TYPES: dict[EventKind, type[Event]] = {cls.kind: cls for cls in Event.__subclasses__()}


def event_of(
    kind: EventKind | str,
    key: str | None = None,
    attempt: int | None = None,
    data: Mapping[str, Any] | None = None,
    at: float | None = None,
) -> Event:
    """The typed event of a kind with this payload; TypeError names a field it lacks or cannot
    have (a payload that breaks its kind's shape is a bug where it was made)."""
    cls = EVENT_TYPES[EventKind(kind)]
    timing = {} if at is None else {"at": at}
    return cls(key=key, attempt=attempt, **timing, **dict(data or {}))


def event_from_payload(
    kind: EventKind | str, key: str | None, attempt: int | None, data: Mapping[str, Any], at: float
) -> Event:
    """Leniently, an event as another version may have written it: unknown payload keys are
    dropped, missing ones are None (the flight-log reader; consumers read what is there)."""
    cls = EVENT_TYPES[EventKind(kind)]
    payload = {}
    for item in dataclasses.fields(cls):
        if item.name in _ENVELOPE:
            continue
        if item.name in data:
            payload[item.name] = data[item.name]
        elif item.default is dataclasses.MISSING:
            payload[item.name] = None
    return cls(key=key, attempt=attempt, at=at, **payload)


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
                    self.errors.append(
                        f"{getattr(subscriber, '__qualname__', subscriber)!s}: "
                        f"{type(error).__name__}: {error}"
                    )
