"""Containment: every process a local command starts ends with it, however it detaches.

A process group is not enough: a daemon can `setsid` (or double-fork) out of it, close the output
pipe and live on, committing to its branch after the verdict. Two mechanisms, the first one the
machine allows:

- cgroup v2 (where this process can create a cgroup and move a process into it): each attempt
  gets a cgroup, each command a child cgroup of it. A tiny sh shim writes its own pid into the
  cgroup *before* it execs the command, so the command and everything it ever starts are inside;
  no fork, setsid or closed pipe leaves a cgroup. Ending a command kills its cgroup (cgroup.kill,
  or KILL to every member where the kernel has none) and waits until the kernel reports it empty;
  the emptied cgroup takes the attempt's next command (unless the last one made cgroups inside
  it), and goes with the attempt's.
  Only a process with write access to the cgroup tree itself (root, or the operator on a
  delegated tree) could move out: that is what the container sandbox is for.
- the process tree: while a command runs its descendants are recorded every POLL seconds by pid
  and start time (psutil), every process it starts carries a marker in its environment
  (OUTPOST_CONTAINMENT), and the command's output pipes are known. Ending it kills every recorded
  process still alive with the same start time, every process whose environment holds the marker,
  their descendants, and every holder of the pipes, round after round until none is left. A
  process that double-forks, execs itself with an emptied environment and drops the pipes, all
  within one poll, escapes this fallback; cgroup v2 has no such gap.

`OUTPOST_PROCESS_TRACKING=tree` forces the fallback (tests, or a machine where cgroups misbehave).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import signal
import subprocess
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

import psutil

from ..errors import OutpostError
from ..pids import start_of, started

PREFERENCE = "OUTPOST_PROCESS_TRACKING"  # auto (default) | tree
MARKER = "OUTPOST_CONTAINMENT"
CGROUP_DIR = "outpost-tui"
RESOURCE_CGROUP = "cgroup:"
RESOURCE_MARKER = "marker:"
POLL = 0.05  # seconds between snapshots of a command's process tree (fallback only)
CONFIRM_WITHIN = 10.0  # seconds a killed cgroup may take to become empty
# Empty attempt cgroups older than this were left by a coordinator that was killed (a durable
# run's replay removes its own): the first probe of a process removes them. A live attempt's
# cgroup removed between two commands is made again by its next command.
STALE_AFTER = 600.0

# $0: the cgroup's cgroup.procs; then argv. Moves itself in, then becomes the command.
SHIM = 'echo $$ > "$0" || { echo "outpost: cannot enter cgroup $0" >&2; exit 125; }; exec "$@"'


class ContainmentError(OutpostError):
    """Processes could not be confirmed gone; the message names them."""


def _cgroup2_mount() -> Path | None:
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return None
    mounts = []
    for line in lines:
        before, _, after = line.partition(" - ")
        if after.split(" ")[:1] == ["cgroup2"]:
            mounts.append(Path(before.split(" ")[4]))
    # the unified hierarchy itself when it is the whole of /sys/fs/cgroup, else its hybrid mount
    return min(mounts, key=lambda path: len(path.parts)) if mounts else None


def _own_cgroup() -> str | None:
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return line[3:]
    except OSError:
        pass
    return None


@functools.cache
def _probe() -> tuple[Path | None, str]:
    """The directory command cgroups go under, or None and why not."""
    mount, own = _cgroup2_mount(), _own_cgroup()
    if mount is None or own is None:
        return None, "no cgroup v2 hierarchy mounted"
    base = mount / own.lstrip("/") / CGROUP_DIR
    probe = base / f"probe-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        base.mkdir(exist_ok=True)
        probe.mkdir()
    except OSError as error:
        return None, f"cannot create a cgroup under {base.parent}: {error.strerror or error}"
    try:
        done = subprocess.run(
            ["/bin/sh", "-c", SHIM, str(probe / "cgroup.procs"), "true"],
            capture_output=True,
            timeout=10,
            check=False,
        )
        if done.returncode != 0:
            return None, f"cannot move a process into a cgroup under {base}"
    except (OSError, subprocess.TimeoutExpired) as error:
        return None, f"cannot move a process into a cgroup under {base}: {error}"
    finally:
        _remove_cgroup(probe)
    _sweep_stale(base)
    return base, ""


def _sweep_stale(base: Path) -> None:
    now = time.time()
    for group in base.iterdir():
        try:
            if (
                not (group / "cgroup.procs").exists()
                or now - group.stat().st_mtime < STALE_AFTER
                or _populated(group)
            ):
                continue
            for child in group.iterdir():
                if (child / "cgroup.procs").exists():
                    child.rmdir()
            group.rmdir()
        except OSError:
            continue  # populated meanwhile, or not ours to remove: left alone


def cgroup_root() -> Path | None:
    """Where command cgroups are made, or None when the fallback is in force."""
    if os.environ.get(PREFERENCE, "auto") == "tree":
        return None
    return _probe()[0]


def mechanism() -> str:
    """One line for `doctor`: which mechanism is in force here, and why."""
    if os.environ.get(PREFERENCE, "auto") == "tree":
        return f"process tree (pids by start time, environment marker, output pipes): {PREFERENCE}=tree"
    root, why = _probe()
    if root is not None:
        return f"cgroup v2 per attempt under {root}"
    return f"process tree (pids by start time, environment marker, output pipes): {why}"


# -- cgroups --------------------------------------------------------------------------------------


def _members(group: Path) -> list[int]:
    pids: list[int] = []
    for procs in [group / "cgroup.procs", *group.glob("*/cgroup.procs")]:
        try:
            pids += [int(pid) for pid in procs.read_text().split()]
        except (OSError, ValueError):
            continue
    return pids


def _populated(group: Path) -> bool:
    try:
        return re.search(r"^populated 1$", (group / "cgroup.events").read_text(), re.M) is not None
    except OSError:
        return bool(_members(group))


def empty(group: Path) -> bool:
    """Whether the kernel says `group` and its children hold no process (a group that is gone
    holds none)."""
    try:
        return re.search(r"^populated 0$", (group / "cgroup.events").read_text(), re.M) is not None
    except FileNotFoundError:
        return not group.exists()
    except OSError:
        return False


def reusable(group: Path) -> bool:
    """Whether an emptied command cgroup can take the next command as it was made: still there
    (a stale sweep may have taken it) and with no cgroup of the last command's making inside,
    whose settings could keep the next one out."""
    try:
        with os.scandir(group) as entries:
            return not any(entry.is_dir(follow_symlinks=False) for entry in entries)
    except OSError:
        return False


def describe(pids: Iterable[int]) -> list[tuple[int, str, int | None]]:
    """(pid, name, process group) of each pid still there, read before it is killed."""
    out: list[tuple[int, str, int | None]] = []
    for pid in pids:
        try:
            out.append((pid, psutil.Process(pid).name(), os.getpgid(pid)))
        except (psutil.Error, OSError):
            continue
    return out


def kill_cgroup(group: Path) -> list[tuple[int, str, int | None]]:
    """KILL everything in `group` (and its children), wait until the kernel says it is empty;
    returns (pid, name, pgid) of what was in it. Raises ContainmentError when it does not empty."""
    if not group.is_dir():
        return []
    members = describe(_members(group))
    deadline = time.monotonic() + CONFIRM_WITHIN
    kill = group / "cgroup.kill"
    while _populated(group):
        if kill.exists():
            with contextlib.suppress(OSError):
                kill.write_text("1")
        for pid in _members(group):  # kernels before 5.14 have no cgroup.kill
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if time.monotonic() > deadline:
            raise ContainmentError(
                f"cgroup {group} still holds processes {_members(group)} {CONFIRM_WITHIN:g}s after KILL"
            )
        time.sleep(0.01)
    return members


def _remove_cgroup(group: Path) -> None:
    for child in sorted(group.glob("*/"), reverse=True):
        if (child / "cgroup.procs").exists():
            _remove_cgroup(child)
    for _ in range(500):  # an emptied cgroup can be busy for a moment (longer on a loaded machine)
        try:
            group.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)


def end_cgroup(group: Path) -> list[tuple[int, str, int | None]]:
    """Kill and remove a cgroup; the pids it held."""
    members = kill_cgroup(group)
    _remove_cgroup(group)
    return members


def valid_cgroup(path: str) -> Path | None:
    """A recorded cgroup path, if it is one of ours (never any other cgroup)."""
    group = Path(path)
    if not group.is_absolute() or CGROUP_DIR not in group.parts[:-1] or ".." in group.parts:
        return None
    mount = _cgroup2_mount()
    return group if mount is not None and group.is_relative_to(mount) else None


# -- the process tree ------------------------------------------------------------------------------


def below(pid: int) -> list[int]:
    """Every descendant of `pid`, from the kernel's list of each task's children: a few reads
    of the tree itself, where psutil reads every process of the machine (10-20 ms each, and an
    isolated race stops its losers all at once). psutil where the kernel keeps no such list."""
    if not os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children"):
        try:
            return [child.pid for child in psutil.Process(pid).children(recursive=True)]
        except psutil.Error:
            return []
    found: list[int] = []
    parents = [pid]
    while parents:
        parent = parents.pop()
        # a process that ends meanwhile has no children left to list
        with contextlib.suppress(FileNotFoundError, ProcessLookupError):
            for task in os.listdir(f"/proc/{parent}/task"):
                with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                    with open(f"/proc/{parent}/task/{task}/children", "rb") as handle:
                        children = [int(child) for child in handle.read().split()]
                    found += children
                    parents += children
    return found


def descendants(pid: int) -> dict[int, float]:
    """pid -> start time of every living descendant of pid."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return {}
    found = {}
    for child in children:
        try:
            found[child.pid] = started(child)
        except psutil.Error:
            continue
    return found


