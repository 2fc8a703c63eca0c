"""The flight log: every event as a JSON line under `<repo>/.outpost/runs/<race-id>/`.

One file per attempt (`<key>.<attempt>.jsonl`) plus `race.jsonl` for race-level events, so a
candidate's history can be read on its own. It is meant to be followed while the race runs
(`tail -f`) and to survive a killed coordinator, so every event other than log text is flushed to
the OS as it is written; log text, which can arrive at hundreds of thousands of lines a second, is
buffered and flushed at least once a second. Logs never enter the durable checkpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from ..core.events import Event, Log

BUFFER = 256 * 1024
LOG_FLUSH_INTERVAL = 1.0  # seconds log lines may wait in the buffer


def runs_directory(outpost_dir: Path) -> Path:
    return outpost_dir / "runs"


def make_private_directory(directory: Path) -> None:
    """Create directory and any missing parents, each 0700 (mkdir's mode passes through the umask
    and `parents=True` gives the parents the default mode)."""
    missing = []
    path = directory
    while not path.exists():
        missing.append(path)
        if path.parent == path:
            break
        path = path.parent
    for path in reversed(missing):
        # made meanwhile (another race starting); it is tightened below all the same
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)
        os.chmod(path, 0o700)
    if not directory.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "exists and is not a directory", str(directory))
    os.chmod(directory, 0o700)


class FlightLog:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        make_private_directory(directory)
        self._files: dict[str, IO[str]] = {}
        self._dumps = json.JSONEncoder(
            ensure_ascii=False, separators=(",", ":"), default=str, allow_nan=False
        ).encode
        self._unflushed: set[str] = set()  # files holding log lines not yet flushed
        self._flush_due: float | None = None
        self._timer: asyncio.TimerHandle | None = None

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
        if not isinstance(event, Log):
            handle.flush()
            self._unflushed.discard(name)
            return
        self._unflushed.add(name)
        now = time.monotonic()
        if self._flush_due is None:
            self._flush_due = now + LOG_FLUSH_INTERVAL
            self._start_timer()
        elif now >= self._flush_due:
            self.flush_logs()

    def _start_timer(self) -> None:
        # Log lines followed by silence must still reach the file: the event loop flushes them
        # when they are due. Without a running loop, the next write past the deadline does.
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._timer = loop.call_later(LOG_FLUSH_INTERVAL, self._on_timer)

    def _on_timer(self) -> None:
        self._timer = None
        # a full disk: the next write fails too and the event bus reports that
        with contextlib.suppress(OSError):
            self.flush_logs()

    def flush_logs(self) -> None:
        """Flush every file holding buffered log lines."""
        self._flush_due = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        names, self._unflushed = self._unflushed, set()
        for name in names:
            handle = self._files.get(name)
            if handle is not None:
                handle.flush()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._unflushed.clear()
        self._flush_due = None
        for handle in self._files.values():
            handle.close()
        self._files.clear()


def read_flight_log(path: Path) -> list[dict[str, Any]]:
    """Events of one flight-log file, in file order."""
    return list(flight_log_lines(path))


def flight_log_lines(path: Path) -> Iterator[dict[str, Any]]:
    """The JSON objects of one flight-log file, in file order. A line that is not one (a torn
    last line, even one cut inside a multi-byte character) is skipped."""
    with open(path, "rb") as handle:
        for raw in handle:
            try:
                value = json.loads(raw.decode("utf-8"))
            except ValueError:  # UnicodeDecodeError is one too
                continue
            if isinstance(value, dict):
                yield value
