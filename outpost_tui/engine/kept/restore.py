"""Restoring an archived attempt: its worktree recreated from its branch plus its archive, byte for byte.

Separate from `archive` because it is the way back, run by the operator long after the race: it
creates a worktree (never over an existing path, only under the repository's workspaces) and writes
every file from the archive's own objects, with the permissions and empty directories its manifest
recorded.
"""

from __future__ import annotations

import os
from pathlib import Path

from .. import git
from . import archive
from .archive import ArchiveError, Attempt, archived_commit, manifest_of, plumbing, tree_entries


def restore(root: Path | str, attempt: Attempt, directory: Path | str | None = None) -> Path:
    """Recreate the attempt's worktree from its archive: HEAD as archived, every file byte for byte.

    The branch is checked out when it still points where the archive says; otherwise (moved or
    deleted) the worktree gets a detached HEAD at the archived commit and the branch is left alone."""
    root = Path(root)
    commit = archived_commit(root, attempt)
    if commit is None:
        raise ArchiveError(f"no archive of {attempt.label} ({attempt.ref} does not exist)")
    manifest = manifest_of(root, commit)
    head = manifest["head"]
    # a branch-only archive names no directory: the attempt's usual place
    target = Path(
        directory or manifest.get("directory") or git.worktree_directory(root, attempt.key, attempt.branch)
    ).absolute()
    if os.path.lexists(target):
        raise ArchiveError(f"{target} already exists: not restored over it")
    if not git.is_inside(target, git.workspaces_directory(root)):
        raise ArchiveError(f"{target} is not under {git.workspaces_directory(root)}: not restored there")
    git.output("git worktree prune", root, "worktree", "prune")
    branch_tip = git.branch_tip(root, f"refs/heads/{attempt.branch}")
    checkout = [attempt.branch] if branch_tip == head else ["--detach", head]
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with git.worktree_lock(root).exclusive():
        git.output(
            f"creating worktree {target}",
            root,
            "worktree",
            "add",
            "--quiet",
            "--no-checkout",
            str(target),
            *checkout,
        )
    # The index follows HEAD (as a fresh checkout's would); the files come from the archive itself.
    git.output("reading HEAD into the index", target, "read-tree", head)
    tree = tree_entries(root, commit)
    blobs = _read_blobs(root, [oid for _, oid in tree.values()])
    modes = {path: int(value, 8) for path, value in manifest.get("modes", {}).items()}
    for path, (mode, oid) in sorted(tree.items()):
        full = target / path
        full.parent.mkdir(parents=True, exist_ok=True)
        if mode == "120000":
            os.symlink(os.fsdecode(blobs[oid]), full)
            continue
        with open(full, "wb") as handle:
            handle.write(blobs[oid])
        os.chmod(full, modes.get(path, (0o777 if mode == "100755" else 0o666) & ~archive.current_umask()))
    for path in manifest.get("empty_dirs", []):
        (target / path).mkdir(parents=True, exist_ok=True)
    return target


def _read_blobs(root: Path, oids: list[str]) -> dict[str, bytes]:
    unique = list(dict.fromkeys(oids))
    if not unique:
        return {}
    out = plumbing(root, "cat-file", "--batch", input="".join(f"{o}\n" for o in unique).encode())
    blobs, position = {}, 0
    for oid in unique:
        end = out.index(b"\n", position)
        header = out[position:end].decode().split()
        size = int(header[2])
        blobs[oid] = out[end + 1 : end + 1 + size]
        position = end + 1 + size + 1
    return blobs
