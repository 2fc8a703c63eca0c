"""engine/kept/cleanup.py and engine/kept/retained.py on a real race's kept worktrees."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from outpost_tui.engine import git as g
from outpost_tui.engine.kept import archive as a
from outpost_tui.engine.kept import cleanup as c
from outpost_tui.engine.kept import removal as r
from outpost_tui.engine.kept.restore import restore
from outpost_tui.engine.kept.retained import UnknownAttempt, find, retained
from tests.conftest import git
from tests.retention import kept_race


def du(path: Path) -> int:
    """Allocated bytes under `path`, counted independently of the engine (hard links once)."""
    out = subprocess.run(["du", "-s", "-B1", str(path)], capture_output=True, text=True, check=True).stdout
    return int(out.split()[0])


def test_review_rows_carry_outcome_holdings_and_whole_work(repo):
    kept = kept_race(repo)
    (Path(kept["win"]) / "notes.log").write_text("ignored\n" * 100)
    races = retained(repo)
    assert [r.id for r in races] == [kept["race_id"]]
    rows = {row.key: row for row in races[0].attempts}
    assert rows["lose"].outcome == "rejected" and "validation failed" in rows["lose"].reason
    assert rows["win"].outcome == "winner"
    assert rows["win"].holds.untracked == 1 and rows["win"].holds.ignored == 1
    assert rows["win"].holds.ignored_bytes > 0
    # committed a.txt plus the untracked file the agent left
    assert rows["win"].diff_stat["files"] == 2
    assert find(races, f"{kept['race_id']}/win/1") is rows["win"]
    assert find(races, kept["win"]) is rows["win"]
    with pytest.raises(UnknownAttempt, match="no retained attempt 'nope'"):
        find(races, "nope")


def test_prune_archives_removes_and_reports_what_it_freed(repo):
    kept = kept_race(repo)
    directories = [Path(kept["lose"]), Path(kept["win"])]
    git_dirs = [r._worktree_git_dir(d) for d in directories]
    # and what a fenced candidate's git wrote: its view, with its private repository
    views = [g.candidate_view(d) for d in directories if g.candidate_view(d).is_dir()]
    expected = sum(du(d) for d in directories) + sum(du(x) for x in git_dirs) + sum(du(v) for v in views)
    before = {d: sorted(p.name for p in d.iterdir()) for d in directories}

    steps = c.plan_prune(retained(repo))
    assert [s.action for s in steps] == [c.REMOVE, c.REMOVE]
    report = c.prune(repo, steps)

    assert not report.kept and not report.failed
    assert not any(d.exists() for d in directories) and not any(x.exists() for x in git_dirs)
    assert not any(v.exists() for v in views)
    assert report.freed_bytes == expected
    for row_id, directory in zip(("lose", "win"), directories, strict=True):
        attempt = a.Attempt(kept["race_id"], row_id, 1)
        assert a.archived_commit(repo, attempt)
        restore(repo, attempt)
        assert sorted(p.name for p in directory.iterdir()) == before[directory]


def test_prune_keeps_a_worktree_in_use_and_young_ones(repo):
    kept = kept_race(repo)
    busy = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], cwd=kept["win"], stdin=subprocess.PIPE
    )
    try:
        steps = {s.attempt.key: s for s in c.plan_prune(retained(repo))}
        assert steps["win"].action == c.KEEP and f"pid {busy.pid}" in steps["win"].why
        assert steps["lose"].action == c.REMOVE
        young = c.plan_prune(retained(repo), older_than_days=1)
        assert {s.action for s in young} == {c.KEEP}
        assert all("younger than 1 days" in s.why for s in young)
    finally:
        busy.stdin.close()
        busy.wait()


def test_branches_with_unmerged_work_are_refused_and_squash_merges_count(repo):
    kept = kept_race(repo)
    race_id = kept["race_id"]
    for key in ("lose", "win"):
        r.archive_and_remove(repo, kept[key], a.Attempt(race_id, key, 1))
    # the archives keep every commit reachable: delete the archive refs to see the branch check itself
    for key in ("lose", "win"):
        git(repo, "update-ref", "-d", a.Attempt(race_id, key, 1).ref)
    checks = {ch.branch.split("/")[-2]: ch for ch in c.check_branches(repo, race_id)}
    assert not checks["win"].deletable and "reachable from nothing else" in checks["win"].why

    # squash-merge the winner by hand: its commits are not on main, its change is
    git(repo, "merge", "--squash", "-q", checks["win"].branch)
    git(repo, "commit", "-qm", "squashed the winner")
    checks = {ch.branch.split("/")[-2]: ch for ch in c.check_branches(repo, race_id)}
    assert checks["win"].deletable and "squash-merged" in checks["win"].why
    assert not checks["lose"].deletable
    with pytest.raises(a.ArchiveError, match="not deleted"):
        c.delete_branch(repo, checks["lose"])

    c.delete_branch(repo, checks["win"])
    assert git(repo, "branch", "--list", checks["win"].branch) == ""
    # archived first, the loser's commits stay reachable, so its branch may go
    c.archive_branch(repo, checks["lose"].branch)
    again = {ch.branch.split("/")[-2]: ch for ch in c.check_branches(repo, race_id)}
    assert again["lose"].deletable
    c.delete_branch(repo, again["lose"])
    restored = restore(repo, a.Attempt(race_id, "lose", 1))
    assert (restored / "a.txt").read_text() == "bad"


def test_a_branch_checked_out_in_a_worktree_is_not_deleted(repo):
    kept = kept_race(repo)
    checks = c.check_branches(repo, kept["race_id"])
    assert all(not ch.deletable and "checked out in" in ch.why for ch in checks)
    moved = checks[0]
    with pytest.raises(a.ArchiveError):
        c.delete_branch(repo, moved)


def test_revalidation_runs_the_recorded_command_in_the_worktree_now(repo):
    from outpost_tui.engine.kept.revalidation import NotRecorded, revalidate

    kept = kept_race(repo)
    race_id = kept["race_id"]
    assert revalidate(repo, race_id, "lose", 1, kept["lose"]).status == "failed"
    (Path(kept["lose"]) / "a.txt").write_text("good")  # fixed by hand, not committed
    assert revalidate(repo, race_id, "lose", 1, kept["lose"]).status == "passed"
    # the recorded result is untouched
    assert {r.key: r.outcome for r in retained(repo)[0].attempts}["lose"] == "rejected"

    from outpost_tui.engine import race
    from tests.conftest import cmd

    called = race(
        repository=repo,
        candidates=[cmd("c", "--write", "c.txt", "--commit", "--dirty")],
        validate=lambda context: True,
    )
    with pytest.raises(NotRecorded, match="recorded no validation command"):
        revalidate(repo, called.id, "c", 1, called.candidates[0].retained_directory)


def test_verdict_counts_and_a_running_container_in_the_review(repo):
    from outpost_tui.engine.kept.retained import _verdict_counts

    graded = {
        "verdict": {
            "commit": "c" * 40,
            "gate": "strict",
            "accepted": False,
            "tests": {"ran": 12, "passed": 10, "failed": 2, "errors": 0, "skipped": 0},
            "new_failures": ["test_a", "test_b"],
            "flaky": [],
        }
    }
    assert _verdict_counts(graded) == {
        "ran": 12,
        "passed": 10,
        "failed": 2,
        "errors": 0,
        "skipped": 0,
        "new failures": 2,
    }
    assert _verdict_counts({"verdict": None}) is None
    kept = kept_race(repo)
    containers = [
        {"race": kept["race_id"], "key": "win", "attempt": 1, "name": "outpost-win", "status": "running"}
    ]
    steps = {s.attempt.key: s for s in c.plan_prune(retained(repo, containers=containers))}
    assert steps["win"].action == c.KEEP and steps["win"].why == "its container outpost-win is running"
    assert steps["lose"].action == c.REMOVE


def test_prune_sweeps_the_views_of_checkouts_that_are_gone_and_keeps_the_others(repo):
    # A fenced race's kept worktrees each have a view (their private repository); the loser's
    # worktree is then removed by hand, leaving its view with nothing to bring in any more.
    kept = kept_race(repo)
    lose, win = Path(kept["lose"]), Path(kept["win"])
    views = {d: g.candidate_view(d) for d in (lose, win)}
    if not all(view.is_dir() for view in views.values()):
        pytest.skip("candidates ran unisolated here (no bubblewrap): no views")
    git(repo, "worktree", "remove", "--force", str(lose))

    report = c.prune(repo, [])  # nothing planned: only what is left over

    assert not views[lose].exists()
    assert views[win].is_dir() and win.is_dir()  # its checkout is there: its view stays
    assert report.leftovers_freed > 0 and report.freed_bytes == report.leftovers_freed
