"""What an agent finds when it starts, beside its worktree's files: the brief, in the worktree's
own git directory, and the files its adapter writes for it (removed once it is done)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from .. import git


@dataclass(frozen=True)
class GitPlace:
    """The worktree's own git directory as its agent sees it (`seen`: what it is told), and where
    the engine puts what the agent finds there (`kept`): the same directory, unless the agent is
    fenced, whose sandbox shows its private repository at that path."""

    seen: Path
    kept: Path

    @classmethod
    def of(cls, directory: Path, fenced: bool) -> GitPlace:
        seen = git.worktree_git_dir(directory)
        return cls(seen, git.candidate_view(directory) / seen.name if fenced else seen)

    def kept_path(self, path: str) -> Path:
        """Where the engine writes the file the agent finds at `path`."""
        relative = os.path.relpath(path, self.seen)
        inside = relative != os.pardir and not relative.startswith(os.pardir + os.sep)
        return self.kept / relative if inside else Path(path)


def write_brief(place: GitPlace, brief: str) -> Path:
    """The brief in the worktree's own git directory: outside its tree, mounted in a container,
    and removed with the worktree; the path the agent finds it at."""
    _write_new(place.kept / "outpost-brief.md", brief)
    return place.seen / "outpost-brief.md"


def write_agent_files(place: GitPlace, files: Mapping[str, str]) -> None:
    for name, text in files.items():
        _write_new(place.kept_path(name), text)


def _write_new(path: Path, text: str) -> None:
    """`text` in a file of its own at `path`: what is there is replaced, never written through (a
    link a candidate left there on an earlier run, to a file of the user's, stays untouched)."""
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)


def remove_agent_files(place: GitPlace, files: Iterable[str]) -> None:
    for name in files:
        place.kept_path(name).unlink(missing_ok=True)
