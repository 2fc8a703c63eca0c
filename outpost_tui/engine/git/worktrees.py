"""Candidate branches (`outpost/speculation/<race>/<key>/<attempt>`) and their worktrees under
`.outpost/workspaces/`: added under one lock per repository, checked before git runs in them,
listed, and removed only when nothing would be lost."""

from __future__ import annotations

import hashlib
import os
import re
import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..core.spec import KEY_RULE, valid_key
from ..paths import real_path
from .commits import is_clean
from .layout import (
    OUTPOST_DIR,
    RECOVERY,
    check_worktree_link,
    ensure_outpost_dir,
    is_inside,
    workspaces_directory,
)
from .runner import GitError, _failure, _revision, _run, _run_in_group, output

BRANCH_PREFIX = "outpost/speculation"


# A race id becomes one ref component and one path component: no slashes, no "..", no ".lock".
RACE_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


SPECULATION_BRANCH = re.compile(r"^outpost/speculation/([^/]+)/([^/]+)/([0-9]+)$")


class WorktreeLock:
    """Worktree commands of one repository: many at once (`shared`), or one alone (`exclusive`).

    Adds and removes of different worktrees run concurrently: a fresh attempt's allocation waits
    for no other. What deletes worktree metadata it finds incomplete (`git worktree prune`, and
    the rare repairs around it) runs alone, since an add in flight has such metadata for a moment.
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._shared = 0
        self._exclusive = False

    @contextmanager
    def shared(self) -> Iterator[None]:
        with self._changed:
            self._changed.wait_for(lambda: not self._exclusive)
            self._shared += 1
        try:
            yield
        finally:
            with self._changed:
                self._shared -= 1
                self._changed.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        with self._changed:
            self._changed.wait_for(lambda: not self._exclusive and not self._shared)
            self._exclusive = True
        try:
            yield
        finally:
            with self._changed:
                self._exclusive = False
                self._changed.notify_all()


_worktree_locks: dict[str, WorktreeLock] = {}


_worktree_locks_guard = threading.Lock()


def worktree_lock(repo_root: Path | str) -> WorktreeLock:
    """The repository's worktree lock: whoever adds, removes or prunes worktrees holds it."""
    key = real_path(repo_root)
    with _worktree_locks_guard:
        return _worktree_locks.setdefault(key, WorktreeLock())


def branch_name(race_id: str, key: str, attempt: int) -> str:
    if not valid_key(key):
        raise ValueError(f"invalid candidate key {key!r}: {KEY_RULE}")
    if not RACE_ID_PATTERN.fullmatch(race_id) or ".." in race_id or race_id.endswith((".", ".lock")):
        raise ValueError(f"invalid race id {race_id!r}: use letters, digits, '.', '_' or '-'")
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
        raise ValueError(f"invalid attempt {attempt!r}: attempts count from 1")
    return f"{BRANCH_PREFIX}/{race_id}/{key}/{attempt}"


def worktree_directory(repo_root: Path | str, key: str, branch: str) -> Path:
    if not valid_key(key):
        raise ValueError(f"invalid candidate key {key!r}: {KEY_RULE}")
    suffix = hashlib.sha256(branch.encode()).hexdigest()[:12]
    return workspaces_directory(repo_root) / f"{key}-{suffix}"


def _registered_worktrees(repo_root: Path | str) -> list[dict[str, Any]]:
    # Callers inside add_worktree already hold the repository's worktree lock.
    out = output("git worktree list", repo_root, "worktree", "list", "--porcelain")
    worktrees: list[dict[str, Any]] = []
    for line in str(out).splitlines():
        word, _, value = line.partition(" ")
        if word == "worktree":
            worktrees.append(
                {"path": value, "head": None, "branch": None, "locked": False, "prunable": False}
            )
        elif worktrees and word == "HEAD":
            worktrees[-1]["head"] = value
        elif worktrees and word == "branch":
            worktrees[-1]["branch"] = value.removeprefix("refs/heads/")
        elif worktrees and word in ("locked", "prunable"):
            worktrees[-1][word] = True
    return worktrees


