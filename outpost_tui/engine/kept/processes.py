"""Who is using a directory: processes whose working directory or open files lie inside it.

A worktree someone still works in (an agent left running, the user's editor or shell, a container's
process seen from the host) is never removed under them; they are named instead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import psutil

from ..paths import real_path


@dataclass(frozen=True)
class Occupant:
    pid: int
    name: str
    how: str  # "working directory" | "open file <path>"

    def describe(self) -> str:
        return f"{self.name} (pid {self.pid}, {self.how})"

    def to_json(self) -> dict[str, Any]:
        return {"pid": self.pid, "name": self.name, "how": self.how}


def _inside(path: str, base: str) -> bool:
    return path == base or path.startswith(base + os.sep)


def occupants(directory: os.PathLike[str] | str) -> list[Occupant]:
    """Every process (that this user may inspect) with its cwd or an open file inside `directory`."""
    return occupants_of([directory])[os.fspath(directory)]


def occupants_of(directories: list[os.PathLike[str] | str]) -> dict[str, list[Occupant]]:
    """`occupants` of several directories with one pass over the processes (keyed as given)."""
    bases = {os.fspath(d): real_path(d) for d in directories}
    found: dict[str, list[Occupant]] = {key: [] for key in bases}
    if not bases:
        return found
    me = os.getpid()
    for process in psutil.process_iter(["pid", "name"]):
        if process.pid == me:
            continue
        try:
            name = process.info["name"] or "?"
            cwd = real_path(process.cwd() or "/")
            hit = {key for key, base in bases.items() if _inside(cwd, base)}
            for key in hit:
                found[key].append(Occupant(process.pid, name, "working directory"))
            if len(hit) == len(bases):
                continue
            for handle in process.open_files():
                path = real_path(handle.path)
                for key, base in bases.items():
                    if key not in hit and _inside(path, base):
                        hit.add(key)
                        found[key].append(Occupant(process.pid, name, f"open file {handle.path}"))
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, FileNotFoundError):
            continue
    return found
