"""Candidate and race statuses (fixed by the contract; see docs/result.md)."""

from __future__ import annotations

from enum import StrEnum


class CandidateStatus(StrEnum):
    WINNER = "winner"
    REJECTED = "rejected"
    FAILED = "failed"
    QUOTA = "quota"
    CANCELLED = "cancelled"
    SKIPPED = "skipped"


class RaceStatus(StrEnum):
    WINNER = "winner"
    NO_WINNER = "no-winner"
    QUOTA = "quota"
    ABORTED = "aborted"
    BUDGET_EXHAUSTED = "budget-exhausted"


class Phase(StrEnum):
    """Where an attempt is in its life; persisted by durable races."""

    WAITING = "waiting"
    RUNNING = "running"
    VALIDATED = "validated"
    SETTLED = "settled"
