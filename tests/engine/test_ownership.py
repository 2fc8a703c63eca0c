"""Coordinator liveness and stopping, against real child processes."""

from __future__ import annotations

import dataclasses
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from outpost_tui.engine.durable.ownership import (
    Owner,
    StopRefused,
    coordinator_status,
    stop_coordinator,
)
from outpost_tui.engine.pids import process_start, this_boot, this_host

IGNORES_TERM = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


@pytest.fixture
def child() -> Iterator[subprocess.Popen]:
    process = subprocess.Popen(["sleep", "60"])
    yield process
    process.kill()
    process.wait()


def owner_of(
    pid: int, *, host: str | None = None, start: float | None = None, heartbeat_age: float = 5.0
) -> Owner:
    now = time.time()
    return Owner(
        "0" * 32,
        pid,
        host or this_host(),
        process_start(pid) if start is None else start,
        now - 60,
        now - heartbeat_age,
        this_boot(),
    )


def wait_for(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.01)


def test_a_live_coordinator_is_alive(child: subprocess.Popen) -> None:
    status = coordinator_status(owner_of(child.pid, heartbeat_age=90))
    assert status.alive is True
    assert f"pid {child.pid}" in status.reason and "heartbeat 90 s ago" in status.reason


def test_an_exited_coordinator_is_dead(child: subprocess.Popen) -> None:
    owner = owner_of(child.pid)
    child.kill()
    # Exited but not yet reaped (a zombie) already counts as gone.
    wait_for(lambda: psutil.Process(child.pid).status() == psutil.STATUS_ZOMBIE)
    assert coordinator_status(owner).alive is False
    child.wait()
    status = coordinator_status(owner)
    assert status.alive is False and "no longer exists" in status.reason


def test_a_reused_pid_is_not_the_coordinator(child: subprocess.Popen) -> None:
    owner = owner_of(child.pid, start=process_start(child.pid) - 100)
    status = coordinator_status(owner)
    assert status.alive is False and "another process" in status.reason
    with pytest.raises(StopRefused, match="another process"):
        stop_coordinator(owner, timeout=1)
    assert child.poll() is None  # the innocent process was not signalled


def test_a_coordinator_on_another_host_is_unknown(child: subprocess.Popen) -> None:
    owner = owner_of(child.pid, host="elsewhere.invalid", heartbeat_age=300)
    status = coordinator_status(owner)
    assert status.alive is None
    assert "elsewhere.invalid" in status.reason and "proves nothing" in status.reason
    assert "heartbeat 5 min ago" in status.reason
    with pytest.raises(StopRefused, match=r"elsewhere\.invalid"):
        stop_coordinator(owner)
    assert child.poll() is None


def test_stop_with_sigterm(child: subprocess.Popen) -> None:
    assert stop_coordinator(owner_of(child.pid), timeout=10) is True
    assert child.wait(timeout=5) == -signal.SIGTERM


def test_stop_escalates_to_sigkill_when_sigterm_is_ignored() -> None:
    process = subprocess.Popen([sys.executable, "-c", IGNORES_TERM], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline() == "ready\n"
        began = time.monotonic()
        assert stop_coordinator(owner_of(process.pid), timeout=0.3) is True
        assert process.wait(timeout=5) == -signal.SIGKILL
        assert time.monotonic() - began >= 0.3  # SIGTERM was given its chance first
    finally:
        process.kill()
        process.wait()


def test_stopping_a_coordinator_that_is_already_gone(child: subprocess.Popen) -> None:
    owner = owner_of(child.pid)
    child.kill()
    child.wait()
    assert stop_coordinator(owner) is True


def test_a_clock_step_leaves_a_live_coordinator_alive(child: subprocess.Popen, step_clock) -> None:
    owner = owner_of(child.pid)
    epoch_start = psutil.Process(child.pid).create_time()
    step_clock(30)
    # the control: the epoch start time, which ownership once compared, moved with the clock
    assert psutil.Process(child.pid).create_time() - epoch_start == pytest.approx(30, abs=0.01)
    assert coordinator_status(owner).alive is True
    assert stop_coordinator(owner, timeout=10) is True
    assert child.wait(timeout=5) == -signal.SIGTERM


def test_a_coordinator_of_an_earlier_boot_is_gone_and_nothing_is_signalled(child: subprocess.Popen) -> None:
    owner = dataclasses.replace(owner_of(child.pid), boot="an-earlier-boot")
    status = coordinator_status(owner)
    assert status.alive is False and "restarted" in status.reason
    assert stop_coordinator(owner) is True
    assert child.poll() is None


def test_a_record_of_an_older_version_still_names_its_live_coordinator(child: subprocess.Popen) -> None:
    record = owner_of(child.pid).to_json()
    del record["boot"]
    record["process_start"] = psutil.Process(child.pid).create_time()  # as it was written: epoch time
    owner = Owner.from_json(record)
    assert owner.process_start == pytest.approx(process_start(child.pid), abs=0.01)
    assert coordinator_status(owner).alive is True
    assert Owner.from_json(owner.to_json()) == owner
