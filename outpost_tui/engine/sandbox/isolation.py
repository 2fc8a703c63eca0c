"""What a local candidate can reach: with bubblewrap, its own worktree, its own git repository
and a private /tmp (and what the race file and its agent's state add), nothing else writable;
`.outpost/`, the engine's state directory and the rivals' worktrees out of sight.

The rest of the machine is visible read-only (its programs, the user's files, the repository's
objects the candidate's git borrows), the network is the host's (an agent talks to its model), and
processes live in a pid namespace of their own, without capabilities (root's too) and without the
kernel's keyrings (syscalls.py): a candidate cannot signal a rival or the coordinator, nor undo its
fence. Without bubblewrap (not installed, or user namespaces refused) the local sandbox runs as
before, as the user, and every race says so (docs/threat-model.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from ..core.spec import Isolation
from ..statedir import state_directory
from . import syscalls
from .base import SandboxError

BUBBLEWRAP = "bubblewrap"
UNISOLATED = "none"

UNISOLATED_WARNING = (
    "candidates run unisolated, as you: they can write your repository's refs and .git, .outpost/ "
    "and each other's worktrees ({why}); install bubblewrap (Debian/Ubuntu: apt install bubblewrap) "
    "or use a container sandbox"
)


# The fence's frame: the machine read-only, its own /dev, a pid namespace of its own, and no
# capabilities. bubblewrap started by root keeps all of them unless told otherwise, and with them
# a candidate unmounts what hides .outpost/, remounts the repository writable and is root again
# (its no-new-privileges flag keeps a setuid program from giving them back). Without any, root
# may still write the kernel's settings under its new /proc (core_pattern names a program the
# kernel runs as root, outside every namespace): those are read-only, as a container has them.
_KERNEL_SETTINGS = ("/proc/sys", "/proc/sysrq-trigger", "/proc/fs", "/proc/irq", "/proc/bus")
_FRAME = (
    "--ro-bind",
    "/",
    "/",
    "--dev",
    "/dev",
    "--proc",
    "/proc",
    *(argument for path in _KERNEL_SETTINGS for argument in ("--ro-bind-try", path, path)),
    "--unshare-pid",
    "--cap-drop",
    "ALL",
)


@dataclass(frozen=True)
class Probe:
    """Whether bubblewrap works here: its program, or why not; and whether it loads the fence's
    system-call filter (syscalls.py), or why not."""

    program: str | None
    why: str = ""
    unfiltered: str = ""  # why fenced commands may use the kernel's keyrings ("" when they may not)

    @property
    def filtered(self) -> bool:
        return self.program is not None and not self.unfiltered


_probe_lock = threading.Lock()


@cache
def _probe_once(path: str | None) -> Probe:
    program = shutil.which("bwrap", path=path)
    if program is None:
        return Probe(None, "bwrap is not installed")
    if os.geteuid() == 0 and not _private_mounts():
        return Probe(None, "unshare (util-linux) is not installed: run as root, the fence needs it")
    # with the filter first: where it loads, one trial answers both questions
    filtered = _trial(program, with_filter=True)
    if not filtered:
        return Probe(program)
    unfiltered = _trial(program, with_filter=False)
    if unfiltered:
        return Probe(None, unfiltered)
    return Probe(program, unfiltered=filtered)


def _trial(program: str, *, with_filter: bool) -> str:
    """A trial sandbox running `true`: "" when it ran, else why not (one line)."""
    seccomp = syscalls.program_fd() if with_filter else None
    if with_filter and seccomp is None:
        return syscalls.unavailable()
    extra = [] if seccomp is None else ["--seccomp", str(seccomp)]
    what = "load a seccomp filter" if with_filter else "make a sandbox here"
    try:
        done = subprocess.run(
            [*launcher(program), *extra, "true"],
            capture_output=True,
            timeout=30,
            stdin=subprocess.DEVNULL,
            pass_fds=() if seccomp is None else (seccomp,),
        )
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"bwrap cannot run: {error}"
    finally:
        if seccomp is not None:
            os.close(seccomp)
    return "" if done.returncode == 0 else f"bwrap cannot {what}: {_last_line(done)}"


def _last_line(done: subprocess.CompletedProcess[bytes]) -> str:
    said = done.stderr.decode(errors="replace").strip().splitlines()
    return said[-1] if said else str(done.returncode)


@cache
def _private_mounts() -> tuple[str, ...]:
    """What bubblewrap is started through, run by root: a mount namespace of its own whose mounts
    receive nothing from the host's. Otherwise a mount the host makes during a race (a container
    starting, a disk plugged in) under a shared mount reaches the fence with its own flags, as
    writable as on the host; unprivileged, bubblewrap's user namespace cannot be made so."""
    if os.geteuid() != 0:
        return ()
    unshare = shutil.which("unshare", path=os.defpath)
    return (unshare, "--mount", "--propagation", "private") if unshare else ()


def launcher(program: str) -> list[str]:
    """The start of every fenced command: bubblewrap (`program`) with the fence's frame."""
    return [*_private_mounts(), program, *_FRAME]


def probe() -> Probe:
    """bubblewrap on this machine, tried once per process (a trial sandbox: about 5 ms)."""
    with _probe_lock:
        return _probe_once(os.environ.get("PATH"))


