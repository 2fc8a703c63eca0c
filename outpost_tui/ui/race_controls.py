"""The race screen's controls over a running race: cancel the focused candidate, accept it by hand,
abort the race; each asks for a confirmation first and reaches the race through its session."""

from __future__ import annotations

from collections.abc import Callable

from textual import work
from textual.screen import Screen

from .screens.confirm import ConfirmScreen
from .session import RaceSession


class RaceControls(Screen):
    """Mixin for the race screen, which says which candidate the keys act on (`focused_key`)."""

    session: RaceSession
    focused_key: Callable[[], str | None]

    def _confirm(self, question: str, then: Callable[[], object]) -> None:
        def answer(yes: bool | None) -> None:
            if yes:
                then()

        self.app.push_screen(ConfirmScreen(question), answer)

    def action_cancel(self) -> None:
        key = self.focused_key()
        if key is None or not self.session.running:
            return

        def cancel() -> None:
            if not self.session.cancel(key):
                self.notify(f"{key} has already finished", severity="warning")

        self._confirm(f"Cancel candidate {key}?", cancel)

    def action_accept(self) -> None:
        key = self.focused_key()
        if key is not None and self.session.running:
            question = f"Accept {key} as the winner by hand? Every other candidate is cancelled."
            self._confirm(question, lambda: self._accept(key))

    @work(group="accept")
    async def _accept(self, key: str) -> None:
        why_not = await self.session.accept(key)
        if why_not:
            self.notify(f"cannot accept {key}: {why_not}", severity="warning")

    def action_abort(self) -> None:
        if self.session.running:
            self._confirm(
                "Abort the race? Every running candidate is cancelled.", lambda: self.session.abort()
            )
