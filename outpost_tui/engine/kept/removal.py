"""Removing a candidate worktree, loss-proof: archived, verified, renamed aside, checked, deleted.

Separate from `archive` because removing is the one step here that deletes bytes, and its guards
are its own: a worktree is removed only after its archive is verified against the disk, and never
while a process runs in it. Removal renames the directory aside in one step before deleting it, so
an interruption at any point leaves either the worktree or a verified archive (usually both); what
was written into it between the check and the rename, a repository that appeared in it, or its archive
ref deleted or moved, puts the directory back whole, and says so. A worktree reached through a
symbolic link is never followed: the link's target is someone else's.
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
from ..paths import real_path
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
    workspaces = git.workspaces_directory(root)
    if not git.is_inside(top, workspaces):
        raise ArchiveError(f"{top} is not a worktree under {workspaces}: not removed")
    link = _link_on_the_way(top, workspaces)
    if link is not None:
        # A candidate that swapped its directory for a link (to a rival's worktree, to the user's
        # files) would have the rival's bytes archived under its name and the link's target removed.
        raise ArchiveError(
            f"{link} is a symbolic link (to {os.readlink(link)}), not the worktree's own directory: "
            f"{top} not followed, not removed"
        )
    found = occupants(top)
    if found:
        raise Occupied(top, found)
    archived = archive.archive(root, top, attempt, include_ignored=include_ignored)
    found = occupants(top)  # one may have started while archiving
    if found:
        raise Occupied(top, found)
    left_out = archive.verify(root, top, archived)
    git_dir = _worktree_git_dir(top)
    view = git.candidate_view(top) if top.parent == workspaces.absolute() else None
    freed = disk_usage(top) + sum(disk_usage(path) for path in (git_dir, view) if path and path.is_dir())
    aside = root / git.OUTPOST_DIR / git.RECOVERY / f"{REMOVING}-{top.name}-{uuid.uuid4().hex[:8]}"
    aside.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with git.worktree_lock(root).exclusive():
        # the archive ref is what holds the work once the directory goes: looked at once more
        if not _still_archived(root, archived):
            raise ArchiveError(
                f"{archived.ref} no longer points at the archive {archived.commit[:12]} (deleted or "
                f"moved since it was verified): {top} not removed"
            )
        # One rename: from here the worktree's bytes are out of everyone's way, still on disk.
        os.rename(top, aside)
    # Whatever wrote into the worktree between the check and the rename, or moved its archive ref,
    # is caught here, before a byte is deleted: the directory then goes back, whole.
    changed = _written_since(root, aside, archived, left_out)
    if changed is not None:
        raise ArchiveError(_put_back(root, top, aside, f"{changed} changed while {top} was being removed"))
    if not _still_archived(root, archived):
        raise ArchiveError(
            _put_back(root, top, aside, f"{archived.ref} was deleted or moved while {top} was being removed")
        )
    with git.worktree_lock(root).exclusive():
        git.output("git worktree prune", root, "worktree", "prune")
    shutil.rmtree(aside)
    # the private repository a fenced candidate committed in: its result is on its branch, its
    # files in the archive; branches it made only for itself go with it
    git.remove_view(top)
    return Removal(str(top), archived, freed)


def _link_on_the_way(top: Path, workspaces: Path) -> Path | None:
    """The first symbolic link from the worktree up to the workspaces directory, or None."""
    base = real_path(workspaces)
    for path in (top, *top.parents):
        if real_path(path) == base:
            return None
        if os.path.islink(path):
            return path
    return top  # never met the workspaces directory by name: reached through a link


def _still_archived(root: Path, archived: Archive) -> bool:
    return archive.archived_commit(root, archived.attempt) == archived.commit


def _put_back(root: Path, top: Path, aside: Path, why: str) -> str:
    """Move a directory on its way out back where it was; the error line saying where it is."""
    # git's record of the worktree was kept (no prune yet): back in place, it is whole again
    with git.worktree_lock(root).exclusive():
        if not os.path.lexists(top):
            os.rename(aside, top)
            return f"{why}: nothing was deleted, the worktree is back at {top}"
    # out of the removing-* names, which a later prune deletes as finished business
    kept = aside.with_name(f"{CHANGED}-{top.name}-{uuid.uuid4().hex[:8]}")
    os.rename(aside, kept)
    return f"{why}: nothing was deleted, the directory is kept whole at {kept} ({top} was taken meanwhile)"


def _written_since(root: Path, aside: Path, archived: Archive, left_out: set[str]) -> str | None:
    """The first file under `aside` that the archive does not hold as it is, or None."""
    tree = tree_entries(root, archived.commit)
    algorithm = object_format(root)
    for current, prefix, dirs, files in walk(aside):
        if prefix and (".git" in dirs or ".git" in files):
            return prefix + ".git"  # a repository appeared, perhaps under an ignored directory
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
    """Directories a removal renamed aside and did not finish deleting (interrupted), and views
    whose checkout is gone (removed by hand, or moved away by a candidate): a private repository
    with nothing to bring in any more."""
    outpost = Path(root) / git.OUTPOST_DIR
    workspaces = git.workspaces_directory(root)
    found = []
    for directory, belongs in (
        (outpost / git.RECOVERY, lambda p: p.name.startswith(REMOVING + "-")),
        (outpost / git.REPOSITORIES, lambda p: not os.path.lexists(workspaces / p.name)),
    ):
        try:
            # a link there is nothing the engine made: never followed (its target is someone's files)
            found += [p for p in directory.iterdir() if belongs(p) and p.is_dir() and not p.is_symlink()]
        except FileNotFoundError:
            continue
    return sorted(found)
