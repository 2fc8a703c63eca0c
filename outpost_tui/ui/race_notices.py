"""What an operator watching a race must not miss, as notifications that stay a while: the user's
repository changed behind the race, the race's own warnings, a winner, a quota (and when it resets),
the budget running out. Each is said once; the screen's timer calls `say` with its session."""

from __future__ import annotations

from collections.abc import Callable

from .session import RaceSession


class RaceNotices:
    def __init__(self, notify: Callable[..., object]) -> None:
        self.notify = notify
        self._tampering_shown = 0
        self._warnings_shown = 0
        # key -> state already announced ("" -> the budget's reason); None: no announcements at
        # all (a recorded race: it all happened long ago)
        self.announced: dict[str, str] | None = {}

    def from_now(self, session: RaceSession) -> None:
        """Announce only what changes from here on (a replay's candidates that ended before the
        crash were announced then, not now)."""
        self.announced = {key: c.state for key, c in session.model.candidates.items()}

    def say(self, session: RaceSession) -> None:
        model = session.model
        for line in model.tampering[self._tampering_shown :]:
            # the one thing that must not scroll by in a log: the user's repository was changed
            self.notify(
                f"your repository was changed: {line}",
                title="repository changed",
                severity="error",
                timeout=30,
                markup=False,
            )
        self._tampering_shown = len(model.tampering)
        for line in model.warnings[self._warnings_shown :]:
            self.notify(line, title="race warning", severity="warning", timeout=30, markup=False)
        self._warnings_shown = len(model.warnings)
        self._announce(session)

    def _announce(self, session: RaceSession) -> None:
        """A winner, a quota, the budget: for what changed while the screen ran."""
        announced = self.announced
        if announced is None or not session.started:
            return
        model = session.model
        for key, candidate in model.candidates.items():
            state = candidate.state
            if announced.get(key) == state:
                continue
            announced[key] = state
            if state == "winner":
                how = " (accepted by operator)" if candidate.accepted else ""
                self.notify(f"{key} won{how}", title="winner", markup=False)
            elif state == "quota":
                quota = candidate.quota or {}
                reset = quota.get("reset_at")
                self.notify(
                    f"{key} hit its quota: {quota.get('message') or 'usage limit'}"
                    + (f"; resets {reset}" if reset else ""),
                    title="quota",
                    severity="warning",
                    markup=False,
                    timeout=15,
                )
        if model.budget_reason and announced.get("") != model.budget_reason:
            announced[""] = model.budget_reason
            self.notify(model.budget_reason, title="budget", severity="warning", markup=False, timeout=15)
