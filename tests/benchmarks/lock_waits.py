"""Time spent waiting for the engine's locks during a race, by lock, for the engine benchmarks.

Three locks can hold an attempt up: the repository's worktree lock (adds and removes share it; a
prune takes it alone), a long-lived git session's (the race's `cat-file` and `update-ref`
processes answer one request at a time), and the race's repository-check lock (an attempt that
ends while a check runs waits for it, then is served by the next). Each is timed from asking to
holding; the time spent holding it is not counted.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

from outpost_tui.engine.git import sessions
from outpost_tui.engine.git.worktrees import WorktreeLock
from outpost_tui.engine.racing.state import RaceState

LOCKS = ("worktree", "git_session", "repository_check")


class _Tally:
    def __init__(self) -> None:
        self.seconds = dict.fromkeys(LOCKS, 0.0)
        self._guard = threading.Lock()

    def add(self, lock: str, since: float) -> None:
        waited = time.perf_counter() - since
        with self._guard:  # the worker threads add at once
            self.seconds[lock] += waited


class _TimedLock:
    """A threading lock whose `with` counts the wait."""

    def __init__(self, lock: Any, tally: _Tally) -> None:
        self._lock, self._tally = lock, tally

    def __enter__(self) -> bool:
        since = time.perf_counter()
        self._lock.acquire()
        self._tally.add("git_session", since)
        return True

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()


class _TimedAsyncLock:
    """An anyio lock whose `async with` counts the wait."""

    def __init__(self, lock: Any, tally: _Tally) -> None:
        self._lock, self._tally = lock, tally

    async def __aenter__(self) -> None:
        since = time.perf_counter()
        await self._lock.acquire()
        self._tally.add("repository_check", since)

    async def __aexit__(self, *exc: object) -> None:
        self._lock.release()


@contextlib.contextmanager
def lock_waits() -> Iterator[dict[str, float]]:
    """Seconds waited for each lock (LOCKS) while the block runs, filled in as they are waited."""
    tally = _Tally()
    originals = (WorktreeLock.shared, WorktreeLock.exclusive, sessions.Session.__init__, RaceState.__init__)
    shared, exclusive, session_init, state_init = originals

    def timed(original: Any) -> Any:
        @contextlib.contextmanager
        def held(self: WorktreeLock) -> Iterator[None]:
            since = time.perf_counter()
            with original(self):
                tally.add("worktree", since)
                yield

        return held

    def new_session(self: sessions.Session, *args: Any, **options: Any) -> None:
        session_init(self, *args, **options)
        self.lock = _TimedLock(self.lock, tally)  # type: ignore[assignment]

    def new_state(self: RaceState, *args: Any, **options: Any) -> None:
        state_init(self, *args, **options)
        self._record_lock = _TimedAsyncLock(self._record_lock, tally)  # type: ignore[assignment]

    WorktreeLock.shared = timed(shared)  # type: ignore[method-assign]
    WorktreeLock.exclusive = timed(exclusive)  # type: ignore[method-assign]
    sessions.Session.__init__ = new_session  # type: ignore[method-assign]
    RaceState.__init__ = new_state  # type: ignore[method-assign]
    try:
        yield tally.seconds
    finally:
        WorktreeLock.shared, WorktreeLock.exclusive = shared, exclusive  # type: ignore[method-assign]
        sessions.Session.__init__ = session_init  # type: ignore[method-assign]
        RaceState.__init__ = state_init  # type: ignore[method-assign]
