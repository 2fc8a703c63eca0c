"""What a race holds while it runs: its spec, bus and model, its attempts, the winner so far, the
flags that stop admissions, and what the user's repository looked like. The coordinator's other
parts (settling, running, the baseline, the coordinator itself) build on it in one chain, each
calling only the parts below it."""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

from .. import git
from ..core.events import EventBus
from ..core.model import RaceModel
from ..core.spec import RaceSpec
from ..core.usage import Usage
from ..sandbox import SandboxProvider
from ..verdict import BaselineOutcome
from .attempt import Attempt
from .budget import Accounting
from .checkpointing import Checkpointing


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text[:500]


class RaceState:
    """The state a race holds while it runs; see the module docstring."""

    _git_common_dir: Path  # the repository's common git directory, found when the race starts

    def __init__(
        self, spec: RaceSpec, *, bus: EventBus | None = None, provider: SandboxProvider | None = None
    ) -> None:
        self.spec = spec
        self.bus = bus or EventBus()
        self.model = RaceModel([(c.key, c.agent) for c in spec.candidates])
        self.bus.subscribe(self.model)
        self._provider = provider
        self.id: str | None = None
        self.repository: Path | None = None
        self.baseline: str | None = None
        self.accounting = Accounting(spec.budget)
        self.attempts: dict[str, Attempt] = {}  # the latest attempt of each candidate
        self.previous: list[Attempt] = []  # superseded attempts (durable replays, quota reruns)
        self._pending: deque[Attempt] = deque()
        self._winner: Attempt | None = None
        self._accepted_pending: list[Attempt] = []
        self._aborted = False
        self._admissions_closed = False
        self._finished = False
        self._settling = False
        self._engine_gone_said = False
        self.suspended = False  # stopped by stop_resumable: the saved run stays resumable
        self._durable: Checkpointing | None = None  # when [durability] is enabled
        self._host_before: git.HostSnapshot | None = None
        self._refs_before: dict[str, str] | None = None  # every ref as the race found them
        self._record: git.GuardRecord | None = None  # the user's repository as the race found it
        # what candidates' private repositories start from, when the sandboxes fence their git
        self._private: git.PrivateTemplate | None = None
        self._record_lock = anyio.Lock()
        # how candidates were isolated (result JSON "isolation"): {"mode", "warning"}
        self.isolation: dict[str, Any] | None = None
        self.tampering: list[dict[str, Any]] = []  # what candidates changed in it (result JSON "tampering")
        self._started_at: float | None = None
        self._outpost_dir: Path | None = None
        self._cache_key: str | None = None
        self._cache_locks: dict[str, anyio.Lock] = {}
        self._copy_paths: list[str] = []
        self.baseline_outcome: BaselineOutcome | None = None
        self._baseline_done: anyio.Event | None = None
        # sandboxes started ahead of their attempt's need run here (the attempt awaits them)
        self._background: anyio.abc.TaskGroup
        # what the baseline's validation started (durable races save it, so a replay stops it)
        self.baseline_resources: list[str] = []

    @property
    def provider(self) -> SandboxProvider | None:
        """The sandbox provider (None until the race runs, unless one was given)."""
        return self._provider

    @property
    def winner(self) -> Attempt | None:
        return self._winner

    @property
    def host_before(self) -> git.HostSnapshot | None:
        """The user's repository (branch, HEAD, status) when the race started."""
        return self._host_before

    @property
    def checkpointing(self) -> Checkpointing | None:
        """The durable run's checkpointing (its warnings and failure); None unless durable."""
        return self._durable

    def total_usage(self) -> Usage:
        total = Usage()
        for attempt in [*self.previous, *self.attempts.values()]:
            total, _ = total.plus(attempt.record.usage)  # refused (and warned about) when taken
        return total

    async def _save(self) -> None:
        if self._durable is not None:
            await self._durable.save()

    def state(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "baseline": self.baseline,
            "attempts": [a.to_state() for a in [*self.previous, *self.attempts.values()]],
            "usage": {"attempts": self.accounting.attempts, **self.total_usage().to_json()},
            "baseline_resources": list(self.baseline_resources),
        }
