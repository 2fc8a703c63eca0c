"""Removing a candidate worktree, loss-proof: archived, verified, renamed aside, checked, deleted.

Separate from `archive` because removing is the one step here that deletes bytes, and its guards
are its own: a worktree is removed only after its archive is verified against the disk, and never
while a process runs in it. Removal renames the directory aside in one step before deleting it, so
an interruption at any point leaves either the worktree or a verified archive (usually both); what
was written into it between the check and the rename keeps the directory whole, aside, and says so.
"""

from __future__ import annotations

import os
import shutil
import stat
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import git
from . import archive
from .archive import (
    Archive,
    ArchiveError,
    Attempt,
    Entry,
    content,
    disk_usage,
    git_mode,
    is_ignored,
    object_format,
    tree_entries,
    walk,
)
from .processes import Occupant, occupants

REMOVING = "removing"  # .outpost/recovery/removing-*: directories renamed aside on their way out
CHANGED = "changed"  # .outpost/recovery/changed-*: written to after their check; never deleted by us


@dataclass
@dataclass
class Removal:
    directory: str
    archive: Archive
    freed_bytes: int
    occupants: list[Occupant] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "directory": self.directory,
            "archive": self.archive.to_json(),
            "freed_bytes": self.freed_bytes,
        }


class Occupied(ArchiveError):
    """A process runs in the worktree: it is not removed."""

    def __init__(self, directory: Path, found: list[Occupant]) -> None:
        named = "; ".join(o.describe() for o in found[:3]) + (
            f"; and {len(found) - 3} more" if len(found) > 3 else ""
        )
        super().__init__(f"{directory} is in use by {named}: not removed")
        self.occupants = found


def archive_and_remove(
    root: Path | str, directory: Path | str, attempt: Attempt, *, include_ignored: bool = False
) -> Removal:
    """Archive the worktree, verify the archive, then remove the worktree (the branch stays)."""
    root, top = Path(root), Path(directory).absolute()
    if not git.is_inside(top, git.workspaces_directory(root)):
        raise ArchiveError(f"{top} is not a worktree under {git.workspaces_directory(root)}: not removed")
    found = occupants(top)
    if found:
        raise Occupied(top, found)
    archived = archive.archive(root, top, attempt, include_ignored=include_ignored)
    found = occupants(top)  # one may have started while archiving
    if found:
        raise Occupied(top, found)
    left_out = archive.verify(root, top, archived)
    git_dir = _worktree_git_dir(top)
    freed = disk_usage(top) + (disk_usage(git_dir) if git_dir else 0)
    aside = root / git.OUTPOST_DIR / git.RECOVERY / f"{REMOVING}-{top.name}-{uuid.uuid4().hex[:8]}"
    aside.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    # One rename: from here the worktree is gone for git, and the bytes still on disk until deleted.
    with git.worktree_lock(root).exclusive():
        os.rename(top, aside)
        git.output("git worktree prune", root, "worktree", "prune")
    # Whatever wrote into the worktree between the check and the rename is caught here, before a
    # byte is deleted: the directory then stays aside, whole, and the error says where.
    changed = _written_since(root, aside, archived, left_out)
    if changed is not None:
        # out of the removing-* names, which a later prune deletes as finished business
        kept = aside.with_name(f"{CHANGED}-{top.name}-{uuid.uuid4().hex[:8]}")
        os.rename(aside, kept)
        raise ArchiveError(
            f"{changed} changed while {top} was being removed: nothing was deleted, the "
            f"directory is kept whole at {kept} (its archive {archived.commit[:12]} "
            "holds what was checked)"
        )
    shutil.rmtree(aside)
    return Removal(str(top), archived, freed)


def _written_since(root: Path, aside: Path, archived: Archive, left_out: set[str]) -> str | None:
    """The first file under `aside` that the archive does not hold as it is, or None."""
    tree = tree_entries(root, archived.commit)
    algorithm = object_format(root)
    for current, prefix, _dirs, files in walk(aside):
        for name in files:
            path = prefix + name
            if is_ignored(path, {p + "/" for p in left_out} | left_out):
                continue
            info = os.lstat(os.path.join(current, name))
            kind = "link" if stat.S_ISLNK(info.st_mode) else "file"
            entry = Entry(path, kind, info.st_mode, 0)
            expected = tree.get(path)
            if (
                expected is None
                or not (stat.S_ISLNK(info.st_mode) or stat.S_ISREG(info.st_mode))
                or expected != (git_mode(entry), git.blob_id(content(aside, entry), algorithm))
            ):
                return path
    return None


def _worktree_git_dir(top: Path) -> Path | None:
    try:
        text = (top / ".git").read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return (top / text.removeprefix("gitdir:").strip()).resolve() if text.startswith("gitdir:") else None


def leftovers(root: Path | str) -> list[Path]:
    """Directories a removal renamed aside and did not finish deleting (interrupted)."""
    recovery = Path(root) / git.OUTPOST_DIR / git.RECOVERY
    try:
        return sorted(p for p in recovery.iterdir() if p.name.startswith(REMOVING + "-") and p.is_dir())
    except FileNotFoundError:
        return []
