"""Whether a winner merges cleanly into the user's HEAD (`git merge-tree`, nothing touched), and
what a commit changed for review."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import sessions
from .host import HostSnapshot, host_snapshot
from .runner import GitError, _git_version, _revision, _run, error_line, output

MERGE_TREE_TIMEOUT = 30.0


MERGE_TREE_MAX_OUTPUT = 1024 * 1024


MERGE_TREE_MIN_VERSION = (2, 38)


_OBJECT_ID = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")


@dataclass(frozen=True)
class Integration:
    status: str  # "clean" | "conflict" | "blocked"
    conflicts: tuple[str, ...] = ()
    reason: str | None = None
    host_head: str | None = None
    candidate_commit: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "conflicts": list(self.conflicts),
            "reason": self.reason,
            "host_head": self.host_head,
            "candidate_commit": self.candidate_commit,
        }


def integration_check(
    repo_root: Path | str,
    branch: str,
    expected_commit: str | None = None,
    *,
    host: HostSnapshot | None = None,
) -> Integration:
    """Would merging `branch` into the host's current branch conflict? Touches no file and no index.

    Not a lock: the host can move right after; re-check immediately before a manual merge.
    `host`: a snapshot of the checkout taken just before, which saves taking another.
    """
    root = Path(repo_root)
    try:
        before = host or host_snapshot(root)
    except GitError as error:
        return Integration("blocked", reason=str(error))
    if before.dirty:
        return Integration("blocked", reason="Host has uncommitted changes", host_head=before.head)
    if before.branch == "HEAD":
        return Integration("blocked", reason="Host HEAD is detached", host_head=before.head)
    candidate = _candidate(root, branch)
    if candidate is None:
        return Integration("blocked", reason=f"Candidate branch not found: {branch}", host_head=before.head)
    blocked: dict[str, Any] = {"host_head": before.head, "candidate_commit": candidate}
    if expected_commit is not None and expected_commit != candidate:
        return Integration("blocked", reason="Candidate branch changed since validation", **blocked)
    status, out, err = _run(
        root,
        "merge-tree",
        "--write-tree",
        "--name-only",
        "-z",
        before.head,
        candidate,
        timeout=MERGE_TREE_TIMEOUT,
    )
    if status not in (0, 1):
        return Integration("blocked", reason=_merge_tree_failure(status, err), **blocked)
    if len(out) >= MERGE_TREE_MAX_OUTPUT:
        return Integration("blocked", reason="Git merge-tree preflight output exceeded 1 MiB", **blocked)
    conflicts = _conflicts(str(out)) if status == 1 else ()
    try:
        after = host_snapshot(root)
    except GitError as error:
        return Integration("blocked", reason=str(error), **blocked)
    # a commit id names its commit for good: only a branch can have moved meanwhile
    if after != before or (branch != candidate and _candidate(root, branch) != candidate):
        return Integration("blocked", reason="Repository changed during integration preflight", **blocked)
    return Integration("clean" if status == 0 else "conflict", conflicts=conflicts, **blocked)


def _candidate(root: Path, branch: str) -> str | None:
    if not branch or branch.startswith("-"):
        return None
    if _OBJECT_ID.fullmatch(branch):
        # a commit id (the validated commit): the race's cat-file session says it is one
        try:
            [(_, kind, _)] = sessions.read_objects(os.fspath(root), [branch])
        except sessions.SessionFailed:
            pass
        else:
            if kind == "commit":
                return branch
    status, out, _ = _run(root, "rev-parse", "--verify", "--quiet", f"{branch}^{{commit}}")
    return str(out) if status == 0 and out else None


def _merge_tree_failure(status: int, err: str) -> str:
    if err.startswith("Timeout:"):
        return f"Git merge-tree preflight timed out after {MERGE_TREE_TIMEOUT:g} s"
    version = _git_version()
    if version and version[:2] < MERGE_TREE_MIN_VERSION:
        shown = ".".join(str(n) for n in version)
        return f"Git merge-tree preflight needs git >= 2.38 (found {shown})"
    return f"Git merge-tree preflight failed: {error_line(err)}"


def _conflicts(out: str) -> tuple[str, ...]:
    # Layout: tree oid NUL, conflicted paths each NUL, an empty entry, then informational messages.
    names: list[str] = []
    for entry in out.split("\0")[1:]:
        if not entry:
            break
        if entry not in names:
            names.append(entry)
    return tuple(names)


@dataclass(frozen=True)
class Change:
    """One path a candidate's commits changed against the baseline (`git diff --raw`)."""

    status: str  # A added, M modified, D deleted, T type changed, R renamed, C copied
    path: str
    mode: str  # the new file mode: 120000 is a symlink, 100755 an executable
    target: str | None = None  # a symlink's target, read from its blob
    old_path: str | None = None  # where a renamed or copied file came from


def changes(repo_root: Path | str, baseline: str, commit: str) -> tuple[bool, list[Change]]:
    """Whether `commit` descends from `baseline`, and what changed between them (renames seen)."""
    _revision(baseline, "baseline")
    _revision(commit, "commit")
    descends = _run(repo_root, "merge-base", "--is-ancestor", baseline, commit)[0] == 0
    out = str(
        output(
            "git diff",
            repo_root,
            "diff",
            "--raw",
            "-z",
            "--no-abbrev",
            "-M",
            "--no-ext-diff",
            baseline,
            commit,
            "--",
            strip=False,
        )
    )
    fields = out.split("\0")
    found: list[Change] = []
    index = 0
    while index < len(fields) - 1:
        meta = fields[index].lstrip(":").split()
        if len(meta) < 5:
            break
        status = meta[4][0]
        names = 2 if status in "RC" else 1
        path = fields[index + names]
        found.append(Change(status, path, meta[1], None, fields[index + 1] if names == 2 else None))
        index += 1 + names
    links = [c for c in found if c.mode == "120000" and c.status != "D"]
    if links:
        targets = {
            c.path: str(
                output("reading a symlink", repo_root, "cat-file", "blob", f"{commit}:{c.path}", strip=False)
            )
            for c in links
        }
        found = [Change(c.status, c.path, c.mode, targets.get(c.path), c.old_path) for c in found]
    return descends, found


def diff(repo_root: Path | str, baseline: str, commit: str) -> str:
    """The change a candidate made, as text for the diff view."""
    _revision(baseline, "baseline")
    _revision(commit, "commit")
    return str(
        output(
            "git diff",
            repo_root,
            "diff",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            baseline,
            commit,
            "--",
            strip=False,
        )
    )
