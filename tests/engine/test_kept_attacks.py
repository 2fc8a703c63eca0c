"""Kept work survives the candidate: what a hostile candidate leaves in its worktree never makes a
prune delete a byte that no verified archive (or branch) holds.

Each attack runs on a real race's kept worktrees (tests/retention.py) and a real prune; each has a
control, the same setup without the attack, which the prune does remove.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from outpost_tui.engine.errors import OutpostError
from outpost_tui.engine.kept import archive as a
from outpost_tui.engine.kept import cleanup as c
from outpost_tui.engine.kept import removal as r
from outpost_tui.engine.kept.restore import restore
from outpost_tui.engine.kept.retained import retained
from tests.conftest import git, make_repo
from tests.engine.test_archive import tree_of
from tests.retention import kept_race


def prune_all(repo: Path) -> c.PruneReport:
    return c.prune(repo, c.plan_prune(retained(repo)))


def attempt(kept: dict, key: str) -> a.Attempt:
    return a.Attempt(kept["race_id"], key, 1)


def registered(repo: Path) -> set[str]:
    out = git(repo, "worktree", "list", "--porcelain")
    return {line.removeprefix("worktree ") for line in out.splitlines() if line.startswith("worktree ")}


def nest(win: Path, how: str) -> Path:
    """What the candidate that won leaves under an ignored directory of its worktree (`*.log` is
    ignored): a worktree of the user's repository it added from inside its own (its git reaches
    the user's repository) or a repository of its own, either holding uncommitted work."""
    hidden = win / "cache.log"
    if how == "worktree":
        git(win, "worktree", "add", "-q", "-b", "stash", str(hidden / "wt"))
        inner = hidden / "wt"
    elif how == "repository":
        inner = make_repo(hidden / "repo")
    else:  # the control: the same files, no repository around them
        inner = hidden / "plain"
        inner.mkdir(parents=True)
    (inner / "work.txt").write_text("uncommitted work\n")
    return inner / "work.txt"


@pytest.mark.parametrize("how", ["worktree", "repository"])
def test_a_repository_nested_under_an_ignored_directory_keeps_the_worktree(repo, how):
    kept = kept_race(repo)
    win = Path(kept["win"])
    work = nest(win, how)

    report = prune_all(repo)

    assert work.read_text() == "uncommitted work\n"
    assert win.is_dir() and str(win) in registered(repo)
    why = dict(report.kept)[attempt(kept, "win").label]
    assert "holds a nested git repository" in why and "cache.log" in why
    # the other worktree, with nothing nested, is pruned as usual
    assert not Path(kept["lose"]).exists() and a.archived_commit(repo, attempt(kept, "lose"))


def test_control_the_same_ignored_directory_without_a_repository_is_pruned(repo):
    kept = kept_race(repo)
    win = Path(kept["win"])
    work = nest(win, "plain")

    report = prune_all(repo)

    assert not report.kept and not report.failed
    assert not work.exists() and not win.exists()  # ignored files go with the worktree, by design
    assert a.archived_commit(repo, attempt(kept, "win"))


def test_a_repository_that_appears_under_an_ignored_directory_during_removal_puts_it_back(repo, monkeypatch):
    # The last guard: after the rename aside, before a byte is deleted, the directory is walked
    # again, ignored directories included.
    kept = kept_race(repo)
    win = Path(kept["win"])
    real = r._written_since
    late: list[Path] = []

    def nest_then_check(root, aside, archived, left_out):
        late.append(nest(Path(aside), "repository"))
        return real(root, aside, archived, left_out)

    monkeypatch.setattr(r, "_written_since", nest_then_check)
    with pytest.raises(a.ArchiveError, match=r"cache.log/repo/.git changed while .* the worktree is back"):
        r.archive_and_remove(repo, win, attempt(kept, "win"))
    assert (win / "cache.log" / "repo" / "work.txt").read_text() == "uncommitted work\n"
    assert str(win) in registered(repo) and r.leftovers(repo) == []