def marked(token: str) -> dict[int, float]:
    """Every process whose environment (as it was exec'd) holds the marker `token`."""
    needle = f"{MARKER}={token}".encode()
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as handle:
                if needle in handle.read().split(b"\0"):
                    began = start_of(int(name))
                    if began is not None:
                        found[int(name)] = began
        except OSError:
            continue
    return found


def signal_strays(
    group: Path | None, known: dict[int, float], token: str | None, pgid: int, sig: int
) -> list[int]:
    """Send `sig` to every process the command started outside its process group `pgid` (which
    the caller signals as a group): a process that made a group of its own (agents run their tools
    so: opencode's shell commands) must be told to stop with the rest, not work on through the
    grace. The cgroup's members, else the tracked tree, the marker's holders and their
    descendants (a reused pid is told apart by its start time). Returns the pids signalled."""
    if group is not None:
        members = set(_members(group))
    else:
        targets = {pid: began for pid, began in known.items() if start_of(pid) == began}
        if token is not None:
            targets.update(marked(token))
        for pid in list(targets):
            targets.update(descendants(pid))
        members = set(targets)
    sent = []
    for pid in sorted(members - {os.getpid()}):
        try:
            if os.getpgid(pid) == pgid:
                continue
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            continue
        sent.append(pid)
    return sent


