"""Who is using a directory: processes whose working directory or open files lie inside it.

A worktree someone still works in (an agent left running, the user's editor or shell, a container's
process seen from the host) is never removed under them; they are named instead.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import psutil


@dataclass(frozen=True)
class Occupant:
    pid: int
    name: str
    how: str  # "working directory" | "open file <path>"

    def describe(self) -> str:
        return f"{self.name} (pid {self.pid}, {self.how})"

    def to_json(self) -> dict:
        return {"pid": self.pid, "name": self.name, "how": self.how}


def _inside(path: str, base: str) -> bool:
    return path == base or path.startswith(base + os.sep)


def occupants(directory: os.PathLike | str) -> list[Occupant]:
    """Every process (that this user may inspect) with its cwd or an open file inside `directory`."""
    base = os.path.realpath(directory)
    found: list[Occupant] = []
    me = os.getpid()
    for process in psutil.process_iter(["pid", "name"]):
        if process.pid == me:
            continue
        try:
            cwd = process.cwd()
            if cwd and _inside(os.path.realpath(cwd), base):
                found.append(Occupant(process.pid, process.info["name"] or "?", "working directory"))
                continue
            for handle in process.open_files():
                if _inside(os.path.realpath(handle.path), base):
                    found.append(Occupant(process.pid, process.info["name"] or "?", f"open file {handle.path}"))
                    break
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, FileNotFoundError):
            continue
    return found
