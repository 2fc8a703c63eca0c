"""Grading checkouts: the engine's own checkout of exactly the commit being graded, apart from the
candidate's worktree, and the validated commit pinned under `refs/outpost/validated`."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from . import sessions
from .integration import _candidate
from .layout import check_worktree_link, is_inside, workspaces_directory
from .private import remove_view
from .runner import GitError, _revision, _run, output
from .worktrees import BRANCH_PREFIX, _empty_directory, branch_name, worktree_lock

GRADING_SUFFIX = ".grading"


VALIDATED_REFS = "refs/outpost/validated"


def grading_directory(repo_root: Path | str, name: str) -> Path:
    """Where a grading checkout lives; `name` is a candidate worktree's or the baseline's name."""
    return workspaces_directory(repo_root) / f"{name}{GRADING_SUFFIX}"


def add_grading_checkout(
    repo_root: Path | str, directory: Path | str, commit: str, *, made_empty: bool = False
) -> None:
    """A detached, clean checkout of `commit` at `directory` (replacing a stale one there).

    `made_empty`: the directory is an empty one `make_grading_directory` made for it (a sandbox
    may already have it mounted), which git checks out into rather than replacing."""
    root = Path(repo_root)
    target = Path(directory).absolute()
    _revision(commit, "commit")
    if not is_inside(target, workspaces_directory(root)) or not target.name.endswith(GRADING_SUFFIX):
        raise GitError(f"{target} is not a grading checkout of {root}")
    if os.path.lexists(target) and not (made_empty and _empty_directory(target)):
        _remove_grading(root, target)
    with worktree_lock(root).shared():
        output(
            f"creating the grading checkout {target}",
            root,
            "worktree",
            "add",
            "--quiet",
            "--detach",
            str(target),
            commit,
        )


def make_grading_directory(repo_root: Path | str, directory: Path | str) -> None:
    """An empty directory where a grading checkout will be (a stale one there is removed first),
    for a sandbox to mount before the commit to grade is known."""
    root = Path(repo_root)
    target = Path(directory).absolute()
    if not is_inside(target, workspaces_directory(root)) or not target.name.endswith(GRADING_SUFFIX):
        raise GitError(f"{target} is not a grading checkout of {root}")
    if os.path.lexists(target):
        _remove_grading(root, target)
    try:
        target.mkdir()  # as git would make it
    except OSError as error:
        raise GitError(f"cannot create {target}: {error.strerror}") from error


def reset_grading_checkout(directory: Path | str, commit: str) -> None:
    """Back to exactly `commit`: what a previous validation run changed or left is gone."""
    _revision(commit, "commit")
    check_worktree_link(directory)
    output("resetting the grading checkout", directory, "checkout", "--quiet", "--force", "--detach", commit)
    output("cleaning the grading checkout", directory, "clean", "-ffdxq")


def remove_grading_checkout(repo_root: Path | str, directory: Path | str) -> None:
    root = Path(repo_root)
    target = Path(directory).absolute()
    if not is_inside(target, workspaces_directory(root)) or not target.name.endswith(GRADING_SUFFIX):
        raise GitError(f"{target} is not a grading checkout of {root}")
    _remove_grading(root, target)


def _remove_grading(root: Path, target: Path) -> None:
    # its view (the private repository a fenced sandbox gave it) first: nothing of it is kept
    remove_view(target)
    # --force twice: validation leaves files behind, and a crashed grading may have left a lock
    with worktree_lock(root).shared():
        status, _, _err = _run(root, "worktree", "remove", "--force", "--force", str(target))
    if status == 0:
        return  # git removed its record with the checkout: nothing to prune
    with worktree_lock(root).exclusive():
        if os.path.lexists(target):
            if target.is_symlink() or not target.is_dir():
                target.unlink()
            else:
                import shutil

                shutil.rmtree(target)
        _run(root, "worktree", "prune")


def pin_validated(repo_root: Path | str, race_id: str, key: str, attempt: int, commit: str) -> str:
    """A ref that keeps the validated commit reachable whatever happens to the branch."""
    _revision(commit, "commit")
    ref = f"{VALIDATED_REFS}/{branch_name(race_id, key, attempt).removeprefix(BRANCH_PREFIX + '/')}"
    try:
        # the race's update-ref session: one process pins every attempt's commit
        sessions.update_ref(os.fspath(repo_root), ref, commit)
    except sessions.SessionFailed:
        output("pinning the validated commit", repo_root, "update-ref", ref, commit)
    return ref


def branch_tip(repo_root: Path | str, branch: str) -> str | None:
    return _candidate(Path(repo_root), branch)


def branch_tips(repo_root: Path | str, branches: Sequence[str]) -> dict[str, str]:
    """The commit each of `branches` (short names) points at, with one git process; a branch
    that does not exist is left out."""
    refs = {f"refs/heads/{branch}": branch for branch in branches if branch}
    if not refs:
        return {}
    for ref in refs:
        _revision(ref, "branch name")
    out = output("listing branches", repo_root, "for-each-ref", "--format=%(objectname) %(refname)", *refs)
    tips = {}
    for line in str(out).splitlines():
        oid, _, ref = line.partition(" ")
        if ref in refs:  # a pattern also matches refs below it: only the branch itself counts
            tips[refs[ref]] = oid
    return tips