def _same_path(left: Path | str, right: Path | str) -> bool:
    return real_path(left) == real_path(right)


def make_worktree_directory(repo_root: Path | str, directory: Path | str) -> bool:
    """Make the (empty) directory of an attempt's worktree ahead of `add_worktree`, so that a
    sandbox can mount it while git checks out; False (nothing made) when something is there."""
    target = Path(directory).absolute()
    if not is_inside(target, workspaces_directory(repo_root)):
        raise GitError(f"{target} is not under {workspaces_directory(repo_root)}")
    try:
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        target.mkdir()  # as git would make it
    except FileExistsError:
        return False
    except OSError as error:
        raise GitError(f"cannot create {target}: {error.strerror}") from error
    return True


def add_worktree(
    repo_root: Path | str,
    branch: str,
    directory: Path | str,
    baseline: str,
    on_start: Callable[[int], None] | None = None,
    *,
    made_empty: bool = False,
    resumed: bool = False,
) -> None:
    """Create `branch` at `baseline`, checked out in `directory`; reuse it when a replay finds it.

    `on_start` gets the process group id of each `git worktree add` (which runs the user's
    post-checkout hook) as soon as it exists. `made_empty`: `make_worktree_directory` made the
    directory (a sandbox may have it mounted already): while it is still empty, git checks out
    into it, and it is never taken for a replay's worktree or moved aside as a stray. `resumed`:
    the attempt's own checkpoint says it was allocated before (a replay), so a branch ahead of
    the baseline is its own work; otherwise such a branch is refused."""
    root = Path(repo_root)
    target = Path(directory).absolute()
    _revision(branch, "branch name")
    _revision(baseline, "baseline")
    ensure_outpost_dir(root)
    try:
        target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as error:
        raise GitError(f"cannot create {target.parent}: {error.strerror}") from error

    def present() -> bool:
        return os.path.lexists(target) and not (made_empty and _empty_directory(target))

    # The usual case, a fresh attempt, costs exactly one process, beside the others' allocations.
    first_error = ""
    if not present():
        with worktree_lock(root).shared():
            status, _, err = _run_in_group(
                root,
                "worktree",
                "add",
                "--quiet",
                "-b",
                branch,
                str(target),
                baseline,
                config=("branch.autoSetupMerge=false",),
                on_start=on_start,
            )
        if status == 0:
            return
        first_error = err
    with worktree_lock(root).exclusive():
        _add_worktree_again(root, branch, target, baseline, on_start, present, first_error, resumed)


def _add_worktree_again(
    root: Path,
    branch: str,
    target: Path,
    baseline: str,
    on_start: Callable[[int], None] | None,
    present: Callable[[], bool],
    first_error: str,
    resumed: bool,
) -> None:
    """A replay's worktree found, a stale record or a stray directory in the way, a branch that
    exists already: the rarer cases, alone among the repository's worktree commands."""
    registered = [w for w in _registered_worktrees(root) if _same_path(w["path"], target)]
    if registered:
        entry = registered[0]
        if entry["branch"] == branch and present() and os.path.isdir(target):
            return  # a durable replay: the attempt's worktree is already there
        if present():
            raise GitError(f"{target} is a worktree of {entry['branch'] or 'a detached HEAD'}, not {branch}")
        # Registered but its directory is gone (or is the empty one made for it): drop the stale
        # record so the path can be reused.
        output("git worktree prune", root, "worktree", "prune")
    if present():
        _move_aside(root, target)
    status, found, _ = _run(root, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}")
    args: tuple[str, ...]
    if status == 0:
        # An attempt starts at the baseline, never on a branch something else made or moved (a
        # planted "next candidate's" branch would hand it a result it never wrote): only one at
        # the baseline itself (an allocation a crash cut short) or a replay's own is taken; any
        # other stays as it is.
        if not resumed and str(found) != _baseline_commit(root, baseline):
            raise GitError(
                f"branch {branch} already exists at {str(found)[:12]}, not at the baseline "
                f"{baseline[:12]}: left untouched, and this attempt does not start on it"
            )
        args = ("worktree", "add", "--quiet", str(target), branch)
    else:
        args = ("worktree", "add", "--quiet", "-b", branch, str(target), baseline)
    status, _, err = _run_in_group(root, *args, config=("branch.autoSetupMerge=false",), on_start=on_start)
    if status != 0:
        raise _failure(f"creating worktree {target} for {branch}", root, err or first_error)


