"""The live race model: per-candidate counters and a bounded ring of log lines.

The engine updates it from events; a UI reads it on its own timer (never per event), and `version`
tells a reader whether anything changed since it last looked. Memory is bounded whatever the agents
print. The engine may run in another thread than its reader (the app runs a race on a loop of its
own): every update holds `lock`, and a reader that needs a consistent view holds it too.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

from .events import Event, EventKind
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
    tests: dict | None = None  # the verdict's test counts, once graded
    quota: dict | None = None
    commit: str | None = None
    # The engine committed the agent's edits for it (its sandbox could not): the commit's subject.
    committed_on_behalf: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    # The agent process's own clock, which is what the candidate timeout limits.
    timeout: float | None = None
    agent_started_at: float | None = None
    agent_ended_at: float | None = None
    log: deque = field(default_factory=lambda: deque(maxlen=LOG_RING))
    # Entries ever appended to `log`: a reader that saw n entries knows how many are new.
    log_count: int = 0
    version: int = 0

    def add_log(self, *entries: str) -> None:
        self.log.extend(entries)
        self.log_count += len(entries)

    def new_log(self, seen: int) -> list[str]:
        """The entries appended since a reader had seen `seen` (at most what the ring holds)."""
        fresh = self.log_count - seen
        if fresh <= 0:
            return []
        return list(self.log)[-min(fresh, len(self.log)):]


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
        if event.kind is EventKind.TAMPERING:
            self._tampering(event)
        if event.key is None:
            self._race_event(event)
            return
        candidate = self.candidates.get(event.key)
        if candidate is None:
            return
        candidate.version += 1
        data = event.data
        kind = event.kind
        if kind in (EventKind.LOG, EventKind.TOOL, EventKind.TEXT, EventKind.USAGE):
            candidate.retrying = None  # the agent is making progress again
        if kind is EventKind.LOG:
            lines = data["lines"]
            candidate.lines += len(lines)
            candidate.add_log(*lines)
        elif kind is EventKind.USAGE:
            candidate.usage = Usage.from_json(data["total"])
            self.usage = Usage.from_json(data["race_total"]) if "race_total" in data else self.usage
        elif kind is EventKind.TOOL:
            candidate.tools += 1
            candidate.last_tool = data.get("name")
            candidate.add_log(f"▸ {data.get('name')} {str(data.get('input', ''))[:200]}")
        elif kind is EventKind.TEXT:
            candidate.add_log(str(data.get("text", "")))
        elif kind is EventKind.WARNING:
            candidate.add_log(f"warning: {data.get('message', '')}")
        elif kind is EventKind.COMMITTED_ON_BEHALF:
            subject = str(data.get("message") or "").split("\n", 1)[0]
            candidate.committed_on_behalf = subject
            candidate.add_log(f"── committed on its behalf (it could not commit in its sandbox): "
                              f"{str(data.get('commit'))[:12]} {subject}")
        elif kind is EventKind.OPERATOR:
            if data.get("action") == "accept":
                candidate.accepted = True
                candidate.add_log("── accepted by the operator")
        elif kind is EventKind.RETRY:
            cause = data.get("cause")
            candidate.retrying = (f"{cause}: " if cause else "") + str(data.get("message") or "retrying")
        elif kind is EventKind.ADMITTED:
            candidate.state = "starting"
            candidate.attempt = event.attempt or 0
            candidate.branch = data.get("branch")
            candidate.started_at = event.at
            candidate.finished_at = None
            candidate.usage = Usage()
            candidate.reason = None
            candidate.committed_on_behalf = None
            candidate.tests = None
            candidate.timeout = None
            candidate.agent_started_at = None
            candidate.agent_ended_at = None
            self.attempts = data.get("attempts", self.attempts)
        elif kind is EventKind.WORKTREE_READY:
            candidate.directory = data.get("directory")
        elif kind is EventKind.SETUP_STARTED:
            candidate.state = "setting up"
            ports = f", ports {' '.join(map(str, data['ports']))}" if data.get("ports") else ""
            command = " ".join(data.get("command") or []) or "files only"
            candidate.add_log(f"── setup ({command}{ports})")
        elif kind is EventKind.SETUP_FINISHED:
            copied = f", copied {len(data['copied'])} file(s)" if data.get("copied") else ""
            candidate.add_log(f"── setup {data.get('status')} (cache {data.get('cache')}{copied})"
                              + (f": {data['reason']}" if data.get("reason") else ""))
        elif kind is EventKind.AGENT_STARTED:
            candidate.state = "running"
            candidate.timeout = data.get("timeout")
            candidate.agent_started_at = event.at
            limit = f", timeout {candidate.timeout:g}s" if candidate.timeout else ""
            candidate.add_log(f"── attempt {event.attempt or candidate.attempt}: agent started "
                              f"({data.get('program')}{limit})")
        elif kind is EventKind.AGENT_EXITED:
            candidate.retrying = None
            candidate.agent_ended_at = event.at
            how = ("stopped" if data.get("exit_code") is None else f"exit {data.get('exit_code')}") + (
                f": {data['reason']}" if data.get("reason") else "")
            candidate.add_log(f"── agent ended ({how})")
            if data.get("result"):
                # the agent's own summary of what it did: the line an operator looks for first
                candidate.add_log(*(f"   {line}" for line in str(data["result"]).splitlines()[:20]))
        elif kind is EventKind.VALIDATION_STARTED:
            candidate.state = "validating"
            candidate.add_log(f"── validating ({data.get('commits')} commit(s))")
        elif kind is EventKind.VALIDATION_FINISHED:
            candidate.tests = (data.get("verdict") or {}).get("tests")
            outcome = f"validation {data.get('status')}"
            candidate.add_log(f"── {said(outcome, data.get('reason'))}")
        elif kind is EventKind.QUOTA:
            candidate.quota = dict(data)
            candidate.add_log(f"quota: {data.get('message')} (resets {data.get('reset_at') or '?'})")
        elif kind is EventKind.SCORED:
            candidate.add_log(f"score: {data.get('score')}")
        elif kind is EventKind.TAMPERING:
            lines = [change.get("description", "") for change in data.get("changes", [])]
            candidate.tampering += lines
            candidate.add_log(*(f"⚠ changed your repository: {line}" for line in lines))
        elif kind is EventKind.SETTLED:
            candidate.state = str(data.get("status"))
            candidate.reason = data.get("reason")
            candidate.commit = data.get("commit")
            candidate.finished_at = event.at
            # the last word in the log, so a zoomed panel tells the whole story on its own
            candidate.add_log(f"── {said(candidate.state, candidate.reason)}")

    def restore(self, record, *, attempts: int, usage: Usage) -> None:
        """Start a candidate from a saved run's settled attempt (a durable replay): it shows how it
        ended before the coordinator stopped, not "waiting" for the whole replay."""
        with self.lock:
            self._restore(record, attempts=attempts, usage=usage)

    def _restore(self, record, *, attempts: int, usage: Usage) -> None:
        candidate = self.candidates.get(record.key)
        if candidate is None or (candidate.attempt == record.attempt
                                 and candidate.state == str(record.status)):
            return  # unknown, or restored already
        self.version += 1
        candidate.version += 1
        candidate.state = str(record.status)
        candidate.attempt = record.attempt
        candidate.branch = record.branch
        candidate.directory = record.retained_directory or record.directory
        candidate.usage = record.usage
        candidate.reason = record.error
        candidate.quota = record.quota
        candidate.commit = record.commit
        candidate.review = list(record.review or [])
        candidate.started_at = record.started_at
        candidate.finished_at = record.finished_at
        candidate.add_log(f"── attempt {record.attempt}, before the coordinator stopped: "
                          f"{said(candidate.state, candidate.reason)}")
        self.attempts = attempts
        self.usage = usage

    def _tampering(self, event: Event) -> None:
        for change in event.data.get("changes", []):
            who = f"{event.key}#{event.attempt}" if event.key else "during the race"
            self.tampering.append(f"{who}: {change.get('description', '')}")

    def _race_event(self, event: Event) -> None:
        if event.kind is EventKind.RACE_STARTED:
            self.race_id = event.data.get("id")
            self.status = "running"
            self.started_at = event.at
            self.finished_at = None
        elif event.kind is EventKind.BUDGET_EXHAUSTED:
            self.budget_reason = event.data.get("reason")
        elif event.kind is EventKind.WARNING:
            self.warnings.append(str(event.data.get("message", "")))
        elif event.kind is EventKind.RACE_FINISHED:
            self.status = event.data.get("status")
            self.winner = event.data.get("winner")
            self.finished_at = event.at
            for record in (event.data.get("result") or {}).get("candidates", []):
                candidate = self.candidates.get(record.get("key"))
                if candidate is not None and record.get("review"):
                    candidate.review = list(record["review"])
                    candidate.add_log(*(f"⚑ review before merging: {flag}" for flag in candidate.review))
