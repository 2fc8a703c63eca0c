"""Loss-proof cleanup: prune the worktrees races kept, delete a race's branches.

Prune archives and removes (removal.archive_and_remove) every worktree of a finished race, or of
any race older than a given age, and keeps, saying why, one that is in use, locked, tampered with or
whose race may still run. It stops between worktrees when asked, never inside one: an interrupted
removal leaves the worktree or its verified archive, and a directory renamed aside on its way out is
deleted by the next prune.

A branch is deleted only when every commit on it is reachable from another ref (a branch, a tag, an
archive) or its changes are already on the user's branches by patch-id: as the same commits
(cherry-picked, rebased) or as one squashed change. Anything else is refused, naming the commits,
until it is archived.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import git
from ..errors import OutpostError
from . import archive
from .removal import Removal, archive_and_remove, leftovers
from .retained import RetainedAttempt, RetainedRace

DAY = 86400.0
REMOVE = "remove"
KEEP = "keep"


# --- prune ---------------------------------------------------------------------------------------


@dataclass
class PruneStep:
    attempt: RetainedAttempt
    action: str  # "remove" | "keep"
    why: str

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.attempt.id,
            "path": self.attempt.path,
            "action": self.action,
            "why": self.why,
            "size_bytes": self.attempt.size_bytes,
        }


@dataclass
class PruneReport:
    removed: list[Removal] = field(default_factory=list)
    kept: list[tuple[str, str]] = field(default_factory=list)  # (id, why)
    failed: list[tuple[str, str]] = field(default_factory=list)  # refused while archiving: (id, why)
    freed_bytes: int = 0
    leftovers_freed: int = 0
    stopped: bool = False

    def to_json(self) -> dict[str, Any]:
        return {
            "removed": [r.to_json() for r in self.removed],
            "kept": [{"id": ident, "why": why} for ident, why in self.kept],
            "failed": [{"id": ident, "why": why} for ident, why in self.failed],
            "freed_bytes": self.freed_bytes,
            "leftovers_freed_bytes": self.leftovers_freed,
            "stopped": self.stopped,
        }


def plan_prune(races: list[RetainedRace], *, older_than_days: float | None = None) -> list[PruneStep]:
    """What prune would do with each kept worktree, and why."""
    if older_than_days is not None and not (math.isfinite(older_than_days) and older_than_days >= 0):
        # nan is never reached by any age and inf by none: either would quietly prune nothing
        raise OutpostError(f"older than {older_than_days!r} days: a finite number, 0 or more, is needed")
    steps = []
    for race in races:
        for row in race.attempts:
            if not row.present or row.path is None:
                continue
            old = older_than_days is not None and (row.age_seconds or 0) >= older_than_days * DAY
            if older_than_days is not None and not old:
                why = f"younger than {older_than_days:g} days"
            elif not race.finished and not old:
                why = "its race has not finished (it may be resumed)"
            elif row.occupants:
                why = "in use by " + "; ".join(o.describe() for o in row.occupants[:3])
            elif row.container and str(row.container.get("status")) in ("running", "paused", "restarting"):
                why = f"its container {row.container.get('name')} is {row.container.get('status')}"
            elif os.path.islink(row.path):
                why = f"it is a symbolic link to {os.readlink(row.path)}: not followed, remove it by hand"
            elif row.link_changed:
                why = "its git link was changed: not inspected, remove it by hand after a look"
            elif row.locked:
                why = "locked (git worktree unlock it first)"
            elif row.problem:
                why = f"not inspected: {row.problem}"
            else:
                steps.append(
                    PruneStep(
                        row,
                        REMOVE,
                        "finished race" if race.finished else f"older than {older_than_days:g} days",
                    )
                )
                continue
            steps.append(PruneStep(row, KEEP, why))
    return steps


def prune(
    root: Path | str,
    steps: list[PruneStep],
    *,
    include_ignored: bool = False,
    should_stop: Callable[[], bool] = lambda: False,
    on_step: Callable[[str, PruneStep, str], None] = lambda phase, step, text: None,
) -> PruneReport:
    """Carry out `steps`; `on_step(phase, step, text)` hears "start", "removed" and "kept"."""
    root = Path(root)
    report = PruneReport()
    found = leftovers(root)
    for leftover in found:
        report.leftovers_freed += archive.disk_usage(leftover)
        shutil.rmtree(leftover)
    if found:
        # an interrupted removal may have renamed its worktree aside before git forgot it
        with git.worktree_lock(root).exclusive():
            git.output("git worktree prune", root, "worktree", "prune")
    report.freed_bytes += report.leftovers_freed
    for index, step in enumerate(steps):
        if step.action == KEEP:
            report.kept.append((step.attempt.id, step.why))
            on_step("kept", step, step.why)
            continue
        if should_stop():
            report.stopped = True
            for later in steps[index:]:
                if later.action == REMOVE:
                    report.kept.append((later.attempt.id, "prune was stopped before it"))
            break
        on_step("start", step, step.attempt.path or "")
        attempt = archive.Attempt(step.attempt.race_id, step.attempt.key, step.attempt.attempt)
        assert step.attempt.path is not None, "plan_prune plans only worktrees that are there"
        try:
            removal = archive_and_remove(root, step.attempt.path, attempt, include_ignored=include_ignored)
        except (git.GitError, OSError) as error:
            report.kept.append((step.attempt.id, str(error)))
            report.failed.append((step.attempt.id, str(error)))
            on_step("kept", step, str(error))
            continue
        report.removed.append(removal)
        report.freed_bytes += removal.freed_bytes
        on_step("removed", step, f"{removal.archive.ref} ({removal.freed_bytes} bytes freed)")
    return report


# --- branches ------------------------------------------------------------------------------------


@dataclass
class BranchCheck:
    branch: str
    commit: str
    deletable: bool
    why: str
    unmerged: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "branch": self.branch,
            "commit": self.commit,
            "deletable": self.deletable,
            "why": self.why,
            "unmerged": self.unmerged,
        }


def race_branches(root: Path | str, race_id: str) -> list[tuple[str, str]]:
    """(branch, commit) of every branch of the race."""
    if not git.RACE_ID_PATTERN.fullmatch(race_id) or ".." in race_id:
        raise OutpostError(f"invalid race id {race_id!r}")
    out = str(
        git.output(
            "listing branches",
            root,
            "for-each-ref",
            "--format=%(refname:short) %(objectname)",
            f"refs/heads/{git.BRANCH_PREFIX}/{race_id}/",
        )
    )
    return [
        (branch, commit) for branch, _, commit in (line.partition(" ") for line in out.splitlines() if line)
    ]


def check_branches(root: Path | str, race_id: str) -> list[BranchCheck]:
    """Which of the race's branches may be deleted without losing a commit, and why (not)."""
    root = Path(root)
    checked_out = {w["branch"]: w["path"] for w in git.list_worktrees(root) if not w["missing"]}
    checks = []
    for branch, commit in race_branches(root, race_id):
        if branch in checked_out:
            checks.append(
                BranchCheck(
                    branch,
                    commit,
                    False,
                    f"checked out in {checked_out[branch]} (archive and remove the worktree first)",
                )
            )
            continue
        checks.append(_check_branch(root, branch, commit))
    return checks


