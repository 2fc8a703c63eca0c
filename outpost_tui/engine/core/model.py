"""The live race model: per-candidate counters and a bounded ring of log lines.

The engine updates it from events; a UI reads it on its own timer (never per event), and `version`
tells a reader whether anything changed since it last looked. Memory is bounded whatever the agents
print. The engine may run in another thread than its reader (the app runs a race on a loop of its
own): every update holds `lock`, and a reader that needs a consistent view holds it too.
"""

from __future__ import annotations

import copy
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .events import (
    Admitted,
    AgentExited,
    AgentStarted,
    BudgetExhausted,
    CommittedOnBehalf,
    Event,
    Log,
    Operator,
    Quota,
    RaceFinished,
    RaceStarted,
    Retry,
    Scored,
    Settled,
    SetupFinished,
    SetupStarted,
    Tampering,
    Text,
    Tool,
    UsageReported,
    ValidationFinished,
    ValidationStarted,
    Warned,
    WorktreeReady,
)
from .result import CandidateRecord
from .text import visible
from .usage import Usage

LOG_RING = 2000


def said(outcome: str, reason: str | None) -> str:
    """An outcome and its reason in one phrase, without saying the outcome twice when the reason
    already starts with it ("validation failed (exit code 1)", "cancelled: another candidate won")."""
    if not reason:
        return outcome
    if reason.lower().startswith(outcome.lower()):
        return reason
    return f"{outcome}: {reason}"


@dataclass
class CandidateModel:
    key: str
    agent: str
    state: str = "waiting"  # waiting | starting | running | validating | scoring | <final status>
    attempt: int = 0
    branch: str | None = None
    directory: str | None = None
    usage: Usage = field(default_factory=Usage)
    lines: int = 0
    tools: int = 0
    last_tool: str | None = None
    retrying: str | None = None
    review: list[str] = field(default_factory=list)  # what to look at before merging (winners)
    tampering: list[str] = field(default_factory=list)  # what it changed in the user's repository
    accepted: bool = False  # the operator picked it as the winner by hand
    reason: str | None = None
    tests: dict[str, Any] | None = None  # the verdict's test counts, once graded
    quota: dict[str, Any] | None = None
    commit: str | None = None
    # The engine committed the agent's edits for it (its sandbox could not): the commit's subject.
    committed_on_behalf: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    # The agent process's own clock, which is what the candidate timeout limits.
    timeout: float | None = None
    agent_started_at: float | None = None
    agent_ended_at: float | None = None
    log: deque[str] = field(default_factory=lambda: deque(maxlen=LOG_RING))
    # Entries ever appended to `log`: a reader that saw n entries knows how many are new.
    log_count: int = 0
    version: int = 0

    def add_log(self, *entries: str) -> None:
        # whatever made an entry, a candidate's words may be in it: a screen draws it, never obeys it
        self.log.extend(visible(entry, lines=True) for entry in entries)
        self.log_count += len(entries)

    def new_log(self, seen: int) -> list[str]:
        """The entries appended since a reader had seen `seen` (at most what the ring holds)."""
        fresh = self.log_count - seen
        if fresh <= 0:
            return []
        return list(self.log)[-min(fresh, len(self.log)) :]

    def copy(self, seen: int) -> CandidateModel:
        """A copy to read without the lock, taken while holding it: every field as it is now, and
        of the log only the entries a reader that had seen `seen` has not, and the last one
        (`log_count` stays the live count, so `new_log(seen)` answers the same on the copy). A
        reader that draws from the copy keeps the race's thread waiting for the copy, not for the
        drawing."""
        copied = copy.copy(self)
        copied.review = list(self.review)
        copied.tampering = list(self.tampering)
        copied.log = deque(self.new_log(min(seen, self.log_count - 1)), maxlen=LOG_RING)
        return copied


