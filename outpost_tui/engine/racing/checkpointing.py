"""What the coordinator asks of durability, and nothing more.

`durable.run.DurableRun` implements it. Whoever builds a `Race` for a durable spec hands it the
factory (`engine.api.new_race` does), so the coordinator never imports the durable package, which
sits above it and reaches the race only through its public surface (`add_attempt`, `provider`,
`winner`, `restore_winner`, `set_winner`, `host_before`, `total_usage`, `state`).
"""

from __future__ import annotations

from typing import Protocol

from ..core.result import RaceResult
from ..errors import OutpostError


class Checkpointing(Protocol):
    # one line each, for the caller to show (best-effort cleanup of an interrupted run)
    warnings: list[str]

    @property
    def failure(self) -> OutpostError | None:
        """Why a checkpoint could not be written (it carries its exit code); None while all is well."""

    async def open(self) -> RaceResult | None:
        """Claim the run and add the race's attempts; the saved result when it had finished."""

    async def reconcile(self) -> None:
        """After a crash: stop leftovers, settle what was validated, queue the rest again."""

    async def heartbeat(self) -> None:
        """Runs beside the race: writes what changed and shows the coordinator alive."""

    def usage_changed(self) -> None:
        """Usage was reported: saved with the next write, not at once."""

    async def save(self) -> None:
        """Save the race's state now (a transition)."""

    async def finish(self, result: RaceResult) -> None:
        """The race is over: save its result and release the run (or keep it resumable)."""
