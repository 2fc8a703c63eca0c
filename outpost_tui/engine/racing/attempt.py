"""One attempt of one candidate: its branch, worktree, sandbox, agent, validation and record."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from ..core.result import CandidateRecord
from ..core.spec import CandidateSpec
from ..core.statuses import Phase
from ..core.usage import Usage
from ..sandbox import Sandbox
from .setup import PortReservation, SetupState


@dataclass(eq=False)
class Attempt:
    candidate: CandidateSpec
    index: int  # declared position: earlier wins ties
    number: int  # 1 for the first attempt of this candidate
    branch: str
    record: CandidateRecord
    phase: Phase = Phase.WAITING
    cleanup: str = "done"
    directory: Path | None = None
    accepted: bool = False
    usage_seen: Usage = field(default_factory=Usage)
    scope: anyio.CancelScope | None = None
    sandbox: Sandbox | None = None
    sandbox_error: Exception | None = None  # why a sandbox started beside its worktree did not
    cancel_reason: str | None = None
    operator_accept: bool = False
    cleanup_failed: bool = False
    setup: SetupState | None = None
    ports: PortReservation | None = None  # held from before the sandbox until the attempt settles
    # the result commit is fixed (record.commit): it is what is graded and what can win
    result_fixed: bool = False
    # Set once the attempt is settled; created in the event loop that runs the race.
    settled: anyio.Event = field(default_factory=anyio.Event)

    @property
    def key(self) -> str:
        return self.candidate.key

    def to_state(self) -> dict[str, Any]:
        """The attempt as saved in a durable checkpoint (no logs, only what recovery needs)."""
        return {
            "key": self.key,
            "attempt": self.number,
            "branch": self.branch,
            "phase": str(self.phase),
            "cleanup": self.cleanup,
            "resources": list(self.record.resources),
            "directory": str(self.directory) if self.directory else None,
            "accepted": self.accepted,
            "record": self.record.to_json(),
        }