class RaceModel:
    def __init__(self, keys_and_agents: list[tuple[str, str]]) -> None:
        self.candidates = {key: CandidateModel(key, agent) for key, agent in keys_and_agents}
        self.status: str | None = None
        self.race_id: str | None = None
        self.winner: str | None = None
        self.usage = Usage()
        self.attempts = 0
        self.budget_reason: str | None = None
        # every change to the user's repository found so far, as one line each (the app notifies
        # the ones it has not shown yet)
        self.tampering: list[str] = []
        self.warnings: list[str] = []  # race-level warnings (the container engine went away, ...)
        self.started_at: float | None = None
        self.finished_at: float | None = None
        self.version = 0
        self.lock = threading.RLock()

    def __call__(self, event: Event) -> None:
        with self.lock:
            self._apply(event)

    def _apply(self, event: Event) -> None:
        self.version += 1
        if isinstance(event, Tampering):
            self._tampering(event)
        if event.key is None:
            self._race_event(event)
            return
        candidate = self.candidates.get(event.key)
        if candidate is None:
            return
        candidate.version += 1
        if isinstance(event, (Log, Tool, Text, UsageReported)):
            candidate.retrying = None  # the agent is making progress again
        match event:
            case Log(lines=lines):
                candidate.lines += len(lines)
                candidate.add_log(*lines)
            case UsageReported():
                candidate.usage = Usage.from_json(event.total)
                self.usage = Usage.from_json(event.race_total) if event.race_total else self.usage
            case Tool():
                candidate.tools += 1
                candidate.last_tool = event.name
                candidate.add_log(f"▸ {event.name} {str(event.input)[:200]}")
            case Text():
                candidate.add_log(str(event.text))
            case Warned():
                candidate.add_log(f"warning: {event.message}")
            case CommittedOnBehalf():
                subject = str(event.message or "").split("\n", 1)[0]
                candidate.committed_on_behalf = visible(subject)
                candidate.add_log(
                    f"── committed on its behalf (it could not commit in its sandbox): "
                    f"{str(event.commit)[:12]} {subject}"
                )
            case Operator(action="accept"):
                candidate.accepted = True
                candidate.add_log("── accepted by the operator")
            case Retry():
                cause = f"{event.cause}: " if event.cause else ""
                candidate.retrying = visible(cause + str(event.message or "retrying"))
            case Admitted():
                candidate.state = "starting"
                candidate.attempt = event.attempt or 0
                candidate.branch = event.branch
                candidate.started_at = event.at
                candidate.finished_at = None
                candidate.usage = Usage()
                candidate.reason = None
                candidate.committed_on_behalf = None
                candidate.tests = None
                candidate.timeout = None
                candidate.agent_started_at = None
                candidate.agent_ended_at = None
                self.attempts = event.attempts if event.attempts is not None else self.attempts
            case WorktreeReady():
                candidate.directory = event.directory
            case SetupStarted():
                candidate.state = "setting up"
                ports = f", ports {' '.join(map(str, event.ports))}" if event.ports else ""
                command = " ".join(event.command or []) or "files only"
                candidate.add_log(f"── setup ({command}{ports})")
            case SetupFinished():
                copied = f", copied {len(event.copied)} file(s)" if event.copied else ""
                candidate.add_log(
                    f"── setup {event.status} (cache {event.cache}{copied})"
                    + (f": {event.reason}" if event.reason else "")
                )
            case AgentStarted():
                candidate.state = "running"
                candidate.timeout = event.timeout
                candidate.agent_started_at = event.at
                limit = f", timeout {candidate.timeout:g}s" if candidate.timeout else ""
                candidate.add_log(
                    f"── attempt {event.attempt or candidate.attempt}: agent started ({event.program}{limit})"
                )
            case AgentExited():
                candidate.retrying = None
                candidate.agent_ended_at = event.at
                how = ("stopped" if event.exit_code is None else f"exit {event.exit_code}") + (
                    f": {event.reason}" if event.reason else ""
                )
                candidate.add_log(f"── agent ended ({how})")
                if event.result:
                    # the agent's own summary of what it did: the line an operator looks for first
                    candidate.add_log(*(f"   {line}" for line in str(event.result).splitlines()[:20]))
            case ValidationStarted():
                candidate.state = "validating"
                candidate.add_log(f"── validating ({event.commits} commit(s))")
            case ValidationFinished():
                candidate.tests = (event.verdict or {}).get("tests")
                outcome = f"validation {event.status}"
                candidate.add_log(f"── {said(outcome, event.reason)}")
            case Quota():
                candidate.quota = event.payload()
                candidate.add_log(f"quota: {event.message} (resets {event.reset_at or '?'})")
            case Scored():
                candidate.add_log(f"score: {event.score}")
            case Tampering():
                lines = [visible(str(change.get("description", ""))) for change in event.changes or []]
                candidate.tampering += lines
                candidate.add_log(*(f"⚠ changed your repository: {line}" for line in lines))
            case Settled():
                candidate.state = str(event.status)
                candidate.reason = visible(event.reason) if event.reason else event.reason
                candidate.commit = event.commit
                candidate.finished_at = event.at
                # the last word in the log, so a zoomed panel tells the whole story on its own
                candidate.add_log(f"── {said(candidate.state, candidate.reason)}")

    def restore(self, record: CandidateRecord, *, attempts: int, usage: Usage) -> None:
        """Start a candidate from a saved run's settled attempt (a durable replay): it shows how it
        ended before the coordinator stopped, not "waiting" for the whole replay."""
        with self.lock:
            self._restore(record, attempts=attempts, usage=usage)

    def _restore(self, record: CandidateRecord, *, attempts: int, usage: Usage) -> None:
        candidate = self.candidates.get(record.key)
        if candidate is None or (
            candidate.attempt == record.attempt and candidate.state == str(record.status)
        ):
            return  # unknown, or restored already
        self.version += 1
        candidate.version += 1
        candidate.state = str(record.status)
        candidate.attempt = record.attempt
        candidate.branch = record.branch
        candidate.directory = record.retained_directory or record.directory
        candidate.usage = record.usage
        candidate.reason = visible(record.error) if record.error else record.error
        candidate.quota = record.quota
        candidate.commit = record.commit
        candidate.review = [visible(str(flag)) for flag in record.review or []]
        candidate.started_at = record.started_at
        candidate.finished_at = record.finished_at
        candidate.add_log(
            f"── attempt {record.attempt}, before the coordinator stopped: "
            f"{said(candidate.state, candidate.reason)}"
        )
        self.attempts = attempts
        self.usage = usage

    def _tampering(self, event: Tampering) -> None:
        for change in event.changes or []:
            who = f"{event.key}#{event.attempt}" if event.key else "during the race"
            self.tampering.append(visible(f"{who}: {change.get('description', '')}"))

    def _race_event(self, event: Event) -> None:
        match event:
            case RaceStarted():
                self.race_id = event.id
                self.status = "running"
                self.started_at = event.at
                self.finished_at = None
            case BudgetExhausted():
                self.budget_reason = event.reason
            case Warned():
                self.warnings.append(visible(str(event.message or "")))
            case RaceFinished():
                self.status = event.status
                self.winner = event.winner
                self.finished_at = event.at
                for record in (event.result or {}).get("candidates", []):
                    candidate = self.candidates.get(record.get("key"))
                    if candidate is not None and record.get("review"):
                        candidate.review = [visible(str(flag)) for flag in record["review"]]
                        candidate.add_log(*(f"⚑ review before merging: {flag}" for flag in candidate.review))
