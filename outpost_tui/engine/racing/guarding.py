"""The user's repository checked against the race's record as attempts end and when the race
ends: what changed is reported (and settings put back) before any more git runs there.

One check serves every attempt that ended while the previous check ran: it starts after all of
them are gone, so it sees whatever any of them did, and attempts that end together cost one look
(two git processes and the settings files read) instead of one each. The race's own check at its
end is skipped when the last one started with nothing running and nothing started since: it would
compare the same repository again."""

from __future__ import annotations

from dataclasses import dataclass

import anyio

from .. import git
from ..core.events import EventBus, Tampering, Warned
from ..core.spec import RaceSpec
from ..sandbox import SandboxProvider
from .attempt import Attempt
from .state import RaceState, _one_line


@dataclass
class _Request:
    attempt: Attempt | None  # None: the race's own check at its end
    served: bool = False


class Guarding(RaceState):
    """Checks of the user's repository, one for every group of attempts that end together."""

    def __init__(
        self, spec: RaceSpec, *, bus: EventBus | None = None, provider: SandboxProvider | None = None
    ) -> None:
        super().__init__(spec, bus=bus, provider=provider)
        self._requests: list[_Request] = []  # attempts waiting for the next check
        self._admitted = 0  # attempts started so far: one started after a quiet check voids it
        self._quiet_at: int | None = None  # _admitted when the last check started with nothing running

    async def _check_repository(self, attempt: Attempt | None) -> None:
        """Compare the user's repository with the record; report (and undo) what changed.

        A change found when an attempt ends is laid to it (the first of those that ended
        together, the others named in `ended_with`), naming the others that were running then;
        one found at the end of the race is nobody's in particular."""
        if self._record is None:
            return
        if attempt is None and self._quiet_at == self._admitted:
            return  # the last check saw the repository as it is now: nothing ran since
        request = _Request(attempt)
        self._requests.append(request)
        async with self._record_lock:
            if request.served:
                return  # a check that started after this attempt had ended has looked
            batch, self._requests = self._requests, []
            ended = [r.attempt for r in batch if r.attempt is not None]
            lead = ended[0] if ended else None
            self._quiet_at = None
            quiet = self._nothing_running(ended)
            who = f"{lead.key}-{lead.number}" if lead is not None else "race"
            try:
                changes = await anyio.to_thread.run_sync(git.guard_changes, self._record, who)
            except git.GitError as error:
                # the others in the batch look again, each for itself, as each would have
                self._requests[:0] = [r for r in batch if r is not request]
                self.bus.publish(
                    Warned(
                        key=attempt.key if attempt else None,
                        attempt=attempt.number if attempt else None,
                        message=f"could not check your repository for changes: {_one_line(error)}",
                    )
                )
                return
            for waiting in batch:
                waiting.served = True
            if quiet is not None:
                self._quiet_at = quiet
        if not changes:
            return
        running = sorted(a.key for a in self.attempts.values() if a not in ended and a.scope is not None)
        entries = [
            {
                "candidate": lead.key if lead else None,
                "attempt": lead.number if lead else None,
                "running": running,
                "ended_with": [f"{a.key}#{a.number}" for a in ended[1:]],
                **change.to_json(),
            }
            for change in changes
        ]
        self.tampering += entries
        self.bus.publish(
            Tampering(
                key=lead.key if lead else None,
                attempt=lead.number if lead else None,
                changes=entries,
            )
        )

    def _nothing_running(self, ended: list[Attempt]) -> int | None:
        """_admitted now, when nothing but `ended` has run since the race started or is running
        (no attempt, no baseline validation); else None."""
        if self._baseline_done is not None and not self._baseline_done.is_set():
            return None
        others = [a for a in self.attempts.values() if a not in ended]
        if any(a.scope is not None or a.sandbox is not None for a in others):
            return None
        return self._admitted
