"""Which process a pid names: a pid is reused, so a process is (host, boot, pid, start time).

A pid on another host cannot be looked up from here at all, so "gone" is only ever claimed for a
process on this host, after checking that the pid is absent or now belongs to a different process.

A start time counts from the machine's boot, as the kernel keeps it. psutil's epoch start time adds
the boot time as the wall clock sees it now, so a clock step (NTP setting a fresh machine's clock, a
resumed VM) moves every process's start: a live coordinator or lock holder would look like a reused
pid and be taken over, and a candidate's process like another one, and be left running.
"""

from __future__ import annotations

import functools
import socket
from pathlib import Path

import psutil

# Start times are whole clock ticks apart, read through the boot time in whole seconds: allow for
# rounding between readings.
START_TOLERANCE = 1.0
_BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


def this_host() -> str:
    return socket.gethostname()


@functools.cache  # a process lives within one boot
def this_boot() -> str:
    """The kernel's name for this boot ("" where it keeps none): a start time counted from the boot
    identifies a process within one boot only."""
    try:
        return _BOOT_ID.read_text().strip()
    except OSError:
        return ""


def started(process: psutil.Process) -> float:
    """Seconds from this machine's boot to `process`'s start."""
    # create_time() is the kernel's ticks since boot plus psutil.boot_time(), both read now: taking
    # the boot time back off leaves what no clock step moves. Rounded to the millisecond (ticks are
    # 10 ms) so the sum's float rounding, which differs with the boot time, never tells two equal.
    return round(process.create_time() - psutil.boot_time(), 3)


def from_epoch(start: float) -> float:
    """An epoch start time (what earlier versions recorded) as seconds after this boot, as they
    compared it."""
    return start - psutil.boot_time()


def process_start(pid: int) -> float:
    """Seconds from this machine's boot to `pid`'s start; raises psutil.NoSuchProcess when there is none."""
    return started(psutil.Process(pid))


def start_of(pid: int) -> float | None:
    """`process_start`, or None when the pid is gone or may not be inspected."""
    try:
        return process_start(pid)
    except psutil.Error:
        return None


def same_process(pid: int, start: float, boot: str) -> bool:
    """True while `pid` is a running (non-zombie) process of this boot started at `start`.

    A process we may not inspect counts as running: callers use this to decide whether it is safe to
    take something over, and assuming "alive" is the safe side.
    """
    if boot != this_boot():
        return False
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        return abs(started(process) - start) <= START_TOLERANCE
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True
