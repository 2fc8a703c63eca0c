"""The review screen (f3) on the worktrees a real race kept: rows, details, diff, compare, and every
action through its confirmation, checked against the repository afterwards."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from textual.widgets import DataTable, OptionList, Static

from outpost_tui.engine.kept import archive as a
from outpost_tui.ui.screens.confirm import ConfirmScreen
from outpost_tui.ui.screens.work_diff import WorkDiffScreen
from outpost_tui.ui.screens.worktrees import WorktreesScreen
from tests.conftest import git, make_repo
from tests.retention import kept_race
from tests.ui.support import ScreenHost, text, until

pytestmark = pytest.mark.anyio


@pytest.fixture
def kept(tmp_path) -> dict:
    repo = make_repo(tmp_path / "repo")
    return {"repo": repo, **kept_race(repo)}


def asked(app) -> str:
    """The confirmation's question, its wrapping undone."""
    return " ".join(app.screen.question.split())


def cells(screen: WorktreesScreen) -> dict[str, list[str]]:
    table = screen.query_one("#worktrees", DataTable)
    return {
        str(table.coordinate_to_cell_key((i, 0)).row_key.value): [str(c) for c in table.get_row_at(i)]
        for i in range(table.row_count)
    }


async def listed(pilot, screen: WorktreesScreen, count: int) -> None:
    await until(
        pilot,
        lambda: (
            len(screen.attempts()) == count
            and screen.query_one("#worktrees", DataTable).row_count == count + len(screen.races)
        ),
        f"{count} attempts listed",
    )


async def select(pilot, screen: WorktreesScreen, ident: str) -> None:
    table = screen.query_one("#worktrees", DataTable)
    table.move_cursor(row=table.get_row_index(ident))
    await until(
        pilot,
        lambda: (
            screen.selected() is not None
            and screen.selected().id == ident
            and text(screen, "#details").startswith(f"branch outpost/speculation/{ident}\n")
        ),
        ident,
    )


async def test_rows_grouped_by_race_with_outcome_holdings_and_details(kept):
    screen = WorktreesScreen(kept["repo"])
    async with ScreenHost(screen).run_test(size=(120, 40)) as pilot:
        await listed(pilot, screen, 2)
        race = kept["race_id"]
        rows = cells(screen)
        assert list(rows) == [f"race:{race}", f"{race}/lose/1", f"{race}/win/1"]
        assert rows[f"race:{race}"][1] == "winner"
        assert rows[f"{race}/lose/1"][1:4] == ["rejected", "?1", "2f +2 -0"]
        assert rows[f"{race}/win/1"][1] == "winner"
        await select(pilot, screen, f"{race}/lose/1")
        details = text(screen, "#details")
        assert f"branch outpost/speculation/{race}/lose/1" in details
        assert "rejected: validation failed (exit code 1)" in details and "holds 1 untracked" in details


async def test_whole_work_diff_with_file_navigation_and_fold(kept):
    screen = WorktreesScreen(kept["repo"])
    app = ScreenHost(screen)
    async with app.run_test(size=(120, 40)) as pilot:
        await listed(pilot, screen, 2)
        await select(pilot, screen, f"{kept['race_id']}/win/1")
        await pilot.press("d")
        # pushed is not yet composed: wait for its parts, not only for the screen
        await until(
            pilot, lambda: isinstance(app.screen, WorkDiffScreen) and app.screen.query("#body-0"), "the diff"
        )
        diff = app.screen
        # the committed file and the untracked one the agent left
        assert [f.path for f in diff.files] == ["a.txt", "untracked-notes.txt"]
        assert "+good" in str(diff.query_one("#body-0", Static).content)
        files = diff.query_one("#files", OptionList)
        await pilot.press("n")
        assert diff.current == 1 and files.highlighted == 1
        await pilot.press("p")
        assert diff.current == 0
        await pilot.press("z")
        assert diff.is_folded(0) and not diff.is_folded(1)
        assert str(diff.query_one("#file-0", Static).content).startswith("▸ a.txt")
        await pilot.press("Z")
        assert diff.is_folded(0) and diff.is_folded(1)
        await pilot.press("Z")
        assert not diff.is_folded(0) and not diff.is_folded(1)
        await pilot.press("escape")
        assert app.screen is screen


