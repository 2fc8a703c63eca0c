"""The result of a race: what the headless CLI prints as JSON and the app shows.

Field names are a contract (docs/result.md): extend, never rename.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .statuses import CandidateStatus, RaceStatus
from .usage import Usage


@dataclass
class Validation:
    status: str = "not-run"  # passed | failed | timeout | error | cancelled | not-run
    exit_code: int | None = None
    output: str = ""  # tail of the command's output
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "exit_code": self.exit_code,
            "output": self.output,
            "reason": self.reason,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Validation:
        data = data or {}
        return cls(
            data.get("status", "not-run"), data.get("exit_code"), data.get("output", ""), data.get("reason")
        )


@dataclass
class CandidateRecord:
    key: str
    attempt: int
    agent: str
    status: CandidateStatus = CandidateStatus.SKIPPED
    branch: str | None = None
    commit: str | None = None
    commits: list[dict[str, Any]] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    validation: Validation = field(default_factory=Validation)
    score: float | None = None
    directory: str | None = None
    retained_directory: str | None = None
    cleanup: str = "done"  # done | pending
    error: str | None = None
    quota: dict[str, Any] | None = None
    decided_by: str | None = None  # validation | score | operator (winners only)
    committed_on_behalf: bool = False
    resources: list[str] = field(default_factory=list)
    started_at: float | None = None
    finished_at: float | None = None
    result: str | None = None  # the agent's final message (clipped), when it gave one
    # what to look at before merging (engine/verdict/review.py); None: not reviewed (only winners are)
    review: list[str] | None = None
    # what [setup] did before the agent started (engine/racing/setup.py); None: the race has no [setup]
    setup: dict[str, Any] | None = None
    # how the result commit was graded (engine/verdict/); None: never graded
    verdict: dict[str, Any] | None = None
    # how its agent was stopped (cancelled, timed out), and what it printed and reported after
    # the TERM; None: it was not stopped
    stop: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "attempt": self.attempt,
            "agent": self.agent,
            "status": str(self.status),
            "branch": self.branch,
            "commit": self.commit,
            "commits": list(self.commits),
            "usage": self.usage.to_json(),
            "validation": self.validation.to_json(),
            "score": self.score,
            "directory": self.directory,
            "retained_directory": self.retained_directory,
            "cleanup": self.cleanup,
            "error": self.error,
            "quota": self.quota,
            "decided_by": self.decided_by,
            "committed_on_behalf": self.committed_on_behalf,
            "resources": list(self.resources),
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "duration": (
                round(self.finished_at - self.started_at, 3) if self.started_at and self.finished_at else None
            ),
            "result": self.result,
            "review": None if self.review is None else list(self.review),
            "setup": None if self.setup is None else dict(self.setup),
            "verdict": self.verdict,
            "stop": self.stop,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CandidateRecord:
        return cls(
            key=data["key"],
            attempt=data["attempt"],
            agent=data.get("agent", "?"),
            status=CandidateStatus(data["status"]),
            branch=data.get("branch"),
            commit=data.get("commit"),
            commits=list(data.get("commits") or []),
            usage=Usage.from_json(data.get("usage")),
            validation=Validation.from_json(data.get("validation")),
            score=data.get("score"),
            directory=data.get("directory"),
            retained_directory=data.get("retained_directory"),
            cleanup=data.get("cleanup", "done"),
            error=data.get("error"),
            quota=data.get("quota"),
            decided_by=data.get("decided_by"),
            committed_on_behalf=bool(data.get("committed_on_behalf")),
            resources=list(data.get("resources") or []),
            started_at=data.get("started_at"),
            finished_at=data.get("finished_at"),
            result=data.get("result"),
            review=None if data.get("review") is None else list(data["review"]),
            setup=data.get("setup"),
            verdict=data.get("verdict"),
            stop=data.get("stop"),
        )


@dataclass
class RaceResult:
    id: str
    status: RaceStatus
    baseline: str
    name: str
    mode: str
    select: str
    candidates: list[CandidateRecord]
    previous_attempts: list[CandidateRecord] = field(default_factory=list)
    attempts: int = 0
    usage: Usage = field(default_factory=Usage)
    integration: dict[str, Any] | None = None
    host: dict[str, Any] | None = None
    error: str | None = None
    quota: dict[str, Any] | None = None
    run_id: str | None = None
    repository: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    # what candidates changed in the user's repository (engine/git/guard.py), in the order found
    tampering: list[dict[str, Any]] = field(default_factory=list)
    # the baseline's own validation, which strict verdicts are measured against
    baseline_validation: dict[str, Any] | None = None
    # how candidates were kept from the user's repository and from each other: {"mode":
    # "bubblewrap" | "none" | "container", "warning": the line a race shows when unisolated}
    isolation: dict[str, Any] | None = None

    @property
    def winner(self) -> CandidateRecord | None:
        return next((c for c in self.candidates if c.status == CandidateStatus.WINNER), None)

    def to_json(self) -> dict[str, Any]:
        winner = self.winner
        return {
            "id": self.id,
            "name": self.name,
            "run_id": self.run_id,
            "status": str(self.status),
            "mode": self.mode,
            "select": self.select,
            "repository": self.repository,
            "baseline": self.baseline,
            "baseline_validation": self.baseline_validation,
            "winner": None
            if winner is None
            else {
                "key": winner.key,
                "attempt": winner.attempt,
                "branch": winner.branch,
                "commit": winner.commit,
                "decided_by": winner.decided_by,
                "score": winner.score,
            },
            "candidates": [c.to_json() for c in self.candidates],
            "previous_attempts": [c.to_json() for c in self.previous_attempts],
            "usage": {
                "attempts": self.attempts,
                "input": self.usage.input,
                "cached": self.usage.cached,
                "cache_write": self.usage.cache_write,
                "output": self.usage.output,
                "cost_usd": self.usage.cost_usd,
                "complete": self.usage.complete,
                "estimated": self.usage.estimated,
                "cost_unknown": self.usage.cost_unknown,
            },
            "integration": self.integration,
            "host": self.host,
            "tampering": [dict(entry) for entry in self.tampering],
            "isolation": self.isolation,
            "error": self.error,
            "quota": self.quota,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "duration": (
                round(self.finished_at - self.started_at, 3) if self.started_at and self.finished_at else None
            ),
        }


def race_result_from_json(data: dict[str, Any]) -> RaceResult:
    """A saved result back as a RaceResult (a finished durable race returns it unchanged)."""
    usage = data.get("usage") or {}
    return RaceResult(
        id=data["id"],
        status=RaceStatus(data["status"]),
        baseline=data["baseline"],
        name=data.get("name", "race"),
        mode=data.get("mode", "race"),
        select=data.get("select", "first"),
        candidates=[CandidateRecord.from_json(c) for c in data.get("candidates", [])],
        previous_attempts=[CandidateRecord.from_json(c) for c in data.get("previous_attempts", [])],
        attempts=int(usage.get("attempts", 0)),
        usage=Usage.from_json(usage),
        integration=data.get("integration"),
        host=data.get("host"),
        error=data.get("error"),
        quota=data.get("quota"),
        run_id=data.get("run_id"),
        repository=data.get("repository"),
        started_at=data.get("started_at"),
        finished_at=data.get("finished_at"),
        tampering=list(data.get("tampering") or []),
        baseline_validation=data.get("baseline_validation"),
        isolation=data.get("isolation"),
    )
