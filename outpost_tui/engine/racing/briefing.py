"""What an agent finds when it starts, beside its worktree's files: the brief, in the worktree's
own git directory, and the files its adapter writes for it (removed once it is done)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from .. import git


def write_brief(directory: Path, brief: str) -> Path:
    """The brief in the worktree's own git directory: outside its tree, mounted in a container,
    and removed with the worktree."""
    path = git.worktree_git_dir(directory) / "outpost-brief.md"
    path.write_text(brief, "utf-8")
    return path


def write_agent_files(files: Mapping[str, str]) -> None:
    for name, text in files.items():
        path = Path(name)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)


def remove_agent_files(files: Iterable[str]) -> None:
    for name in files:
        Path(name).unlink(missing_ok=True)
