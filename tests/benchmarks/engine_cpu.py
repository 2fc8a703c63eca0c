"""The container engine's CPU while something runs, read from /proc and the cgroup filesystem.

Counted, where found on this machine:
- the engine's API process: `podman system service` serving DOCKER_HOST's socket, or the dockerd
  serving it and its containerd; with the children they have reaped (the runc calls they make);
- Podman's conmon processes, and what they run (runc create and exec, the `podman container
  cleanup` each container and each exec ends with): they detach from the service, so they are read
  from their cgroup (cgroupfs: `libpod_parent/conmon`, cgroup v1 cpuacct or v2).
Not counted: Docker's containerd-shim processes (they detach, and live in no cgroup of their own),
and each container's own cgroup (runc's init inside it, then the command's work).
A process reaped after the reading (an exec's cleanup, 5 s later with this CI's settings) counts
in the next one.

`machine_seconds()` is the other end: the CPU every process on the machine has used (the kernel's
work for them included), from /proc/stat. A race cannot end before its busy seconds, spread over
the cores, have been spent: with the parts above, that says how much of a race's length its
containers' cost to the machine decides, and how much outpost-tui's own process does."""

from __future__ import annotations

import os
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")
CONMON_CGROUPS = (
    Path("/sys/fs/cgroup/cpuacct/libpod_parent/conmon/cpuacct.usage"),  # v1: nanoseconds
    Path("/sys/fs/cgroup/libpod_parent/conmon/cpu.stat"),  # v2: usage_usec
)


def _cmdline(pid: str) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _ppid(pid: str) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1]
    except (OSError, IndexError):
        return None


def engine_processes(endpoint: str) -> dict[str, str]:
    """{pid: name} of the engine serving `endpoint` (a unix:// socket): its API process, and
    dockerd's containerd. Empty when none is found (a remote engine, another kind of host)."""
    socket = endpoint.removeprefix("unix://")
    found: dict[str, str] = {}
    pids = [entry.name for entry in Path("/proc").iterdir() if entry.name.isdigit()]
    for pid in pids:
        argv = _cmdline(pid)
        if not argv or not any(socket in arg for arg in argv):
            continue
        program = os.path.basename(argv[0])
        if program == "podman" and "service" in argv:
            found[pid] = "podman service"
        elif program == "dockerd":
            found[pid] = "dockerd"
    for pid in pids:
        if _ppid(pid) in found and os.path.basename((_cmdline(pid) or [""])[0]) == "containerd":
            found[pid] = "containerd"
    return found


def _process_seconds(pid: str) -> float:
    """utime + stime + cutime + cstime: the process and the children it has reaped."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(value) for value in fields[11:15]) / TICK


def machine_seconds() -> float:
    """CPU seconds the whole machine has been busy since it booted, all cores summed (user, nice,
    system, irq, softirq and steal: everything but idle and waiting for I/O)."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    return (sum(fields) - fields[3] - fields[4]) / TICK


def _conmon_seconds() -> float | None:
    for path in CONMON_CGROUPS:
        try:
            text = path.read_text()
        except OSError:
            continue
        if path.name == "cpuacct.usage":
            return int(text) / 1e9
        for line in text.splitlines():
            if line.startswith("usage_usec "):
                return int(line.split()[1]) / 1e6
    return None


class EngineCpu:
    """`reading = EngineCpu(endpoint)`, then `reading.since()`: seconds of CPU by part."""

    def __init__(self, endpoint: str) -> None:
        self.processes = engine_processes(endpoint)
        self._start = self._now()

    def _now(self) -> dict[str, float]:
        parts: dict[str, float] = {}
        for pid, name in self.processes.items():
            parts[name] = parts.get(name, 0.0) + _process_seconds(pid)
        conmon = _conmon_seconds()
        if conmon is not None and "podman service" in self.processes.values():
            parts["conmon"] = conmon
        return parts

    def since(self) -> dict[str, float]:
        now = self._now()
        return {name: now[name] - self._start.get(name, 0.0) for name in now}
