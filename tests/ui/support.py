"""What the app's tests share: waiting for a condition while the app runs, a Static's text, and a
bare app that shows one screen."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from textual.app import App
from textual.css.query import NoMatches
from textual.screen import Screen
from textual.widgets import Static


async def until(
    pilot, condition: Callable[[], Any], what: str = "the condition", timeout: float = 60.0
) -> None:
    """Let the app run until condition() holds (workers, threads and timers move it on); fail naming
    `what` after `timeout` seconds, generous for a loaded machine. A widget the condition reads
    that is not there yet (a screen still composing on a loaded machine) is not there yet."""
    deadline = time.monotonic() + timeout
    while not _holds(condition):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await pilot.pause(0.05)


def _holds(condition: Callable[[], Any]) -> Any:
    try:
        return condition()
    except NoMatches:
        return False


def text(screen, selector: str) -> str:
    """What the Static at `selector` shows."""
    return str(screen.query_one(selector, Static).content)


class ScreenHost(App):
    """Stands in for the app: shows the screen under test and records what it is dismissed with
    (leaving with None is not recorded)."""

    def __init__(self, screen: Screen) -> None:
        super().__init__()
        self.start_screen = screen
        self.results: list = []

    def on_mount(self) -> None:
        self.animation_level = "none"
        self.push_screen(self.start_screen, self._dismissed)

    def _dismissed(self, result: Any) -> None:
        if result is not None:
            self.results.append(result)


async def prepared(pilot) -> None:
    """Let the app run until its race is built: the race screen paints its first frame before (see
    RaceSession.prepare), and the race's model and event bus exist from then on."""
    app = pilot.app
    await until(pilot, lambda: app.session is not None and app.session.ready, "the race to be prepared")


def footer_current(screen: Screen) -> bool:
    """Whether the screen's footer shows its bindings as they are now: the footer rebuilds itself a
    few loop turns after a screen's bindings change (a wizard leaving its busy state), and a picture
    taken in between shows keys dimmed that are live."""
    if not screen.query("Footer"):
        return True
    active = screen.active_bindings
    keys = list(screen.query("FooterKey"))
    return bool(keys) and all(
        key.key in active and active[key.key].enabled != key.has_class("-disabled") for key in keys
    )


async def footer_settled(pilot) -> None:
    """Let the app run until its footer shows the screen's current bindings and has stopped
    rebuilding: one change of bindings can rebuild it twice, a few loop turns apart."""
    screen = pilot.app.screen
    deadline = time.monotonic() + 60.0
    while True:
        await until(pilot, lambda: footer_current(screen), "the footer's bindings")
        shown = list(screen.query("FooterKey"))
        await pilot.pause(0.05)
        if footer_current(screen) and list(screen.query("FooterKey")) == shown:
            return
        assert time.monotonic() < deadline, "timed out waiting for the footer to settle"
