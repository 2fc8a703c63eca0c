"""The flight log: every event as a JSON line under `<repo>/.outpost/runs/<race-id>/`.

One file per attempt (`<key>.<attempt>.jsonl`) plus `race.jsonl` for race-level events, so a
candidate's history can be read on its own. Writes go through a buffered file and are flushed when
an attempt settles and when the race ends; logs never enter the durable checkpoint.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO

from .events import Event, EventKind

BUFFER = 256 * 1024


def runs_directory(outpost_dir: Path) -> Path:
    return outpost_dir / "runs"


class FlightLog:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.chmod(directory, 0o700)
        self._files: dict[str, IO[str]] = {}
        self._dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), default=str).encode

    def _file(self, name: str) -> IO[str]:
        handle = self._files.get(name)
        if handle is None:
            path = self.directory / name
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            handle = os.fdopen(fd, "a", buffering=BUFFER, encoding="utf-8")
            self._files[name] = handle
        return handle

    def __call__(self, event: Event) -> None:
        name = "race.jsonl" if event.key is None else f"{event.key}.{event.attempt}.jsonl"
        handle = self._file(name)
        handle.write(self._dumps(event.to_json()))
        handle.write("\n")
        if event.kind in (EventKind.SETTLED, EventKind.RACE_FINISHED):
            handle.flush()

    def close(self) -> None:
        for handle in self._files.values():
            handle.close()
        self._files.clear()


def read_flight_log(path: Path) -> list[dict]:
    """Events of one flight-log file; a torn last line (crash mid-write) is skipped."""
    events = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
    return events