def _baseline_commit(root: Path, baseline: str) -> str:
    return str(output("reading the baseline", root, "rev-parse", "--verify", f"{baseline}^{{commit}}"))


def _move_aside(root: Path, target: Path) -> Path:
    recovery = root / OUTPOST_DIR / RECOVERY
    destination = recovery / f"orphan-{target.name}-{uuid.uuid4().hex[:8]}"
    try:
        recovery.mkdir(parents=True, exist_ok=True, mode=0o700)
        os.rename(target, destination)
    except OSError as error:
        raise GitError(
            f"cannot move stray directory {target} aside to {destination}: {error.strerror}"
        ) from error
    return destination


def worktree_git_dir(directory: Path | str) -> Path:
    """The worktree's own git directory (<common>/worktrees/<name>), checked to be the engine's:
    git removes it with the worktree."""
    check_worktree_link(directory)
    link = Path(directory).absolute() / ".git"
    named = link.read_text(encoding="utf-8").strip().removeprefix("gitdir:").strip()
    return Path(real_path(link.parent / named))


def remove_worktree(repo_root: Path | str, directory: Path | str) -> bool:
    """Remove a clean worktree under .outpost/workspaces; keep its branch. True when it is gone."""
    root = Path(repo_root)
    target = Path(directory).absolute()
    if not is_inside(target, workspaces_directory(root)):
        return False
    if not os.path.lexists(target):
        # Already gone (removed by hand): only git's record of it is left to clear.
        with worktree_lock(root).exclusive():
            output("git worktree prune", root, "worktree", "prune")
        return True
    if not is_clean(target):
        return False
    # Never --force: git re-checks cleanliness itself, which closes the gap since is_clean.
    with worktree_lock(root).shared():
        status, _, err = _run(root, "worktree", "remove", str(target))
    if status != 0:
        if os.path.lexists(target):
            return False
        raise _failure(f"removing worktree {target}", root, err)
    return True


def _empty_directory(path: Path) -> bool:
    try:
        if path.is_symlink() or not path.is_dir():
            return False
        with os.scandir(path) as entries:
            return not any(entries)
    except OSError:
        return False


def list_worktrees(repo_root: Path | str) -> list[dict[str, Any]]:
    """Worktrees under .outpost/workspaces, with what their branch names say about them."""
    workspaces = workspaces_directory(repo_root)
    listed = []
    for entry in _registered_worktrees(repo_root):
        if not is_inside(entry["path"], workspaces):
            continue
        present = os.path.isdir(entry["path"])
        branch = entry["branch"]
        match = SPECULATION_BRANCH.match(branch or "")
        clean, problem, link_changed = False, None, False
        if present:
            # One worktree an agent tampered with must not hide the others: it is listed, marked,
            # and git is never run in it (check_worktree_link refuses it).
            try:
                check_worktree_link(entry["path"])
            except GitError as error:
                problem, link_changed = str(error), True
            else:
                try:
                    clean = is_clean(entry["path"])
                except GitError as error:
                    problem = str(error)
        listed.append(
            {
                "path": entry["path"],
                "branch": branch,
                "head": entry["head"],
                "clean": clean,
                "missing": not present,
                "link_changed": link_changed,
                "problem": problem,
                "locked": entry["locked"],
                "race_id": match.group(1) if match else None,
                "key": match.group(2) if match else None,
                "attempt": int(match.group(3)) if match else None,
            }
        )
    return listed