def kill_tree(known: dict[int, float], token: str | None) -> list[tuple[int, str, int | None]]:
    """KILL every process of `known` still alive with the same start time, every holder of the
    marker, and their descendants, until a round finds none; (pid, name, pgid) of those killed."""
    killed: list[tuple[int, str, int | None]] = []
    # as long as a cgroup's: on a loaded machine a killed process can take a while to be gone
    deadline = time.monotonic() + CONFIRM_WITHIN
    while time.monotonic() < deadline:
        targets = {pid: began for pid, began in known.items() if start_of(pid) == began}
        if token is not None:
            targets.update(marked(token))
        for pid in list(targets):
            targets.update(descendants(pid))
        targets.pop(os.getpid(), None)
        living = describe(pid for pid in targets if alive(pid))
        if not living:
            return killed
        for member in living:
            try:
                os.kill(member[0], signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue
            if member[0] not in [pid for pid, _, _ in killed]:
                killed.append(member)
        known.update(targets)
        time.sleep(0.02)  # KILL lands asynchronously; look again once it has
    still = [pid for pid in known if alive(pid) and start_of(pid) == known[pid]]
    if still:
        raise ContainmentError(f"processes {still} are still alive after KILL")
    return killed


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


# -- the output pipes ------------------------------------------------------------------------------


def kill_pipe_holders(pipes: set[str]) -> list[str]:
    """KILL every other process holding one of `pipes` open; returns "pid name" of each.

    Holding the command's own output pipe proves the process came from the command."""
    killed: dict[int, str] = {}
    if not pipes:
        return []
    for _ in range(5):  # a killed daemon's own children may hold the pipe too
        holders = [pid for pid in _pids() if pid != os.getpid() and _holds(pid, pipes)]
        if not holders:
            break
        for pid in holders:
            try:
                name = psutil.Process(pid).name()
                os.kill(pid, signal.SIGKILL)
            except (psutil.Error, ProcessLookupError, PermissionError):
                continue
            killed.setdefault(pid, f"{pid} {name}")
        time.sleep(0.05)  # KILL is delivered asynchronously; look again once it has landed
    return list(killed.values())


def _pids() -> list[int]:
    try:
        return [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []


def _holds(pid: int, pipes: set[str]) -> bool:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") in pipes:
                return True
        except OSError:
            continue
    return False
