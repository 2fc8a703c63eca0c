"""The result screen over real finished races: the leaderboard, the winner's merge (checked first,
confirmed, refused on a conflict), copies, the exported report, the rerun, a recorded race."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from textual.widgets import DataTable, Static

from outpost_tui.ui.app import OutpostApp
from outpost_tui.ui.screens.confirm import ConfirmScreen
from outpost_tui.ui.screens.race import RaceScreen
from outpost_tui.ui.screens.recorded_race import RecordedRaceScreen
from outpost_tui.ui.screens.result import ResultScreen
from tests.conftest import git, make_repo
from tests.engine.test_durable import CLI
from tests.ui.support import until
from tests.ui.test_operator_fixes import fake, race_file

pytestmark = pytest.mark.anyio
SIZE = (120, 40)


def outcome(screen) -> str:
    return str(screen.query_one("#outcome", Static).render())


def two_candidates(tmp_path: Path, repo: Path) -> Path:
    # `good` commits fix.txt and passes; `bad` exits 1 (failed); validation checks the file.
    return race_file(
        tmp_path,
        repo,
        [
            (
                "good",
                fake(
                    "--wait-file",
                    str(tmp_path / "bad-ran"),
                    "--write",
                    "fix.txt",
                    "--content",
                    "fixed\n",
                    "--commit",
                    "--usage",
                    "10",
                    "20",
                    "0",
                    "30",
                    "--cost",
                    "0.25",
                ),
            ),
            ("bad", fake("--touch", str(tmp_path / "bad-ran"), "--exit", "1")),
        ],
        validate='["test", "-f", "fix.txt"]',
    )


async def finished(pilot, app) -> RaceScreen:
    await until(pilot, lambda: app.session and app.session.result, "the race")
    screen = app.screen
    assert isinstance(screen, RaceScreen)
    await pilot.pause()
    return screen


async def test_the_leaderboard_export_and_the_winners_merge(tmp_path, monkeypatch):
    monkeypatch.setenv("OUTPOST_DEMO_PACE", "0")
    repo = make_repo(tmp_path / "repo")
    app = OutpostApp(two_candidates(tmp_path, repo), start=True, testing=True)
    async with app.run_test(size=SIZE) as pilot:
        await finished(pilot, app)
        await pilot.press("v")
        screen = app.screen
        assert isinstance(screen, ResultScreen)
        table = screen.query_one("#leaderboard", DataTable)
        assert table.row_count == 2
        first = [str(cell) for cell in table.get_row_at(0)]
        columns = [str(column.label) for column in table.columns.values()]
        assert columns[:6] == ["candidate", "try", "status", "cost", "time", "out"]
        assert first[0] == "good" and first[2] == "winner" and first[-1] == "passed validation"
        assert first[3] == "$0.2500" and first[5] == "30"
        assert [str(cell) for cell in table.get_row_at(1)][:3] == ["bad", "1", "failed"]

        winner = app.session.result.winner
        await pilot.press("b")
        assert app.clipboard == winner.branch
        await pilot.press("y")
        assert app.clipboard == winner.commit

        await pilot.press("e")
        reports = repo / ".outpost" / "reports"
        await until(pilot, lambda: "report exported" in outcome(screen), "the export")
        md = (reports / f"{winner_id(app)}.md").read_text()
        assert "| good | 1 | winner | passed validation |" in md and "| bad | 1 | failed |" in md
        assert json.loads((reports / f"{winner_id(app)}.json").read_text()) == app.session.result.to_json()

        head_before = git(repo, "rev-parse", "HEAD")
        await pilot.press("m")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the merge question")
        question = app.screen.question
        assert "Integration check just now: clean" in question and winner.commit[:12] in question
        await pilot.press("y")
        await until(pilot, lambda: screen.merged is not None, "the merge")
        assert screen.merged.done, screen.merged.message
        assert "nothing was pushed" in outcome(screen)
        assert git(repo, "rev-parse", "HEAD") != head_before
        subprocess.run(["git", "merge-base", "--is-ancestor", winner.commit, "HEAD"], cwd=repo, check=True)
        assert (repo / "fix.txt").read_text() == "fixed\n"
        await pilot.press("escape")
        assert isinstance(app.screen, RaceScreen)


def winner_id(app) -> str:
    return app.session.result.id


async def test_a_merge_that_would_conflict_is_refused_and_changes_nothing(tmp_path):
    repo = make_repo(tmp_path / "repo")
    app = OutpostApp(two_candidates(tmp_path, repo), start=True, testing=True)
    async with app.run_test(size=SIZE) as pilot:
        await finished(pilot, app)
        (repo / "fix.txt").write_text("mine\n")  # the host moves on: same file, other content
        git(repo, "add", "fix.txt")
        git(repo, "commit", "-qm", "host change")
        head = git(repo, "rev-parse", "HEAD")
        await pilot.press("v", "m")
        screen = app.screen
        await until(pilot, lambda: "not merged" in outcome(screen), "the refusal")
        assert "would conflict in fix.txt" in outcome(screen)
        assert not isinstance(app.screen, ConfirmScreen)
        assert git(repo, "rev-parse", "HEAD") == head and git(repo, "status", "--porcelain") == ""


async def test_rerun_runs_the_race_file_again(tmp_path):
    repo = make_repo(tmp_path / "repo")
    app = OutpostApp(two_candidates(tmp_path, repo), start=True, testing=True)
    async with app.run_test(size=SIZE) as pilot:
        await finished(pilot, app)
        first = app.session.result.id
        await pilot.press("v", "r")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await until(
            pilot,
            lambda: app.session.result is not None and app.session.result.id != first,
            "the second race",
        )
        assert isinstance(app.screen, RaceScreen)


async def test_a_recorded_race_opens_its_result_and_the_shell_says_where_it_would_go(tmp_path, monkeypatch):
    repo = make_repo(tmp_path / "repo")
    path = race_file(
        tmp_path,
        repo,
        [("dirty", fake("--write", "fix.txt", "--content", "x", "--commit", "--dirty"))],
        validate='["false"]',
    )
    done = subprocess.run(
        [*CLI, "run", str(path), "--headless", "--json"], capture_output=True, text=True, timeout=120
    )
    result = json.loads(done.stdout)
    app = OutpostApp(recorded=result["id"], repository=repo, testing=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RecordedRaceScreen), "the recorded race")
        await pilot.press("v")
        screen = app.screen
        assert isinstance(screen, ResultScreen) and screen.recorded
        row = screen.rows[0]
        assert row.key == "dirty" and row.status == "rejected" and Path(row.directory).is_dir()
        assert not screen.check_action("merge", ())  # no winner: nothing to merge
        await pilot.press("o")  # headless: the terminal cannot be handed over, and it says where to go
        assert f"cd {row.directory}" in outcome(screen)
