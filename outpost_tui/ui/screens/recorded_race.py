"""A race that already ran, replayed from its flight log on the race screen, read-only: every panel,
zoom, log search and diff; the controls that would change a race are not offered."""

from __future__ import annotations

import time
from pathlib import Path
from typing import cast

from rich.text import Text
from textual.binding import Binding

from ..race_sketch import RaceSketch
from ..session import RaceSession
from .race import RaceScreen


class RecordedSession:
    """A race that already ran, shaped as the screen reads a RaceSession: started, never running,
    its model filled once from the recorded events."""

    started = True
    checked = True
    ready = True
    running = False
    error = None

    def __init__(self, recording) -> None:
        self.recording = recording
        self.spec = recording.spec
        self.sketch = RaceSketch.of(recording.spec)
        self.model = recording.model
        self.result = recording.result


READ_ONLY = ("start", "cancel", "accept", "abort")


class RecordedRaceScreen(RaceScreen):
    """A recorded race, read-only: every panel, zoom, log search and diff; the controls that
    would change a race are not offered and say why when pressed."""

    # Same keys and binding ids (a user's rebinding applies here too), hidden from the footer.
    BINDINGS = [
        Binding(b.key, b.action, f"{b.description} (live races only)", show=False, id=b.id)
        for b in RaceScreen.BINDINGS
        if isinstance(b, Binding) and b.action in READ_ONLY
    ]

    RECORDED = True

    def __init__(self, recording) -> None:
        last = recording.last_event_at
        # Read as a RaceSession that never started: the controls that would reach its race are off.
        session = cast(RaceSession, RecordedSession(recording))
        super().__init__(session, clock=(lambda: last) if last else time.time)
        self.recording = recording
        self.notices.announced = None

    def on_mount(self) -> None:
        # Textual calls RaceScreen.on_mount after this one (handlers run up the MRO) and it sets
        # the live title: the recorded one is set once it has run.
        self.call_later(self._recorded_title)

    def _recorded_title(self) -> None:
        race = self.recording.race
        started = (
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(race.started_at)) if race.started_at else "?"
        )
        self.title = f"outpost-tui · {self.session.spec.name} · recorded"
        self.sub_title = f"race {race.id}, started {started}"

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        if action == "results":
            return self.session.result is not None
        return True

    def _state_text(self) -> Text:
        if self.session.result is not None:
            return super()._state_text()
        text = Text("unfinished", style="bold")
        text.append("  no race-finished event was recorded: its coordinator was killed, or it still runs")
        return text

    def _read_only(self, what: str) -> None:
        self.notify(f"a recorded race: nothing to {what}", severity="warning")

    def action_start(self) -> None:
        self._read_only("start")

    def action_cancel(self) -> None:
        self._read_only("cancel")

    def action_accept(self) -> None:
        self._read_only("accept")

    def action_abort(self) -> None:
        self._read_only("abort")

    NO_BRANCH = "never had a branch"

    def diff_base(self) -> tuple[Path | None, str | None]:
        return self.recording.repository, self.recording.baseline
