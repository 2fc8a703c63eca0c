"""engine/git/merge.py: the operator's merge and cherry-pick, against real repositories with real hooks."""

from __future__ import annotations

import os
from pathlib import Path

from outpost_tui.engine import git as g
from tests.conftest import git


def candidate(repo: Path, key: str, files: dict[str, str]) -> tuple[str, str, Path]:
    """A candidate worktree and branch with one commit per file; (branch, commit, directory)."""
    branch = g.branch_name("r1", key, 1)
    directory = g.worktree_directory(repo, key, branch)
    g.add_worktree(repo, branch, directory, g.resolve_commit(repo))
    for name, text in files.items():
        (directory / name).write_text(text)
        git(directory, "add", name)
        git(directory, "commit", "-qm", f"add {name}")
    return branch, git(directory, "rev-parse", "HEAD"), directory


def test_merge_runs_the_users_hooks_and_never_pushes(repo, tmp_path):
    remote = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(repo, "remote", "add", "origin", str(remote))
    git(repo, "push", "-q", "origin", "main")
    pushed = git(remote, "rev-parse", "main")
    branch, commit, _ = candidate(repo, "a", {"a.txt": "a\n"})
    git(repo, "commit", "-q", "--allow-empty", "-m", "host moves on")  # a real merge, not a fast-forward
    marker = tmp_path / "hook-ran"
    hook = repo / ".git" / "hooks" / "post-merge"
    hook.write_text(f"#!/bin/sh\necho ran > '{marker}'\n")
    hook.chmod(0o755)

    outcome = g.merge_candidate(repo, branch, expected_commit=commit)

    assert outcome.done, outcome.message
    assert "nothing was pushed" in outcome.message
    assert marker.read_text() == "ran\n"  # the user's own merge: their hooks apply
    assert git(repo, "merge-base", "--is-ancestor", commit, "HEAD") == ""
    assert (repo / "a.txt").read_text() == "a\n"
    assert git(remote, "rev-parse", "main") == pushed
    assert outcome.head_after == git(repo, "rev-parse", "HEAD") != outcome.head_before


def test_merge_refused_when_conflicting_dirty_or_moved(repo):
    branch, _commit, _ = candidate(repo, "a", {"base.txt": "candidate\n"})
    (repo / "base.txt").write_text("host\n")
    git(repo, "commit", "-qam", "host edits base")
    head = git(repo, "rev-parse", "HEAD")

    conflicting = g.merge_candidate(repo, branch)
    assert not conflicting.done and "conflict in base.txt" in conflicting.message
    assert git(repo, "rev-parse", "HEAD") == head and git(repo, "status", "--porcelain") == ""

    (repo / "untracked.txt").write_text("mine\n")
    dirty = g.merge_candidate(repo, branch)
    assert not dirty.done and "uncommitted changes" in dirty.message
    os.unlink(repo / "untracked.txt")

    moved = g.merge_candidate(repo, branch, expected_commit=head)
    assert not moved.done and "changed since validation" in moved.message
    assert git(repo, "rev-parse", "HEAD") == head


def test_a_refusing_hook_leaves_the_checkout_as_it_was(repo):
    branch, _commit, _ = candidate(repo, "a", {"a.txt": "a\n"})
    git(repo, "commit", "-q", "--allow-empty", "-m", "host moves on")
    head = git(repo, "rev-parse", "HEAD")
    hook = repo / ".git" / "hooks" / "pre-merge-commit"
    hook.write_text("#!/bin/sh\necho 'policy says no' >&2\nexit 1\n")
    hook.chmod(0o755)

    outcome = g.merge_candidate(repo, branch)

    assert not outcome.done and "aborted" in outcome.message
    assert git(repo, "rev-parse", "HEAD") == head
    assert git(repo, "status", "--porcelain") == ""
    assert not (repo / ".git" / "MERGE_HEAD").exists()


def test_cherry_pick_applies_the_candidates_commits_in_order(repo):
    baseline = g.resolve_commit(repo)
    branch, commit, _ = candidate(repo, "a", {"one.txt": "1\n", "two.txt": "2\n"})
    git(repo, "commit", "-q", "--allow-empty", "-m", "host moves on")

    outcome = g.cherry_pick_candidate(repo, branch, baseline, expected_commit=commit)

    assert outcome.done and "2 commit(s)" in outcome.message
    subjects = git(repo, "log", "--format=%s", "-3").splitlines()
    assert subjects == ["add two.txt", "add one.txt", "host moves on"]
    assert (repo / "two.txt").read_text() == "2\n"
    # picked, not merged: the candidate's own commits are not in the host's history
    assert commit not in git(repo, "rev-list", "HEAD").split()