async def test_compare_two_candidates(kept):
    screen = WorktreesScreen(kept["repo"])
    app = ScreenHost(screen)
    async with app.run_test(size=(120, 40)) as pilot:
        await listed(pilot, screen, 2)
        race = kept["race_id"]
        await select(pilot, screen, f"{race}/win/1")
        await pilot.press("c")
        assert "mark one attempt" in text(screen, "#error")
        await pilot.press("space")
        assert screen.marked == f"{race}/win/1"
        await select(pilot, screen, f"{race}/lose/1")
        (Path(kept["lose"]) / "only-lose.txt").write_text("mine\n")
        await pilot.press("c")
        await until(
            pilot,
            lambda: isinstance(app.screen, WorkDiffScreen) and app.screen.query("#body-0"),
            "the comparison",
        )
        summary = text(app.screen, "#diff-summary")
        assert "only lose#1: only-lose.txt" in summary and "both: a.txt, untracked-notes.txt" in summary
        body = str(app.screen.query_one("#body-0", Static).content)
        assert "-good" in body and "+bad" in body


async def test_archive_asks_then_keeps_everything_and_restore_brings_it_back(kept):
    screen = WorktreesScreen(kept["repo"])
    app = ScreenHost(screen)
    lose = Path(kept["lose"])
    (lose / "debug.log").write_text("x" * 5000)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await listed(pilot, screen, 2)
        ident = f"{kept['race_id']}/lose/1"
        await select(pilot, screen, ident)
        await pilot.press("a")
        assert isinstance(app.screen, ConfirmScreen)
        assert "ignored file(s)" in asked(app) and "are NOT kept" in asked(app)
        await pilot.press("n")
        assert lose.is_dir() and app.screen is screen
        await pilot.press("A")
        assert "are archived too" in asked(app)
        await pilot.press("y")
        await until(pilot, lambda: cells(screen).get(ident, [""] * 3)[2] == "archived", "the archived row")
        assert not lose.exists()
        ref = a.Attempt(kept["race_id"], "lose", 1).ref
        assert git(kept["repo"], "show", f"{ref}:debug.log") == "x" * 5000
        await select(pilot, screen, ident)
        await pilot.press("u")
        await until(pilot, lambda: cells(screen).get(ident, [""] * 3)[2] == "?1 !1", "the restored row")
        assert (lose / "debug.log").read_text() == "x" * 5000
        assert (lose / "untracked-notes.txt").exists()


async def test_a_worktree_in_use_is_not_archived_and_who_is_named(kept):
    busy = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()"], cwd=kept["win"], stdin=subprocess.PIPE
    )
    try:
        screen = WorktreesScreen(kept["repo"])
        app = ScreenHost(screen)
        async with app.run_test(size=(120, 40)) as pilot:
            await listed(pilot, screen, 2)
            ident = f"{kept['race_id']}/win/1"
            await select(pilot, screen, ident)
            assert cells(screen)[ident][6] == "1 proc"
            assert f"pid {busy.pid}" in text(screen, "#details")
            await pilot.press("a")
            assert app.screen is screen
            assert f"pid {busy.pid}" in text(screen, "#error") and "not removed" in text(screen, "#error")
            assert Path(kept["win"]).is_dir()
    finally:
        busy.stdin.close()
        busy.wait()


async def test_merge_after_a_fresh_check_and_a_conflict_refused(kept):
    repo = kept["repo"]
    screen = WorktreesScreen(repo)
    app = ScreenHost(screen)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await listed(pilot, screen, 2)
        race = kept["race_id"]
        await select(pilot, screen, f"{race}/win/1")
        await pilot.press("m")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the merge confirmation")
        question = asked(app)
        assert "into main" in question and "Integration check just now: clean" in question
        assert "not part of the merge" in question  # its untracked file is named as left out
        await pilot.press("y")
        # the screen's report of the merge, not a.txt: git writes the file before it moves HEAD
        await until(
            pilot, lambda: any("merged " in str(n.message) for n in app._notifications), "the merge's report"
        )
        assert (repo / "a.txt").read_text() == "good"
        # main had not moved since the baseline: git fast-forwards, as a merge typed by hand would
        assert git(repo, "rev-parse", "HEAD") == git(repo, "rev-parse", f"outpost/speculation/{race}/win/1")
        head = git(repo, "rev-parse", "HEAD")
        await select(pilot, screen, f"{race}/lose/1")
        await pilot.press("m")
        await until(pilot, lambda: "would conflict in a.txt" in text(screen, "#error"), "the refusal")
        assert app.screen is screen and git(repo, "rev-parse", "HEAD") == head


async def test_copy_and_shell(kept):
    screen = WorktreesScreen(kept["repo"])
    app = ScreenHost(screen)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await listed(pilot, screen, 2)
        ident = f"{kept['race_id']}/win/1"
        await select(pilot, screen, ident)
        await pilot.press("y")
        assert app.clipboard == f"outpost/speculation/{ident}"
        await pilot.press("Y")
        assert app.clipboard == git(kept["repo"], "rev-parse", f"outpost/speculation/{ident}")
        await pilot.press("s")
        assert any(f"run: cd {kept['win']}" in str(n.message) for n in app._notifications)


