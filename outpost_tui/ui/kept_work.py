"""The review screen's (f3) engine calls, each run in one of its thread workers: listing what races
kept, an attempt's whole work as a diff, two attempts compared, a merge, an archive, a restore, a
prune, a branch deletion. Each returns what the screen shows or says; an expected failure (git
refused, a file could not be read) comes back as its message, beside what was done before it.

Everything that removes anything goes through the engine (engine/kept/: archive, removal, cleanup),
which keeps the work reachable first and refuses while a process uses the worktree.
"""

from __future__ import annotations

from pathlib import Path

from ..engine import git
from ..engine.kept import archive, cleanup
from ..engine.kept.comparison import touched, work_diff
from ..engine.kept.removal import archive_and_remove
from ..engine.kept.restore import restore
from ..engine.kept.retained import RetainedAttempt, RetainedRace, human_bytes, retained, whole_work
from ..engine.sandbox import SandboxError
from ..engine.sandbox.container_engine import list_containers

# What a change says it did, and the error that stopped it or part of it ("" when none).
Said = tuple[str, str]


def relative(root: Path | None, path: str | None) -> str:
    """A path inside the repository as relative to its root; "—" for none."""
    if not path:
        return "—"
    if root is not None:
        try:
            return str(Path(path).relative_to(root))
        except ValueError:
            pass
    return path


def list_kept(repository: Path, now: float) -> tuple[Path | None, list[RetainedRace], str, str]:
    """The repository's root, what its races kept, the error that kept them from being listed, and
    a note when the containers could not be (their attempts are listed without them)."""
    try:
        root = git.repository_root(repository)
    except git.GitError as error:
        return None, [], str(error), ""
    note = ""
    try:
        containers = list_containers(repository=str(root))
    except SandboxError as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else "unreachable"
        containers, note = [], f"Containers not listed: {first}"
    try:
        races = retained(root, now=now, containers=containers)
    except git.GitError as error:
        return root, [], str(error), note
    return root, races, "", note


def whole_work_diff(root: Path, row: RetainedAttempt) -> tuple[str, str]:
    """A title and the patch of the attempt's whole work (committed, uncommitted and untracked)
    against its baseline; raises git.GitError or OSError."""
    assert row.baseline is not None, "only an attempt with a baseline has a diff"
    patch = work_diff(root, row.baseline, whole_work(root, row))
    where = "worktree as it is" if row.present else "archive" if row.archive else "branch"
    return f"{row.id}: whole work ({where}) against baseline {row.baseline[:12]}", patch


def comparison(root: Path, left: RetainedAttempt, right: RetainedAttempt) -> tuple[str, str, str]:
    """A title, the patch from one's whole work to the other's, and which files only one of them
    (or both) touched; raises git.GitError or OSError."""
    trees = whole_work(root, left), whole_work(root, right)
    mine = set(touched(root, left.baseline, trees[0])) if left.baseline else set()
    theirs = set(touched(root, right.baseline, trees[1])) if right.baseline else set()
    patch = work_diff(root, *trees)

    def listed(paths: set[str]) -> str:
        return (
            ", ".join(sorted(paths)[:8]) + (f" and {len(paths) - 8} more" if len(paths) > 8 else "") or "none"
        )

    summary = (
        f"only {left.key}#{left.attempt}: {listed(mine - theirs)}\n"
        f"only {right.key}#{right.attempt}: {listed(theirs - mine)}\n"
        f"both: {listed(mine & theirs)}"
    )
    return f"{left.id} → {right.id}: the difference between their results", patch, summary


def merge_check(root: Path, row: RetainedAttempt) -> tuple[git.Integration, str]:
    """A fresh integration check of the attempt into the current branch, and that branch's name."""
    check = git.integration_check(root, row.branch, row.head)
    host = git.host_snapshot(root).branch if check.status != "blocked" else ""
    return check, host


def integrate(root: Path, row: RetainedAttempt, how: str) -> git.MergeOutcome:
    """Merge the attempt, or cherry-pick its own commits, into the current branch."""
    if how == git.MERGE:
        return git.merge_candidate(
            root, row.branch, expected_commit=row.head, message=f"Merge outpost candidate {row.id}"
        )
    assert row.baseline is not None, "a cherry-pick without a baseline is refused before it is asked"
    return git.cherry_pick_candidate(root, row.branch, row.baseline, expected_commit=row.head)


def archive_worktree(root: Path, row: RetainedAttempt, include_ignored: bool) -> Said:
    assert row.path is not None, "only a present worktree is archived"
    try:
        removal = archive_and_remove(
            root,
            row.path,
            archive.Attempt(row.race_id, row.key, row.attempt),
            include_ignored=include_ignored,
        )
    except (git.GitError, OSError) as error:
        return "", str(error)
    return (
        f"archived {row.id} at {removal.archive.commit[:12]} and removed its worktree; "
        f"{human_bytes(removal.freed_bytes)} freed",
        "",
    )


def restore_worktree(root: Path, row: RetainedAttempt) -> Said:
    try:
        target = restore(root, archive.Attempt(row.race_id, row.key, row.attempt))
    except (git.GitError, OSError) as error:
        return "", str(error)
    return f"restored {row.id} into {relative(root, str(target))}", ""


def prune(root: Path, steps: list[cleanup.PruneStep]) -> Said:
    report = cleanup.prune(root, steps)
    said = f"pruned {len(report.removed)} worktree(s), freed {human_bytes(report.freed_bytes)}"
    return said, "; ".join(f"kept {ident}: {why}" for ident, why in report.failed)


def delete_branches(
    root: Path, race_id: str, checks: list[cleanup.BranchCheck], unmerged: list[cleanup.BranchCheck]
) -> Said:
    """Delete the deletable `checks`' branches; archive the `unmerged` ones first, then delete them
    too once a fresh check finds their commits reachable from their archives."""
    deleted, errors = 0, []
    if unmerged:
        try:
            for check in unmerged:
                cleanup.archive_branch(root, check.branch)
            # checked again: now their commits are reachable from their archives
            again = {c.branch: c for c in cleanup.check_branches(root, race_id)}
        except git.GitError as error:
            return "", str(error)
        checks = checks + [again[c.branch] for c in unmerged if c.branch in again]
    for check in checks:
        try:
            cleanup.delete_branch(root, check)
            deleted += 1
        except git.GitError as error:
            errors.append(str(error))
    return f"deleted {deleted} branch(es)", "; ".join(errors)