def choose(wanted: Isolation) -> tuple[str | None, str]:
    """(bwrap's path or None, the warning every race shows when candidates run unisolated)."""
    if wanted == UNISOLATED:
        return None, UNISOLATED_WARNING.format(why='[sandbox] isolation = "none"')
    found = probe()
    if found.program is not None:
        return found.program, ""
    if wanted == BUBBLEWRAP:
        raise SandboxError(f'[sandbox] isolation = "bubblewrap" but {found.why}')
    return None, UNISOLATED_WARNING.format(why=found.why)


# Paths every isolated candidate of this machine may write, colon-separated (a shared build
# cache, the directory a test suite's candidates signal each other through): the operator's, as
# [sandbox] writable is the race file's.
WRITABLE_VARIABLE = "OUTPOST_WRITABLE"


def operator_writable() -> tuple[str, ...]:
    return tuple(
        path
        for path in os.environ.get(WRITABLE_VARIABLE, "").split(":")
        if path.startswith("/") and ".." not in path.split("/")
    )


@dataclass(frozen=True)
class Fence:
    """What one command of an isolated sandbox can write and see."""

    repository: Path  # read-only; hidden under it: .outpost/ (the records, the rivals' worktrees)
    common: Path  # the repository's .git: read-only
    directory: Path  # the worktree (or grading checkout): writable
    tmp: Path  # the host directory that is the command's /tmp
    # shown as <common>/worktrees, writable: the checkout's private repository under its git
    # directory's name (engine/git/private.py); without one, the worktrees' git directories hidden
    view: Path | None = None
    writable: Sequence[str] = ()  # the race file's and the agent's own, writable when present

    def wrap(
        self, program: str, argv: Sequence[str], search: str = "", seccomp: int | None = None
    ) -> list[str]:
        """`argv` run by bubblewrap inside the fence; `search`: the PATH it runs with; `seccomp`:
        the file (inherited by bubblewrap) holding the system-call filter it loads."""
        launch = [*launcher(program), "--unshare-ipc", "--bind", str(self.tmp), "/tmp"]
        if seccomp is not None:
            launch += ["--seccomp", str(seccomp)]
        run = _hidden_run()
        if run is not None:
            launch += ["--tmpfs", run]
            resolver = _resolver_directory()
            if resolver is not None:
                launch += ["--ro-bind", resolver, resolver]
        # what the command is run with from under the host's /tmp (its program, a script it is
        # given: a sample race made by `mktemp -d`; a virtualenv on its PATH) stays visible,
        # read-only, beside the private /tmp
        for path in _named_under_tmp(argv, search):
            launch += ["--ro-bind", path, path]
        for path in self.writable:
            launch += ["--bind-try", path, path]
        # after the extra paths: none of them may open the repository or the records again
        repository = str(self.repository)
        launch += ["--ro-bind", repository, repository]
        # the records, the rivals' worktrees, their views and their git directories (their
        # indexes), the engine's key: out of sight
        worktrees = os.path.join(self.common, "worktrees")
        hidden = [os.path.join(repository, ".outpost"), str(state_directory())]
        if self.view is None:
            hidden.append(worktrees)
        hidden = [path for path in hidden if os.path.isdir(path)]
        for path in hidden:
            launch += ["--tmpfs", path]
        if self.view is not None:
            launch += ["--bind", str(self.view), worktrees]
        directory = str(self.directory)
        launch += ["--bind", directory, directory]
        link = os.path.join(directory, ".git")
        if os.path.isfile(link) and not os.path.islink(link):
            # the link git follows to its repository (the view's, there), as the engine made it:
            # one the candidate rewrote would only make the engine refuse its worktree
            launch += ["--ro-bind", link, link]
        # read-only once the binds inside them are made: a write there fails as it would on the
        # host's read-only repository, instead of landing in an empty tmpfs nobody reads
        for path in hidden if run is None else [*hidden, run]:
            launch += ["--remount-ro", path]
        launch += ["--chdir", directory, "--", *argv]
        return launch


# Daemons listen under /run, and a socket opens what no mount closes: a container engine's (a
# container that mounts / is the machine), the system bus and systemd's (a unit started outside
# every fence), the user's own under /run/user (session bus, rootless engines). A fenced command
# sees /run empty and read-only, but for the directory /etc/resolv.conf leads to there (name
# resolution, as with systemd-resolved). The paths the race asks for are bound after it.
@cache
def _hidden_run() -> str | None:
    run = os.path.realpath("/run")
    return run if os.path.isdir(run) else None


@cache
def _resolver_directory() -> str | None:
    run = _hidden_run()
    directory = os.path.dirname(os.path.realpath("/etc/resolv.conf"))
    if run is None or not directory.startswith(run + "/") or not os.path.isdir(directory):
        return None
    return directory


def _named_under_tmp(argv: Sequence[str], search: str) -> list[str]:
    named = [argument for argument in argv if argument.startswith("/tmp/")]
    for entry in search.split(os.pathsep):
        if entry.startswith("/tmp/"):
            # a virtualenv's bin: the whole environment (its interpreter finds its library there)
            parent = os.path.dirname(os.path.normpath(entry))
            named.append(parent if os.path.isfile(os.path.join(parent, "pyvenv.cfg")) else entry)
    found = []
    for path in named:
        if ".." not in path.split("/") and os.path.exists(path):
            found.append(os.path.normpath(path))
    return list(dict.fromkeys(found))
