"""An unisolated race says so where it cannot be missed: a warning line in the race's summary from
its start to its end, and one above the leaderboard of its result, live or recorded. The same race
isolated by bubblewrap (the control) shows neither."""

from __future__ import annotations

import json
import subprocess

import pytest
from textual.widgets import Static

from outpost_tui.ui.app import OutpostApp
from outpost_tui.ui.screens.recorded_race import RecordedRaceScreen
from outpost_tui.ui.screens.result import ResultScreen
from tests.engine.test_durable import CLI
from tests.ui.support import until
from tests.ui.test_operator_fixes import fake, race_file

pytestmark = pytest.mark.anyio
SIZE = (120, 36)
WARNING = "⚠ candidates run unisolated, as you"


def summary(app) -> str:
    return str(app.screen.query_one("#summary", Static).render())


def the_race(tmp_path, repo, isolation: str):
    go = tmp_path / "go"
    path = race_file(
        tmp_path,
        repo,
        [("fixer", fake("--wait-file", str(go), "--write", "fix.txt", "--content", "x", "--commit"))],
        tables=f'\n[sandbox]\nisolation = "{isolation}"\n',
    )
    return path, go


@pytest.mark.parametrize("isolation", ["none", "bubblewrap"])
async def test_an_unisolated_race_warns_on_its_summary_and_its_result(repo, tmp_path, isolation):
    path, go = the_race(tmp_path, repo, isolation)
    app = OutpostApp(path, start=True, testing=True)
    async with app.run_test(size=SIZE) as pilot:
        # while the candidate runs (it waits for `go`): a summary that shows it running was drawn
        # after the race chose how to isolate it (first thing, before any candidate starts)
        await until(pilot, lambda: "leader fixer (running" in summary(app), "the candidate to run")
        live = summary(app)
        go.touch()
        await until(pilot, lambda: app.session.result, "the race to finish")
        await until(pilot, lambda: "winner fixer" in summary(app), "the summary to show the winner")
        ended = summary(app)
        await pilot.press("v")
        await until(pilot, lambda: isinstance(app.screen, ResultScreen), "the result screen")
        shown = [str(widget.render()) for widget in app.screen.query("#isolation")]
    assert app.session.result.isolation["mode"] == isolation
    if isolation == "bubblewrap":
        assert "unisolated" not in live and "unisolated" not in ended, (live, ended)
        assert shown == []
        return
    # its own line, after the state and the budget's: a narrow terminal cuts its end, not the state
    assert live.splitlines()[-1].startswith(WARNING), live
    assert ended.splitlines()[-1].startswith(WARNING), ended
    assert len(shown) == 1 and shown[0].startswith(WARNING)


@pytest.mark.parametrize("isolation", ["none", "bubblewrap"])
async def test_a_recorded_unisolated_race_still_warns(repo, tmp_path, isolation):
    path, go = the_race(tmp_path, repo, isolation)
    go.touch()
    done = subprocess.run(
        [*CLI, "run", str(path), "--headless", "--json"], capture_output=True, text=True, timeout=120
    )
    result = json.loads(done.stdout)
    assert result["isolation"]["mode"] == isolation, done.stderr
    app = OutpostApp(recorded=result["id"], repository=repo, testing=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RecordedRaceScreen), "the recorded race")
        await until(pilot, lambda: "winner fixer" in summary(app), "the recorded summary")
        recorded = summary(app)
        await pilot.press("v")
        await until(pilot, lambda: isinstance(app.screen, ResultScreen), "the result screen")
        shown = [str(widget.render()) for widget in app.screen.query("#isolation")]
    if isolation == "bubblewrap":
        assert "unisolated" not in recorded and shown == [], (recorded, shown)
        return
    assert recorded.splitlines()[-1].startswith(WARNING), recorded
    assert len(shown) == 1 and shown[0].startswith(WARNING)
