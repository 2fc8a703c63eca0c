"""Watching a race: the header (elapsed, budget bars, leader), notifications an operator must not
miss, the hand-picked winner, the focused winner's colour, search highlighting, keys after the end.
Real races of the fake agent (real git, real processes)."""

from __future__ import annotations

import pytest
from rich.text import Text
from textual.color import Color
from textual.widgets import Footer, Log, Static
from textual.widgets._footer import FooterKey

from outpost_tui.ui.app import OutpostApp
from outpost_tui.ui.screens.confirm import ConfirmScreen
from outpost_tui.ui.widgets.candidate_panel import CandidatePanel
from tests.conftest import make_repo
from tests.ui.support import prepared, until
from tests.ui.test_operator_fixes import fake, race_file

pytestmark = pytest.mark.anyio
SIZE = (120, 40)


def summary(screen) -> str:
    return str(screen.query_one("#summary", Static).render())


def said(app) -> list[str]:
    return [n.message for n in app._notifications]


def footer_words(screen) -> set[str]:
    return {key.description for key in screen.query_one(Footer).query(FooterKey)}


async def test_a_hand_picked_winner_is_announced_marked_and_still_reads_as_the_winner(tmp_path):
    repo = make_repo(tmp_path / "repo")
    done = tmp_path / "keep-done"
    path = race_file(
        tmp_path,
        repo,
        [
            ("keep", fake("--write", "k.txt", "--commit", "--touch", str(done), "--hang")),
            ("other", fake("--pidfile", str(tmp_path / "other.pid"), "--hang")),
        ],
        tables="\n[budget]\nattempts = 4\n",
    )
    app = OutpostApp(path, start=True, testing=True)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        screen = app.screen
        await until(pilot, lambda: done.exists() and (tmp_path / "other.pid").exists(), "both agents")
        await until(pilot, lambda: "leader" in summary(screen), "the leader")
        head = summary(screen)
        assert head.startswith("racing ") and "attempts 2/4 " in head and "█" in head
        await until(pilot, lambda: {"Cancel", "Accept", "Abort"} <= footer_words(screen), "the racing keys")

        await pilot.press("1", "a")
        await until(pilot, lambda: isinstance(app.screen, ConfirmScreen), "the confirmation")
        await pilot.press("y")
        await until(pilot, lambda: app.session.result, "the race to end")
        await until(
            pilot,
            lambda: "accepted by operator" in str(screen.query_one("#panel-keep .reason", Static).render()),
            "the accepted line",
        )
        assert any(m == "keep won (accepted by operator)" for m in said(app)), said(app)
        assert any(m.startswith("race winner: keep won") for m in said(app))

        panel = screen.query_one("#panel-keep", CandidatePanel)
        assert screen.focused is panel
        # the screen restyles on its timer: each of these is waited for, not assumed one frame on
        await until(pilot, lambda: panel.has_class("-winner"), "the winner's class")
        winner_colour = Color.parse(app.theme_variables["status-winner"])
        # focused, and still the winner's colour
        await until(pilot, lambda: panel.styles.border_top[1].rgb == winner_colour.rgb, "the winner's colour")
        await until(pilot, lambda: "Results" in footer_words(screen), "the footer after the end")
        assert not {"Cancel", "Accept", "Abort", "Start"} & footer_words(screen)
        await until(pilot, lambda: "took" in summary(screen), "the race's duration")


async def test_quota_and_budget_are_announced_with_when_the_quota_resets(tmp_path):
    repo = make_repo(tmp_path / "repo")
    path = race_file(
        tmp_path,
        repo,
        [
            ("limited", fake("--quota", "usage limit reached", "--reset-at", "2030-01-01T00:00:00Z")),
            # spends past the budget only once the race has seen `limited` hit its quota
            ("spender", fake("--wait-file", str(tmp_path / "go"), "--usage", "0", "0", "0", "500", "--hang")),
        ],
        tables="\n[budget]\ntokens = { output = 100 }\n",
    )
    app = OutpostApp(path, start=True, testing=True)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await prepared(pilot)
        await until(pilot, lambda: app.session.model.candidates["limited"].state == "quota", "the quota")
        (tmp_path / "go").touch()
        await until(pilot, lambda: app.session.result, "the race")
        await until(pilot, lambda: any("budget" in m for m in said(app)), "the budget notification")
        messages = said(app)
        assert any(
            m.startswith("limited hit its quota") and "resets 2030-01-01T00:00:00Z" in m for m in messages
        ), messages
        assert any("token budget exhausted: output" in m for m in messages), messages


async def test_search_highlights_the_matches_and_says_a_filter_is_on(tmp_path):
    repo = make_repo(tmp_path / "repo")
    path = race_file(tmp_path, repo, [("a", fake("--lines", "30"))])
    app = OutpostApp(path, start=True, testing=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.session.result, "the race")
        panel = app.screen.query_one(CandidatePanel)
        log = panel.query_one(Log)
        await until(pilot, lambda: len(log.lines) > 30, "the log")
        await pilot.press("1", "slash", *"LINE 2", "enter")
        assert log.lines and all("line 2" in line for line in log.lines)
        assert panel.has_class("-filtered") and "filter 'LINE 2': 11 line(s)" in str(panel.border_subtitle)
        marked = log.highlighter(Text("log line 21"))
        assert [(span.start, span.end) for span in marked.spans] == [(4, 10)]  # "line 2", any case
        await pilot.press("slash", "escape")
        assert not panel.has_class("-filtered") and not panel.border_subtitle and not log.highlight
