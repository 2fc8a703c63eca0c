"""Is a durable run's coordinator still alive, and stopping it: the recovery "stop" step.

The coordinator is found again by its host, boot, pid and start time (pids.py), never by the pid
alone.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import time
import uuid
from dataclasses import dataclass
from typing import Any

import psutil

from ... import exitcodes
from ..errors import OutpostError
from ..pids import START_TOLERANCE, from_epoch, process_start, started, this_boot, this_host

_POLL = 0.02


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
    process_start: float  # seconds after this host's boot
    started_at: float
    heartbeat_at: float
    boot: str = ""  # the boot it ran in; "" when unknown (a record of an older version)

    @classmethod
    def current(cls) -> Owner:
        now = time.time()
        pid = os.getpid()
        return cls(uuid.uuid4().hex, pid, this_host(), process_start(pid), now, now, this_boot())

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
        boot = data.get("boot", "")
        if not isinstance(boot, str):
            raise ValueError("owner.boot is not a string")
        start = float(data["process_start"])
        if "boot" not in data:
            # Written before start times counted from the boot: an epoch time, taken back to one as
            # that version compared it.
            start = from_epoch(start)
        return cls(
            data["id"],
            data["pid"],
            data["host"],
            start,
            float(data["started_at"]),
            float(data["heartbeat_at"]),
            boot or this_boot(),
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
    if owner.boot != this_boot():
        return CoordinatorStatus(
            False, f"{host} has restarted since the coordinator (pid {owner.pid}) ran; {heartbeat}"
        )
    try:
        process = psutil.Process(owner.pid)
        began = started(process)
        zombie = process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return CoordinatorStatus(False, f"pid {owner.pid} no longer exists on {host}; {heartbeat}")
    except psutil.AccessDenied:
        return CoordinatorStatus(
            None, f"pid {owner.pid} on {host} exists but cannot be inspected (permission denied); {heartbeat}"
        )
    if abs(began - owner.process_start) > START_TOLERANCE:
        return CoordinatorStatus(
            False,
            (
                f"pid {owner.pid} on {host} is now another process "
                f"(started {began - owner.process_start:+.0f} s "
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
    if owner.boot != this_boot():
        return True  # it ran before this host restarted
    try:
        process = psutil.Process(owner.pid)
        began = started(process)
    except psutil.NoSuchProcess:
        return True
    except psutil.AccessDenied:
        raise StopRefused(f"no permission to inspect the coordinator (pid {owner.pid})") from None
    if abs(began - owner.process_start) > START_TOLERANCE:
        raise StopRefused(
            f"pid {owner.pid} is now another process, not the coordinator (which has "
            f"exited): refusing to signal it"
        )
    _signal(process, signal.SIGTERM)
    if _wait_gone(process, timeout):
        return True
    _signal(process, signal.SIGKILL)
    return _wait_gone(process, kill_timeout)
