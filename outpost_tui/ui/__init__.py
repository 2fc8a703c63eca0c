"""The Textual app. The engine never imports this package."""

from __future__ import annotations

from pathlib import Path


def launch(race_file: str | Path | None = None, *, start: bool = False, screen: str | None = None,
           repository: str | Path = ".") -> int:
    from .app import OutpostApp

    app = OutpostApp(race_file, start=start, screen=screen, repository=repository)
    app.run()
    result = app.session.result if app.session else None
    if result is None:
        return 0
    return 0 if result.winner else 1