def test_a_rival_worktree_moved_inside_is_never_deleted_with_it(repo):
    # The loser moves the winner's worktree (with its untracked work) under an ignored directory
    # of its own: the loser's worktree comes first in the prune, and removing it whole would take
    # the winner's with it.
    kept = kept_race(repo)
    lose, win = Path(kept["lose"]), Path(kept["win"])
    (win / "precious.txt").write_text("the winner's uncommitted work\n")
    before = tree_of(win)
    moved = lose / "cache.log" / "win"
    moved.parent.mkdir()
    git(lose, "worktree", "move", str(win), str(moved))

    report = prune_all(repo)

    # the winner's worktree was pruned on its own (archived, verified), the loser's kept for it
    assert [removal.directory for removal in report.removed] == [str(moved)]
    assert "holds a nested git repository" in dict(report.kept)[attempt(kept, "lose").label]
    assert lose.is_dir() and not moved.exists()
    shutil.rmtree(moved.parent)  # (it held nothing but the moved worktree)
    again = prune_all(repo)  # nothing nested any more: the loser's goes too
    assert [removal.directory for removal in again.removed] == [str(lose)]
    assert tree_of(restore(repo, attempt(kept, "win"))) == before  # recreated where it was moved to


def test_a_worktree_swapped_for_a_symlink_to_a_rival_is_not_followed(repo, tmp_path):
    # The loser moves its worktree away and leaves a link to the winner's in its place: pruning
    # "the loser" must not archive the winner's files under the loser's name, nor remove them.
    kept = kept_race(repo)
    lose, win = Path(kept["lose"]), Path(kept["win"])
    os.rename(lose, tmp_path / "lose-moved")
    os.symlink(win, lose)
    winner = tree_of(win)

    steps = {s.attempt.key: s for s in c.plan_prune(retained(repo))}
    assert steps["lose"].action == c.KEEP and "symbolic link" in steps["lose"].why
    # and were it asked to anyway, the removal itself refuses before writing anything
    with pytest.raises(a.ArchiveError, match=r"is a symbolic link .* not followed, not removed"):
        r.archive_and_remove(repo, lose, attempt(kept, "lose"))
    assert a.archived_commit(repo, attempt(kept, "lose")) is None
    assert lose.is_symlink() and tree_of(win) == winner
    assert not (repo / ".outpost" / "recovery").exists() or r.leftovers(repo) == []

    report = c.prune(repo, list(steps.values()))
    assert [removal.directory for removal in report.removed] == [str(win)]
    assert tree_of(restore(repo, attempt(kept, "win"))) == winner
    assert (tmp_path / "lose-moved" / "a.txt").read_text() == "bad"


def test_symlinks_inside_a_worktree_are_removed_as_links_never_followed(repo, tmp_path):
    kept = kept_race(repo)
    lose, win = Path(kept["lose"]), Path(kept["win"])
    users = tmp_path / "users-files"
    users.mkdir()
    (users / "thesis.txt").write_text("years of work\n")
    os.symlink(users, win / "mine")
    os.symlink(lose, win / "rival")
    os.symlink(repo, win / "checkout")
    os.symlink(users / "thesis.txt", win / "thesis.txt")
    rival, checkout = tree_of(lose), tree_of(repo, skip_ignored={".outpost"})

    report = prune_all(repo)

    assert {Path(removal.directory) for removal in report.removed} == {lose, win}
    assert (users / "thesis.txt").read_text() == "years of work\n"
    assert tree_of(repo, skip_ignored={".outpost"}) == checkout
    assert tree_of(restore(repo, attempt(kept, "lose"))) == rival
    restored = restore(repo, attempt(kept, "win"))
    assert os.readlink(restored / "mine") == str(users)  # the archive kept the link, not its target


def test_control_a_copy_instead_of_a_link_is_removed_with_the_worktree(repo, tmp_path):
    # The same files really inside the worktree are its own, and go (archived) with it.
    kept = kept_race(repo)
    win = Path(kept["win"])
    users = tmp_path / "users-files"
    users.mkdir()
    (users / "thesis.txt").write_text("years of work\n")
    shutil.copytree(users, win / "mine")

    report = prune_all(repo)

    assert not win.exists() and len(report.removed) == 2
    assert (restore(repo, attempt(kept, "win")) / "mine" / "thesis.txt").read_text() == "years of work\n"