def _check_branch(root: Path, branch: str, commit: str) -> BranchCheck:
    # the verdict's pin of a graded commit (refs/outpost/validated/) is the engine's own keepsake,
    # not a place the operator would look for the work: it does not make a branch's work kept
    out = archive.plumbing(
        root,
        "rev-list",
        "--reverse",
        commit,
        "--not",
        f"--exclude=refs/heads/{branch}",
        f"--exclude={git.VALIDATED_REFS}/*",
        "--all",
    ).decode()
    unmerged = out.split()
    if not unmerged:
        return BranchCheck(
            branch, commit, True, "every commit is reachable from another branch, tag or archive"
        )
    base = archive.plumbing(root, "rev-parse", f"{unmerged[0]}^").decode().strip()
    theirs = _patch_ids(root, _user_history(root, base))
    whole = _patch_id(
        root,
        archive.plumbing(
            root,
            "diff",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "--full-index",
            "--binary",
            base,
            commit,
        ),
    )
    if whole and whole in theirs:
        return BranchCheck(branch, commit, True, f"its change is on {theirs[whole][:12]} (squash-merged)")
    mine = _patch_ids(
        root,
        archive.plumbing(
            root,
            "log",
            "-p",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            "--full-index",
            "--binary",
            "--no-walk=unsorted",
            *unmerged,
        ),
    )
    if mine and all(pid in theirs for pid in mine):
        return BranchCheck(
            branch, commit, True, "each of its commits is on your branches (cherry-picked or rebased)"
        )
    return BranchCheck(
        branch,
        commit,
        False,
        f"{len(unmerged)} commit(s) reachable from nothing else (first {unmerged[0][:12]}): archive it first",
        unmerged,
    )


