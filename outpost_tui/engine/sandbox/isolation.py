"""What a local candidate can reach: with bubblewrap, its own worktree, its own git repository
and a private /tmp (and what the race file and its agent's state add), nothing else writable;
`.outpost/`, the engine's state directory and the rivals' worktrees out of sight.

The rest of the machine is visible read-only (its programs, the user's files, the repository's
objects the candidate's git borrows), the network is the host's (an agent talks to its model), and
processes live in a pid namespace of their own: a candidate cannot signal a rival or the
coordinator. Without bubblewrap (not installed, or user namespaces refused) the local sandbox runs
as before, as the user, and every race says so (docs/threat-model.md).
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
from .base import SandboxError

BUBBLEWRAP = "bubblewrap"
UNISOLATED = "none"

UNISOLATED_WARNING = (
    "candidates run unisolated, as you: they can write your repository's refs and .git, .outpost/ "
    "and each other's worktrees ({why}); install bubblewrap (Debian/Ubuntu: apt install bubblewrap) "
    "or use a container sandbox"
)


@dataclass(frozen=True)
class Probe:
    """Whether bubblewrap works here: its program, or why not."""

    program: str | None
    why: str = ""


_probe_lock = threading.Lock()


@cache
def _probe_once(path: str | None) -> Probe:
    program = shutil.which("bwrap", path=path)
    if program is None:
        return Probe(None, "bwrap is not installed")
    trial = [program, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "true"]
    try:
        done = subprocess.run(trial, capture_output=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as error:
        return Probe(None, f"bwrap cannot run: {error}")
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        return Probe(None, f"bwrap cannot make a sandbox here: {said[-1] if said else done.returncode}")
    return Probe(program)


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

    repository: Path  # hidden under it: .outpost/ (the records, the rivals' worktrees)
    common: Path  # the repository's .git: read-only, its worktrees' git directories hidden
    directory: Path  # the worktree (or grading checkout): writable
    tmp: Path  # the host directory that is the command's /tmp
    private_git: Path | None = None  # the candidate's own repository, writable
    pointer: Path | None = None  # put over the worktree's .git: `gitdir:` the private repository
    writable: Sequence[str] = ()  # the race file's and the agent's own, writable when present
    git_dir: Path | None = None  # the worktree's own git directory (the brief's), read-only

    def wrap(self, program: str, argv: Sequence[str]) -> list[str]:
        """`argv` run by bubblewrap inside the fence."""
        launch = [program, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        launch += ["--unshare-pid", "--unshare-ipc", "--bind", str(self.tmp), "/tmp"]
        # what the command names under the host's /tmp (its program, a script it is given: a
        # sample race made by `mktemp -d`) stays visible, read-only, beside the private /tmp
        for path in _named_under_tmp(argv):
            launch += ["--ro-bind", path, path]
        for path in self.writable:
            launch += ["--bind-try", path, path]
        # after the extra paths: none of them may open the repository or the records again
        repository = str(self.repository)
        launch += ["--ro-bind", repository, repository]
        # the records, the rivals' worktrees and their git directories (their indexes, their own
        # repositories), the engine's key: out of sight
        hidden = [
            path
            for path in (
                os.path.join(repository, ".outpost"),
                os.path.join(self.common, "worktrees"),
                str(state_directory()),
            )
            if os.path.isdir(path)
        ]
        for path in hidden:
            launch += ["--tmpfs", path]
        directory = str(self.directory)
        launch += ["--bind", directory, directory]
        if self.git_dir is not None:
            launch += ["--ro-bind", str(self.git_dir), str(self.git_dir)]
        if self.private_git is not None and self.pointer is not None:
            launch += ["--bind", str(self.private_git), str(self.private_git)]
            launch += ["--ro-bind", str(self.pointer), os.path.join(directory, ".git")]
        # read-only once the binds inside them are made: a write there fails as it would on the
        # host's read-only repository, instead of landing in an empty tmpfs nobody reads
        for path in hidden:
            launch += ["--remount-ro", path]
        launch += ["--chdir", directory, "--", *argv]
        return launch


def _named_under_tmp(argv: Sequence[str]) -> list[str]:
    named = []
    for argument in argv:
        if argument.startswith("/tmp/") and ".." not in argument.split("/") and os.path.exists(argument):
            named.append(os.path.normpath(argument))
    return named
