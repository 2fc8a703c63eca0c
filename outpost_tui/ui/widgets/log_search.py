"""The race screen's search line (`/`): it filters one candidate's log, the one focused when it
opened, to the lines that match; shown while open (-visible, race.tcss)."""

from __future__ import annotations

from textual.widgets import Input


class LogSearch(Input):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(placeholder="search the focused log (enter to filter, escape to clear)", id=id)
        self.target: str | None = None  # the candidate whose log it filters

    @property
    def is_open(self) -> bool:
        return self.has_class("-visible")

    def open_on(self, key: str) -> None:
        self.target = key
        self.add_class("-visible")
        self.focus()

    def close(self, *, clear: bool) -> str | None:
        """Hide it (and with `clear`, empty it); the candidate whose log it filtered."""
        self.remove_class("-visible")
        if clear and self.target is not None:
            self.value = ""
        return self.target
