"""What the screens ask of the app they run in: its repository, its race session, opening a race,
a recorded race or the recovery wizard. A protocol, so the screens (which the app imports) need not
import the app back."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .session import RaceSession


class Host(Protocol):
    repository: Path
    session: RaceSession | None

    def open_race(self, path: Path, *, start: bool = False) -> None: ...

    def show_recorded(self, race_id: str, repository: Path | None = None) -> None: ...

    def open_recovery(self, repository: Path, run_id: str | None = None) -> None: ...