async def test_prune_then_delete_branches_through_their_confirmations(kept):
    repo = kept["repo"]
    screen = WorktreesScreen(repo)
    app = ScreenHost(screen)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await listed(pilot, screen, 2)
        await pilot.press("P")
        assert isinstance(app.screen, ConfirmScreen)
        assert "archive and remove 2 worktree(s) of finished races" in asked(app)
        await pilot.press("y")
        await until(
            pilot,
            lambda: (
                not Path(kept["win"]).exists()
                and not Path(kept["lose"]).exists()
                and [c[2] for k, c in cells(screen).items() if "/" in k] == ["archived", "archived"]
            ),
            "the pruned rows",
        )
        assert any("pruned 2 worktree(s), freed" in str(n.message) for n in app._notifications)
        await pilot.press("B")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the branch confirmation")
        assert "Delete 2 branch(es)" in asked(app)
        await pilot.press("y")
        await until(pilot, lambda: git(repo, "branch", "--list", "outpost/*") == "", "the deletion")
        assert len(git(repo, "for-each-ref", "refs/outpost/archive/").splitlines()) == 2


async def test_an_unreachable_container_engine_is_a_one_line_note(kept, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/outpost-test.sock")
    screen = WorktreesScreen(kept["repo"])
    async with ScreenHost(screen).run_test(size=(120, 40)) as pilot:
        await until(
            pilot,
            lambda: text(screen, "#containers").startswith("Containers not listed"),
            "the container note",
        )
        note = text(screen, "#containers")
        assert len(note.splitlines()) == 1 and "cannot reach the container engine" in note
        assert len(screen.attempts()) == 2  # the worktrees are listed all the same


async def test_revalidate_shows_the_new_verdict(kept):
    screen = WorktreesScreen(kept["repo"])
    app = ScreenHost(screen)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await listed(pilot, screen, 2)
        ident = f"{kept['race_id']}/lose/1"
        await select(pilot, screen, ident)
        await pilot.press("v")
        await until(pilot, lambda: ident in screen.verdicts, "the first verdict")
        assert screen.verdicts[ident].status == "failed"
        assert "validated again: failed (validation failed (exit code 1))" in text(screen, "#details")
        (Path(kept["lose"]) / "a.txt").write_text("good")
        screen.verdicts.clear()
        await pilot.press("v")
        await until(pilot, lambda: ident in screen.verdicts, "the second verdict")
        assert screen.verdicts[ident].status == "passed"
        assert "validated again: passed" in text(screen, "#details")


async def test_the_app_opens_on_the_review_and_escape_lands_home(kept):
    from outpost_tui.ui.app import OutpostApp
    from outpost_tui.ui.screens.home import HomeScreen

    app = OutpostApp(screen="worktrees", repository=kept["repo"], testing=True)
    async with app.run_test(size=(80, 24)) as pilot:
        await until(pilot, lambda: isinstance(app.screen, WorktreesScreen), "the review screen")
        await listed(pilot, app.screen, 2)
        await pilot.press("escape")
        assert isinstance(app.screen, HomeScreen)


async def test_branches_with_unmerged_work_are_kept_unless_archived_first(kept):
    repo = kept["repo"]
    race = kept["race_id"]
    from outpost_tui.engine.kept import archive as arch
    from outpost_tui.engine.kept import removal, restore

    for key in ("lose", "win"):
        removal.archive_and_remove(repo, kept[key], arch.Attempt(race, key, 1))
        git(repo, "update-ref", "-d", arch.Attempt(race, key, 1).ref)  # as if never archived
    screen = WorktreesScreen(repo)
    app = ScreenHost(screen)
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await listed(pilot, screen, 2)
        assert [c[2] for k, c in cells(screen).items() if "/" in k] == ["branch", "branch"]
        await pilot.press("B")
        await until(pilot, lambda: "no branch of race" in text(screen, "#error"), "the refusal")
        assert "reachable from nothing else" in text(screen, "#error") and "D archives" in text(
            screen, "#error"
        )
        assert app.screen is screen
        await pilot.press("D")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation")
        assert "Delete 2 branch(es)" in asked(app) and "archive, then delete" in asked(app)
        await pilot.press("y")
        await until(pilot, lambda: git(repo, "branch", "--list", "outpost/*") == "", "the deletion")
        assert len(git(repo, "for-each-ref", "refs/outpost/archive/").splitlines()) == 2
        restored = restore.restore(repo, arch.Attempt(race, "win", 1))
        assert (restored / "a.txt").read_text() == "good"
