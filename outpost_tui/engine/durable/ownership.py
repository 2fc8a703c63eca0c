"""Is a durable run's coordinator still alive, and stopping it: the recovery "stop" step.

A process is identified by (host, pid, start time), never by the pid alone: pids are reused, and a
pid on another host cannot be looked up from here at all. So "gone" is only ever claimed for a
process on this host, after checking that the pid is absent or now belongs to a different process.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Any

import psutil

from ... import exitcodes
from ..errors import OutpostError

# create_time() is derived from boot time and clock ticks; allow for rounding between readings.
START_TOLERANCE = 1.0
_POLL = 0.02


def this_host() -> str:
    return socket.gethostname()


def process_start(pid: int) -> float:
    """Start time (epoch seconds) of `pid`; raises psutil.NoSuchProcess when there is none."""
    return psutil.Process(pid).create_time()


def same_process(pid: int, start: float) -> bool:
    """True while `pid` is a running (non-zombie) process started at `start`.

    A process we may not inspect counts as running: callers use this to decide whether it is safe to
    take something over, and assuming "alive" is the safe side.
    """
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        return abs(process.create_time() - start) <= START_TOLERANCE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True


def describe_age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"


@dataclass(frozen=True)
class CoordinatorStatus:
    alive: bool | None  # None: cannot be known from this host
    reason: str


class StopRefused(OutpostError):
    """The coordinator cannot be stopped from here; the message says why, in one line."""

    exit_code = exitcodes.OWNED


@dataclass(frozen=True)
class Owner:
    """The coordinator holding a run: enough to find its process again."""

    id: str
    pid: int
    host: str
    process_start: float
    started_at: float
    heartbeat_at: float

    @classmethod
    def current(cls) -> Owner:
        now = time.time()
        pid = os.getpid()
        return cls(uuid.uuid4().hex, pid, this_host(), process_start(pid), now, now)

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> Owner:
        """Raises ValueError naming the first bad field."""
        if not isinstance(data, dict):
            raise ValueError("owner is not an object")
        types: dict[str, type | tuple[type, ...]] = {
            "id": str,
            "pid": int,
            "host": str,
            "process_start": (int, float),
            "started_at": (int, float),
            "heartbeat_at": (int, float),
        }
        for name, kind in types.items():
            value = data.get(name)
            if not isinstance(value, kind) or isinstance(value, bool):
                raise ValueError(f"owner.{name} is missing or not a {getattr(kind, '__name__', 'number')}")
        return cls(
            data["id"],
            data["pid"],
            data["host"],
            float(data["process_start"]),
            float(data["started_at"]),
            float(data["heartbeat_at"]),
        )


def _heartbeat(owner: Owner, now: float) -> str:
    return f"last heartbeat {describe_age(now - owner.heartbeat_at)} ago"


def coordinator_status(owner: Owner, *, now: float | None = None) -> CoordinatorStatus:
    now = time.time() if now is None else now
    heartbeat = _heartbeat(owner, now)
    host = this_host()
    if owner.host != host:
        return CoordinatorStatus(
            None,
            (
                f"the coordinator (pid {owner.pid}) runs on host {owner.host}, not {host}: its process "
                f"cannot be checked from here, and a missing pid on this host proves nothing; {heartbeat}"
            ),
        )
    try:
        process = psutil.Process(owner.pid)
        started = process.create_time()
        zombie = process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return CoordinatorStatus(False, f"pid {owner.pid} no longer exists on {host}; {heartbeat}")
    except psutil.AccessDenied:
        return CoordinatorStatus(
            None, f"pid {owner.pid} on {host} exists but cannot be inspected (permission denied); {heartbeat}"
        )
    if abs(started - owner.process_start) > START_TOLERANCE:
        return CoordinatorStatus(
            False,
            (
                f"pid {owner.pid} on {host} is now another process "
                f"(started {started - owner.process_start:+.0f} s "
                f"after the coordinator): the coordinator has exited; {heartbeat}"
            ),
        )
    if zombie:
        return CoordinatorStatus(False, f"pid {owner.pid} on {host} has exited (not yet reaped); {heartbeat}")
    return CoordinatorStatus(True, f"pid {owner.pid} on {host} is running; {heartbeat}")


def _gone(process: psutil.Process) -> bool:
    try:
        # is_running() also compares the start time, so a reused pid counts as gone.
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_gone(process: psutil.Process, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while True:
        if _gone(process):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(_POLL)


def _signal(process: psutil.Process, signum: int) -> None:
    try:
        process.send_signal(signum)
    except psutil.NoSuchProcess:
        pass
    except psutil.AccessDenied:
        raise StopRefused(f"no permission to signal the coordinator (pid {process.pid})") from None


def stop_coordinator(owner: Owner, *, timeout: float = 10.0, kill_timeout: float = 5.0) -> bool:
    """SIGTERM the coordinator, SIGKILL it if it outlives `timeout`; True only once it is verified gone.

    Refuses (StopRefused) when it runs on another host, or when its pid now belongs to another process:
    signalling that pid would hit an innocent process.
    """
    host = this_host()
    if owner.host != host:
        raise StopRefused(
            f"the coordinator runs on host {owner.host}, not {host}: stop pid {owner.pid} there"
        )
    if owner.pid == os.getpid():
        raise StopRefused(f"pid {owner.pid} is this process: refusing to stop itself")
    try:
        process = psutil.Process(owner.pid)
        started = process.create_time()
    except psutil.NoSuchProcess:
        return True
    except psutil.AccessDenied:
        raise StopRefused(f"no permission to inspect the coordinator (pid {owner.pid})") from None
    if abs(started - owner.process_start) > START_TOLERANCE:
        raise StopRefused(
            f"pid {owner.pid} is now another process, not the coordinator (which has "
            f"exited): refusing to signal it"
        )
    _signal(process, signal.SIGTERM)
    if _wait_gone(process, timeout):
        return True
    _signal(process, signal.SIGKILL)
    return _wait_gone(process, kill_timeout)
