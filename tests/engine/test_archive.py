"""engine/kept: archive, remove (removal.py) and restore (restore.py) real worktrees, byte for byte."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from outpost_tui.engine import git as g
from outpost_tui.engine.kept import archive as a
from outpost_tui.engine.kept import removal as r
from outpost_tui.engine.kept.restore import restore
from tests.conftest import git


def tree_of(top: Path, skip_ignored: set[str] = frozenset()) -> dict[str, tuple]:
    """Every file, link and directory under `top` except .git: (kind, permission bits, bytes or target)."""
    found = {}
    for current, dirs, files in os.walk(top):
        for name in [*dirs, *files]:
            full = Path(current) / name
            rel = str(full.relative_to(top))
            if rel == ".git" or rel.split("/")[0] in skip_ignored:
                continue
            info = os.lstat(full)
            if stat.S_ISLNK(info.st_mode):
                found[rel] = ("link", os.readlink(full))
            elif stat.S_ISDIR(info.st_mode):
                found[rel] = ("dir",)
            else:
                found[rel] = ("file", stat.S_IMODE(info.st_mode), full.read_bytes())
        dirs[:] = [d for d in dirs if not (current == str(top) and d == ".git")]
    return found


@pytest.fixture
def busy_worktree(repo):
    """A retained worktree holding every kind of work a branch does not."""
    (repo / ".gitignore").write_text("build/\n*.log\n")
    (repo / "tracked.txt").write_text("one\n")
    (repo / "hidden.txt").write_text("original\n")
    (repo / "skipped.txt").write_text("original\n")
    (repo / "doomed.txt").write_text("to be deleted\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "layout")
    attempt = a.Attempt("race1", "alpha", 1)
    directory = g.worktree_directory(repo, "alpha", attempt.branch)
    g.add_worktree(repo, attempt.branch, directory, g.resolve_commit(repo))
    (directory / "committed.txt").write_text("on the branch\n")
    git(directory, "add", "committed.txt")
    git(directory, "commit", "-qm", "agent work")
    (directory / "tracked.txt").write_text("one\nuncommitted\n")
    (directory / "new dir").mkdir()
    (directory / "new dir" / "untracked.bin").write_bytes(bytes(range(256)) * 3)
    (directory / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (directory / "run.sh").chmod(0o755)
    (directory / "secret.txt").write_text("private\n")
    (directory / "secret.txt").chmod(0o600)
    os.symlink("tracked.txt", directory / "link-to-tracked")
    os.symlink("../../outside", directory / "dangling")
    (directory / "empty").mkdir()
    (directory / "build").mkdir()
    (directory / "build" / "out.o").write_bytes(b"\0" * 5000)
    (directory / "debug.log").write_text("log\n")
    git(directory, "update-index", "--assume-unchanged", "hidden.txt")
    (directory / "hidden.txt").write_text("edited behind assume-unchanged\n")
    git(directory, "update-index", "--skip-worktree", "skipped.txt")
    (directory / "skipped.txt").write_text("edited behind skip-worktree\n")
    os.unlink(directory / "doomed.txt")
    assert git(directory, "status", "--porcelain", "hidden.txt", "skipped.txt") == ""  # hidden from status
    return attempt, directory


def test_archive_remove_restore_is_byte_for_byte(repo, busy_worktree):
    attempt, directory = busy_worktree
    before = tree_of(directory)
    head = git(directory, "rev-parse", "HEAD")

    removal = r.archive_and_remove(repo, directory, attempt, include_ignored=True)

    assert not directory.exists()
    assert attempt.branch in git(repo, "branch", "--list", attempt.branch)  # the branch stays
    assert git(repo, "rev-parse", attempt.ref) == removal.archive.commit
    assert git(repo, "rev-parse", f"{attempt.ref}^1") == head
    assert removal.freed_bytes > 5000

    restored = restore(repo, attempt)

    assert restored == directory
    assert tree_of(directory) == before
    assert git(directory, "rev-parse", "HEAD") == head
    assert git(directory, "symbolic-ref", "--short", "HEAD") == attempt.branch
    # the uncommitted work shows as uncommitted again, not staged
    assert " M tracked.txt" in git(directory, "status", "--porcelain").splitlines()


def test_ignored_files_are_left_out_unless_asked_with_their_size(repo, busy_worktree):
    attempt, directory = busy_worktree
    before = tree_of(directory, skip_ignored={"build", "debug.log"})
    removal = r.archive_and_remove(repo, directory, attempt)
    assert removal.archive.ignored_files == 2
    assert removal.archive.ignored_bytes >= 5000
    restore(repo, attempt)
    assert tree_of(directory) == before
    assert not (directory / "build").exists()


def test_rearchiving_keeps_the_earlier_archive(repo, busy_worktree):
    attempt, directory = busy_worktree
    first = a.archive(repo, directory, attempt)
    (directory / "later.txt").write_text("later\n")
    second = a.archive(repo, directory, attempt)
    assert second.previous == first.commit
    assert git(repo, "rev-parse", f"{attempt.ref}^2") == first.commit


def test_a_running_process_keeps_its_worktree_and_is_named(repo, busy_worktree):
    attempt, directory = busy_worktree
    sleeper = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], cwd=directory, stdin=subprocess.PIPE
    )
    try:
        with pytest.raises(r.Occupied, match=rf"in use by .*pid {sleeper.pid}, working directory"):
            r.archive_and_remove(repo, directory, attempt)
        assert directory.is_dir() and a.archived_commit(repo, attempt) is None
    finally:
        sleeper.stdin.close()
        sleeper.wait()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; f = open(sys.argv[1]); print('open', flush=True); sys.stdin.read()",
            str(directory / "tracked.txt"),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline() == "open\n"
        with pytest.raises(r.Occupied, match=r"open file .*tracked.txt"):
            r.archive_and_remove(repo, directory, attempt)
        assert directory.is_dir()
    finally:
        holder.stdin.close()
        holder.wait()


def test_a_change_after_archiving_fails_verification(repo, busy_worktree):
    attempt, directory = busy_worktree
    archived = a.archive(repo, directory, attempt)
    (directory / "tracked.txt").write_text("changed after\n")
    with pytest.raises(a.ArchiveError, match=r"tracked\.txt differs from its archived copy"):
        a.verify(repo, directory, archived)
    (directory / "tracked.txt").write_text("one\nuncommitted\n")
    (directory / "brand-new.txt").write_text("x")
    with pytest.raises(a.ArchiveError, match=r"brand-new\.txt is not in the archive"):
        a.verify(repo, directory, archived)


def test_a_nested_repository_is_refused(repo, busy_worktree):
    attempt, directory = busy_worktree
    git(directory, "init", "-q", "vendored")
    with pytest.raises(a.ArchiveError, match="nested git repository"):
        r.archive_and_remove(repo, directory, attempt)
    assert directory.is_dir()


def test_restore_refuses_an_existing_directory_and_a_missing_archive(repo, busy_worktree):
    attempt, directory = busy_worktree
    with pytest.raises(a.ArchiveError, match="no archive of race1/alpha/1"):
        restore(repo, attempt)
    a.archive(repo, directory, attempt)
    with pytest.raises(a.ArchiveError, match="already exists"):
        restore(repo, attempt)


def test_a_write_after_the_check_keeps_the_directory_whole(repo, busy_worktree):
    # The last guard before deletion: the renamed-aside directory is compared with the archive again.
    attempt, directory = busy_worktree
    archived = a.archive(repo, directory, attempt)
    left_out = a.verify(repo, directory, archived)
    assert left_out == {"build", "debug.log"}  # an ignored directory is left out whole
    assert r._written_since(repo, directory, archived, left_out) is None
    (directory / "new dir" / "late.txt").write_text("written after the check\n")
    assert r._written_since(repo, directory, archived, left_out) == "new dir/late.txt"


def test_a_write_in_the_last_moment_is_kept_whole_and_never_pruned(repo, busy_worktree, monkeypatch):
    attempt, directory = busy_worktree
    real_verify = a.verify
    calls = []

    def verify_then_write(root, top, archived):
        left_out = real_verify(root, top, archived)
        calls.append(top)
        if len(calls) == 2:  # the check right before the rename: someone writes just after it
            (Path(top) / "late.txt").write_text("written in the window\n")
        return left_out

    monkeypatch.setattr(a, "verify", verify_then_write)
    with pytest.raises(
        a.ArchiveError, match=r"late.txt changed while .* nothing was deleted, the worktree is back"
    ):
        r.archive_and_remove(repo, directory, attempt)
    # back where it was, still a worktree git knows, nothing left aside for a later prune to delete
    assert (directory / "late.txt").read_text() == "written in the window\n"
    assert str(directory) in git(repo, "worktree", "list", "--porcelain")
    assert list((repo / ".outpost" / "recovery").iterdir()) == []
