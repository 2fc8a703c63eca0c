"""Many candidates: the compact table (one row each, the selected one's panel and log beside it),
chosen when panels would be too small, switched with `l`; numbers past 9 typed as two digits."""

from __future__ import annotations

import functools

import pytest
from textual.widgets import DataTable, Log

from outpost_tui.ui.app import OutpostApp
from outpost_tui.ui.widgets.candidate_panel import CandidatePanel
from tests.conftest import make_repo
from tests.ui import support
from tests.ui.test_operator_fixes import fake, race_file

# sixteen agents at once on a loaded machine: each step may take longer than in other tests
until = functools.partial(support.until, timeout=90)

pytestmark = pytest.mark.anyio


async def test_sixteen_candidates_get_the_table_with_the_selected_ones_log_beside_it(tmp_path):
    repo = make_repo(tmp_path / "repo")
    path = race_file(tmp_path, repo, [(f"c{i}", fake("--lines", str(i), "--hang")) for i in range(1, 17)])
    app = OutpostApp(path, start=True, testing=True)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert screen.table_view  # 16 panels in 120x40 would leave no room for a log
        table = screen.query_one("#table", DataTable)
        assert table.row_count == 16 and table.has_focus
        await support.prepared(pilot)
        await until(pilot, lambda: app.session.model.candidates["c12"].lines >= 12, "c12's lines")

        # typed quickly, 1 then 2 is the twelfth (a person types faster than a loaded test presses)
        screen.action_focus_panel(1)
        screen.action_focus_panel(2)
        assert screen.focused_key() == "c12"
        await pilot.pause()
        shown = [panel for panel in screen.query(CandidatePanel) if panel.display and panel.region.height]
        assert [panel.key for panel in shown] == ["c12"]
        await until(
            pilot, lambda: "log line 11" in shown[0].query_one(Log).lines, "c12's log beside the table"
        )
        # the table is redrawn every other tick, the selected panel every tick: the panel may be
        # ahead of the row by a tick
        await until(
            pilot, lambda: str(table.get_cell("c12", "last line")) == "log line 11", "the table's refresh"
        )
        assert str(table.get_cell("c12", "state")) == "running"

        await pilot.press("down")  # the table's cursor picks the candidate
        assert screen.focused_key() == "c13"
        await pilot.press("c")
        await until(pilot, lambda: app.screen is not screen, "the cancel question")
        assert "c13" in app.screen.question
        await pilot.press("n")

        await pilot.press("l")  # the operator's choice: panels, even if small
        await until(
            pilot, lambda: screen.focused is screen.query_one("#panel-c13"), "c13's panel to take focus"
        )
        assert not screen.table_view and screen.focused_key() == "c13"
        await pilot.press("l")
        assert screen.table_view
        await pilot.press("x", "y")
        await until(pilot, lambda: app.session.result, "the abort")


async def test_three_candidates_in_120x40_keep_their_panels(tmp_path):
    repo = make_repo(tmp_path / "repo")
    path = race_file(tmp_path, repo, [(f"c{i}", fake()) for i in range(1, 4)])
    app = OutpostApp(path, testing=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert not app.screen.table_view
        # a screen of panels builds no table (the dearest widget of its first frame after them)
        assert not app.screen.query("#table")
        heights = {panel.region.height for panel in app.screen.query(CandidatePanel)}
        assert min(heights) >= 11
        await pilot.resize_terminal(200, 60)  # a big terminal: panels side by side, all tall
        await pilot.pause()
        panels = list(app.screen.query(CandidatePanel))
        assert len({panel.region.y for panel in panels}) == 1  # three columns, one row
        assert min(panel.region.height for panel in panels) > 40
        await pilot.press("l")  # the table, asked for: built then, a row per candidate
        await until(pilot, lambda: app.screen.query("#table"), "the table")
        table = app.screen.query_one("#table", DataTable)
        assert app.screen.table_view and table.row_count == 3 and table.has_focus
        await pilot.press("down")
        assert app.screen.focused_key() == "c2"
