"""A recorded race in the app: read back from its flight log, shown as it ended, read-only."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from textual.command import CommandList, CommandPalette
from textual.widgets import Log, RichLog
from textual.widgets._footer import FooterKey
from textual.widgets._header import HeaderTitle

from outpost_tui.engine import build_spec, run_race
from outpost_tui.engine.records.flightlog import seal_path
from outpost_tui.ui.app import OutpostApp
from outpost_tui.ui.screens.confirm import ConfirmScreen
from outpost_tui.ui.screens.diff import DiffScreen
from outpost_tui.ui.screens.home import HomeScreen
from outpost_tui.ui.screens.race import RaceScreen
from outpost_tui.ui.screens.recorded_race import RecordedRaceScreen
from outpost_tui.ui.widgets.candidate_panel import CandidatePanel
from tests.conftest import cmd, git
from tests.ui.support import until

pytestmark = pytest.mark.anyio
SIZE = (120, 40)
VALIDATE = Path(__file__).parents[1] / "fixtures" / "agents" / "validate.py"


@pytest.fixture
def race_id(repo) -> str:
    """A finished fallback race: `bad` rejected by validation, then `good` the winner."""
    spec = build_spec(
        repository=repo,
        mode="fallback",
        name="calc",
        validate=[sys.executable, str(VALIDATE)],
        candidates=[
            cmd("bad", "--write", "fix.txt", "--content", "bad", "--commit", "--lines", "5"),
            cmd("good", "--write", "fix.txt", "--content", "good", "--commit"),
        ],
    )
    result = run_race(spec)
    assert result.winner.key == "good"
    return result.id


def refs_and_worktrees(repo: Path) -> tuple[str, str]:
    return git(repo, "for-each-ref", "--format=%(refname) %(objectname)"), git(repo, "worktree", "list")


def has_class(screen, selector: str, name: str) -> bool:
    return any(node.has_class(name) for node in screen.query(selector))


def footer(screen) -> set[str]:
    return {key.description for key in screen.query(FooterKey)}


def notifications(app) -> list[str]:
    return [n.message for n in app._notifications]


async def test_a_recorded_race_shows_how_it_ended_and_changes_nothing(repo, race_id):
    before = refs_and_worktrees(repo)
    app = OutpostApp(recorded=race_id, repository=repo, testing=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RecordedRaceScreen), "the recorded race")
        screen = app.screen
        await until(pilot, lambda: has_class(screen, "#panel-good", "-winner"), "a redraw")
        panels = {p.key: p for p in screen.query(CandidatePanel)}
        assert panels["bad"].has_class("-rejected")
        assert panels["good"].border_title == "2 good · command"
        bad_log = "\n".join(panels["bad"].query_one(Log).lines)
        good_log = "\n".join(panels["good"].query_one(Log).lines)
        assert "log line 4" in bad_log and "── rejected" in bad_log
        assert "validation passed" in good_log and "── winner" in good_log
        summary = str(screen.query_one("#summary").render())
        assert summary.startswith("winner good on outpost/speculation/")

        def header():
            return "".join(str(title.render()) for title in screen.query(HeaderTitle))

        await until(pilot, lambda: "recorded" in header(), "the header")
        assert header().startswith(f"outpost-tui · calc · recorded — race {race_id}, started 20")
        assert app.session is None  # the app's own race (none here) is not replaced

        await until(pilot, lambda: footer(screen), "the footer")
        shown = footer(screen)
        assert {"Diff", "Zoom", "Search"} <= shown
        assert not shown & {"Start", "Cancel", "Accept", "Abort"}

        for key in ("c", "a", "x", "s"):
            await pilot.press(key)
            await pilot.pause(0.05)
            assert not isinstance(app.screen, ConfirmScreen)
        said = notifications(app)
        assert len(said) == 4 and all(message.startswith("a recorded race") for message in said)
        assert refs_and_worktrees(repo) == before

        # zoom, search and diff work as in a live race
        await pilot.press("2", "enter")
        assert screen.maximized is panels["good"]
        await pilot.press("escape", "1", "slash")
        await pilot.press(*"log line", "enter")
        assert "5 line(s) match 'log line'" in notifications(app)
        assert len(panels["bad"].query_one(Log).lines) == 5
        await pilot.press("2", "d")
        await until(pilot, lambda: isinstance(app.screen, DiffScreen), "the diff")

        def diff():
            return [line.text for log in app.screen.query(RichLog) for line in log.lines]

        await until(pilot, lambda: "+good" in diff(), "the diff text")
        await pilot.press("escape")
        assert app.screen is screen
    assert refs_and_worktrees(repo) == before


async def test_the_live_race_screen_is_unchanged_by_it(repo, race_id, tmp_path):
    # The live screen keeps its controls in the footer (a recorded one hides them).
    path = tmp_path / "race.toml"
    path.write_text(
        f'[race]\nname = "live"\nrepository = "{repo}"\n\n[validate]\ncommand = ["true"]\n'
        f'\n[[candidates]]\nkey = "a"\nagent = "command"\nbrief = "b"\ncommand = ["true"]\n'
    )
    app = OutpostApp(path, testing=True)
    async with app.run_test(size=SIZE) as pilot:
        assert type(app.screen) is RaceScreen
        await until(pilot, lambda: footer(app.screen), "the footer")
        assert {"Start", "Zoom"} <= footer(app.screen)
        assert "Diff" not in footer(app.screen)  # no branch to diff before the start


async def test_home_h_lists_recorded_races_and_opens_one(repo, race_id, monkeypatch):
    monkeypatch.chdir(repo)
    app = OutpostApp(testing=True)
    async with app.run_test(size=SIZE) as pilot:
        assert isinstance(app.screen, HomeScreen)
        titles = [title for title, _, _ in app.palette_commands()]
        assert "Show a recorded race…" in titles
        await pilot.press("h")
        await until(pilot, lambda: isinstance(app.screen, CommandPalette), "the list of races")
        await pilot.press(*race_id[-6:])
        await until(
            pilot,
            lambda: [n.option_count for n in app.screen.query(CommandList)] == [1],
            "the race alone in the list",
        )
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RecordedRaceScreen), "the recorded race")
        assert app.screen.recording.race.id == race_id
        await pilot.press("escape")
        assert isinstance(app.screen, HomeScreen)


async def test_an_unfinished_race_says_so(repo, race_id):
    seal_path(race_id).unlink()  # as a coordinator killed before it sealed its log leaves it
    race_file = repo / ".outpost" / "runs" / race_id / "race.jsonl"
    race_file.write_text(
        "".join(line + "\n" for line in race_file.read_text().splitlines() if '"race-finished"' not in line)
    )
    app = OutpostApp(recorded=race_id, repository=repo, testing=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RecordedRaceScreen), "the recorded race")
        await until(pilot, lambda: has_class(app.screen, "#panel-good", "-winner"), "a redraw")
        summary = str(app.screen.query_one("#summary").render())
        assert summary.startswith("unfinished") and "winner good" not in summary


async def test_an_unknown_race_says_so_on_the_home_screen(repo):
    app = OutpostApp(recorded="20000101-000000-abcdef", repository=repo, testing=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, HomeScreen), "the home screen")
        await pilot.pause()  # let the home screen finish mounting before the test leaves
        said = notifications(app)
        assert any("no recorded race" in message for message in said), said