def test_a_link_left_among_the_removals_aside_is_not_followed(repo, tmp_path):
    kept = kept_race(repo)
    users = tmp_path / "users-files"
    users.mkdir()
    (users / "thesis.txt").write_text("years of work\n")
    recovery = repo / ".outpost" / "recovery"
    recovery.mkdir(parents=True, exist_ok=True)
    os.symlink(users, recovery / f"{r.REMOVING}-planted")
    # the control beside it: a real directory an interrupted removal left, which prune finishes
    (recovery / f"{r.REMOVING}-interrupted").mkdir()
    (recovery / f"{r.REMOVING}-interrupted" / "left.txt").write_text("x" * 5000)

    report = prune_all(repo)

    assert (users / "thesis.txt").read_text() == "years of work\n"
    assert (recovery / f"{r.REMOVING}-planted").is_symlink()
    assert not (recovery / f"{r.REMOVING}-interrupted").exists() and report.leftovers_freed >= 5000
    assert len(report.removed) == 2 and not Path(kept["win"]).exists()


@pytest.mark.parametrize("when", ["before the rename", "after the rename"])
@pytest.mark.parametrize("what", ["deleted", "moved"])
def test_an_archive_ref_deleted_or_moved_just_before_removal_keeps_the_worktree(
    repo, monkeypatch, when, what
):
    kept = kept_race(repo)
    win = Path(kept["win"])
    before = tree_of(win)
    ref = attempt(kept, "win").ref
    # a seam at each side of the rename: disk_usage is the last step before it, _written_since
    # the first after it
    name = "disk_usage" if when == "before the rename" else "_written_since"
    real = getattr(r, name)

    def tamper_then(*args):
        if a.archived_commit(repo, attempt(kept, "win")):
            if what == "deleted":
                git(repo, "update-ref", "-d", ref)
            else:  # to a commit that holds none of the worktree's untracked work
                git(repo, "update-ref", ref, "HEAD")
        return real(*args)

    monkeypatch.setattr(r, name, tamper_then)
    with pytest.raises(a.ArchiveError, match=rf"{ref} (no longer points|was deleted or moved)"):
        r.archive_and_remove(repo, win, attempt(kept, "win"))

    assert tree_of(win) == before and str(win) in registered(repo)
    assert r.leftovers(repo) == [] and not list((repo / ".outpost" / "recovery").glob("changed-*"))


def test_control_an_archive_ref_left_alone_lets_the_worktree_go(repo, monkeypatch):
    kept = kept_race(repo)
    win = Path(kept["win"])
    real = r._written_since
    looked: list[str] = []

    def look_then(root, aside, archived, left_out):
        looked.append(str(a.archived_commit(repo, archived.attempt)))
        return real(root, aside, archived, left_out)

    monkeypatch.setattr(r, "_written_since", look_then)
    removal = r.archive_and_remove(repo, win, attempt(kept, "win"))
    assert looked == [removal.archive.commit] and not win.exists()
    assert str(win) not in registered(repo)


@pytest.mark.parametrize("days", [float("nan"), float("inf"), -1.0])
def test_plan_prune_refuses_an_age_no_worktree_can_reach(repo, days):
    kept_race(repo)
    with pytest.raises(OutpostError, match="a finite number, 0 or more"):
        c.plan_prune(retained(repo), older_than_days=days)
    # the control: an age every worktree has reached
    assert {s.action for s in c.plan_prune(retained(repo), older_than_days=0)} == {c.REMOVE}


def test_a_worktree_added_inside_under_an_attempt_branch_name_is_archived_not_lost(repo):
    # The candidate registers a worktree inside its own under a branch named like a later attempt
    # of its own: both are listed as attempts; neither is removed without an archive holding it.
    kept = kept_race(repo)
    win = Path(kept["win"])
    fake = a.Attempt(kept["race_id"], "win", 2)
    git(win, "worktree", "add", "-q", "-b", fake.branch, str(win / "sub"))
    (win / "sub" / "work.txt").write_text("uncommitted work\n")

    report = prune_all(repo)

    assert "holds a nested git repository" in dict(report.kept)[attempt(kept, "win").label]
    assert str(win / "sub") in [removal.directory for removal in report.removed]
    assert git(repo, "show", f"{fake.ref}:work.txt") == "uncommitted work"
    again = prune_all(repo)  # the outer one holds nothing nested any more
    assert [removal.directory for removal in again.removed] == [str(win)]
    assert not win.exists() and a.archived_commit(repo, attempt(kept, "win"))