def _user_history(root: Path, base: str) -> bytes:
    refs = str(
        git.output(
            "listing refs",
            root,
            "for-each-ref",
            "--format=%(refname)",
            "refs/heads/",
            "refs/tags/",
            "refs/remotes/",
        )
    ).split()
    refs = [r for r in refs if not r.startswith(f"refs/heads/{git.BRANCH_PREFIX}/")]
    if not refs:
        return b""
    return archive.plumbing(
        root,
        "log",
        "-p",
        "--no-merges",
        "--no-color",
        "--no-ext-diff",
        "--no-textconv",
        "--full-index",
        "--binary",
        "--stdin",
        "--not",
        base,
        input="".join(f"{r}\n" for r in refs).encode(),
    )


def _patch_ids(root: Path, patches: bytes) -> dict[str, str]:
    if not patches.strip():
        return {}
    out = archive.plumbing(root, "patch-id", "--stable", input=patches).decode()
    found: dict[str, str] = {}
    for line in out.splitlines():
        pid, _, oid = line.partition(" ")
        found.setdefault(pid, oid)
    return found


def _patch_id(root: Path, patch: bytes) -> str | None:
    if not patch.strip():
        return None
    # patch-id wants a commit header before a bare diff
    out = archive.plumbing(
        root, "patch-id", "--stable", input=b"commit " + b"0" * 40 + b"\n" + patch
    ).decode()
    return out.split()[0] if out.strip() else None


def archive_branch(root: Path | str, branch: str) -> str:
    """Keep a branch with no worktree reachable from its attempt's archive ref; the archive commit."""
    root = Path(root)
    attempt = archive.attempt_of(branch)
    if attempt is None:
        raise archive.ArchiveError(f"{branch} is not a race's branch: not archived")
    tip = str(
        git.output("reading the branch", root, "rev-parse", "--verify", f"refs/heads/{branch}^{{commit}}")
    )
    previous = archive.archived_commit(root, attempt)
    manifest: dict[str, Any] = {
        "directory": None,
        "head": tip,
        "modes": {},
        "empty_dirs": [],
        "ignored_included": False,
        "ignored_left_out": {"files": 0, "bytes": 0},
    }
    message = (
        f"outpost archive of {attempt.label} (branch only)\n\n"
        f"{archive.MANIFEST_MARKER}{json.dumps(manifest, sort_keys=True)}\n"
    )
    parents = ["-p", tip] + (["-p", previous] if previous else [])
    identity = ("-c", f"user.name={git.BOT_NAME}", "-c", f"user.email={git.BOT_EMAIL}")
    commit = (
        archive.plumbing(
            root,
            *identity,
            "commit-tree",
            "--no-gpg-sign",
            f"{tip}^{{tree}}",
            *parents,
            input=message.encode(),
        )
        .decode()
        .strip()
    )
    archive.plumbing(
        root,
        "update-ref",
        "-m",
        "outpost archive",
        attempt.ref,
        commit,
        previous or archive.ZERO_OID,
        check=f"writing {attempt.ref}",
    )
    return commit


def delete_branch(root: Path | str, check: BranchCheck) -> None:
    """Delete a branch `check_branches` allowed, only if it still points where it did (compare-and-swap)."""
    if not check.deletable:
        raise archive.ArchiveError(f"{check.branch} not deleted: {check.why}")
    archive.plumbing(
        Path(root),
        "update-ref",
        "-m",
        "outpost delete-branches",
        "-d",
        f"refs/heads/{check.branch}",
        check.commit,
        check=f"deleting {check.branch}",
    )
