"""The Textual app. The engine never imports this package."""

from __future__ import annotations

import sys
from pathlib import Path

from .. import exitcodes
from . import collector


def open_app(
    race_file: str | None = None, *, start: bool = False, screen: str | None = None, replay: bool = False
) -> int:
    """Open the app from the command line; it needs a terminal on both ends."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        print(
            "outpost-tui: the app needs a terminal; for scripts use `outpost-tui run RACE.toml --headless`",
            file=sys.stderr,
        )
        return exitcodes.BAD_INPUT
    return launch(race_file, start=start, screen=screen, replay=replay)


def launch(
    race_file: str | Path | None = None,
    *,
    start: bool = False,
    screen: str | None = None,
    repository: str | Path = ".",
    replay: bool = False,
) -> int:
    """replay: the race file's interrupted run may be replayed (`run RACE.toml --resume`)."""
    collector.hold_off()
    try:
        from .app import OutpostApp  # Textual loads only when the app opens: `--help` stays instant

        app = OutpostApp(race_file, start=start, screen=screen, repository=repository, replay=replay)
        app.run()
    finally:
        collector.let_go()
    session = app.session
    if session is not None and not session.checked and session.error:
        # the race file was checked after the app opened, and is bad: said here too, as `check` says it
        print(f"outpost-tui: {session.error}", file=sys.stderr)
        return exitcodes.BAD_INPUT
    result = session.result if session else None
    if result is None:
        return 0
    return 0 if result.winner else 1
