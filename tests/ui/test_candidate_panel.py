"""A candidate's panel over real races of fake agents: its own budget, how its agent ended, and
why a candidate that never started was skipped."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from textual.geometry import Region
from textual.widgets import Log, Static

from outpost_tui.ui.app import OutpostApp
from outpost_tui.ui.screens.confirm import ConfirmScreen
from outpost_tui.ui.widgets.candidate_panel import CandidatePanel, PanelFigures, duration, tokens
from tests.agents.replay import path_with, write_fake
from tests.conftest import FAKE_AGENT
from tests.ui.support import until

pytestmark = pytest.mark.anyio
SIZE = (120, 36)


def race_file(
    tmp_path: Path, repo: Path, candidates: list[tuple[str, list[str]]], *, budget: str = "", race: str = ""
) -> Path:
    text = f'[race]\nname = "ui"\nrepository = "{repo}"\n{race}\n[validate]\ncommand = ["true"]\n'
    if budget:
        text += f"\n[budget]\n{budget}\n"
    for key, argv in candidates:
        text += (
            f'\n[[candidates]]\nkey = "{key}"\nagent = "command"\nbrief = "b"\ncommand = {json.dumps(argv)}\n'
        )
    path = tmp_path / "race.toml"
    path.write_text(text)
    return path


def fake(*flags: str) -> list[str]:
    return [sys.executable, str(FAKE_AGENT), *flags]


def line(panel: CandidatePanel, name: str) -> str:
    return panel.line(name)


async def abort(pilot, app: OutpostApp) -> None:
    await pilot.press("x")
    assert isinstance(app.screen, ConfirmScreen)
    await pilot.press("y")
    await until(pilot, lambda: app.session.result, "the race to stop")


def test_figures_are_short():
    assert [tokens(n) for n in (950, 1000, 12_300, 200_000, 999_999, 1_500_000)] == [
        "950",
        "1k",
        "12.3k",
        "200k",
        "1M",
        "1.5M",
    ]
    assert [duration(s) for s in (0, 41.7, 60, 130, 900, 4800)] == [
        "0s",
        "41s",
        "1m",
        "2m10s",
        "15m",
        "1h20m",
    ]


async def test_a_running_candidate_shows_its_time_tokens_and_cost_against_the_limits(repo, tmp_path):
    ready = [tmp_path / f"ready-{n}" for n in range(4)]
    path = race_file(
        tmp_path,
        repo,
        [
            (
                "spender",
                fake(
                    "--usage",
                    "1000",
                    "500",
                    "0",
                    "12300",
                    "--cost",
                    "0.25",
                    "--ready",
                    str(ready[0]),
                    "--hang",
                ),
            ),
            # Four panels at 120x36, every token field limited: the longest lines the panel can get.
            *[(f"idle{n}", fake("--ready", str(ready[n]), "--hang")) for n in (1, 2, 3)],
        ],
        budget="candidate_timeout = 900\ncost_usd = 5.0\n"
        "tokens = { output = 200000, input = 1000000, cached = 2000000, cache_write = 500000 }",
        race="concurrency = 4\n",
    )
    app = OutpostApp(path, start=True, testing=True)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        spender = screen.query_one("#panel-spender", CandidatePanel)
        await until(
            pilot,
            lambda: all(r.exists() for r in ready) and "12.3k" in line(spender, "tokens"),
            "every agent to run and its usage to show",
        )
        assert line(spender, "tokens") == (
            "out 12.3k of 200k race  in 1k of 1M race  cached 500 of 2M race  written 0 of 500k race"
        )
        assert line(spender, "cost").startswith("$0.2500 of $5.00 race  · ")
        assert re.fullmatch(r"time \d+s / 15m  █*░+", line(spender, "time")), line(spender, "time")
        assert line(spender, "state").startswith("running  attempt 1")
        # The clock moves on its own while the agent runs, with no new event to redraw it.
        first = app.session.model.candidates["spender"].agent_started_at
        for panel in screen.query(CandidatePanel):
            panel.clock = lambda: first + 130
        await until(pilot, lambda: line(spender, "time").startswith("time 2m10s / 15m  ███░"), "the clock")
        # Truncated, never wrapped: one row each, even when the text is wider than the panel.
        for panel in screen.query(CandidatePanel):
            figures = panel.query_one(PanelFigures)
            rows = [strip.text for strip in figures.render_lines(Region(0, 0, *figures.size))]
            assert [row.split()[0] for row in rows] == [
                line(panel, name).split()[0] for name in ("state", "time", "tokens", "cost")
            ], panel.key
        figures = spender.query_one(PanelFigures)
        assert len(line(spender, "tokens")) > figures.size.width
        assert figures.render_lines(Region(0, 2, figures.size.width, 1))[0].text.rstrip().endswith("…")
        assert line(screen.query_one("#panel-idle1", CandidatePanel), "tokens").startswith(
            "out 0 of 200k race"
        )
        await abort(pilot, app)


async def test_without_limits_a_panel_shows_just_the_figures(repo, tmp_path):
    ready = tmp_path / "ready"
    path = race_file(
        tmp_path,
        repo,
        [
            (
                "a",
                fake(
                    "--usage", "1000", "500", "0", "12300", "--cost", "0.25", "--ready", str(ready), "--hang"
                ),
            )
        ],
    )
    app = OutpostApp(path, start=True, testing=True)
    async with app.run_test(size=SIZE) as pilot:
        panel = app.screen.query_one(CandidatePanel)
        await until(pilot, lambda: ready.exists() and "12.3k" in line(panel, "tokens"), "the usage")
        assert line(panel, "tokens") == "out 12.3k  in 1k  cached 500"
        assert line(panel, "cost").startswith("$0.2500  · ")
        assert re.fullmatch(r"time \d+s", line(panel, "time")), line(panel, "time")
        await abort(pilot, app)


async def test_a_zoomed_panel_shows_how_the_agent_ended_and_its_final_message(repo, tmp_path):
    program = (
        "import json, sys; sys.stdin.read(); "
        "print(json.dumps({'kind': 'text',"
        " 'text': 'Could not fix it.\\nThe tests need a database.'})); "
        "sys.exit(3)"
    )
    path = race_file(
        tmp_path, repo, [("quitter", [sys.executable, "-c", program])], budget="candidate_timeout = 600"
    )
    app = OutpostApp(path, start=True, testing=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.session.result, "the race to finish")
        panel = app.screen.query_one(CandidatePanel)
        await until(pilot, lambda: panel.has_class("-failed"), "the next redraw")
        await pilot.press("1", "enter")
        assert app.screen.maximized is panel
        shown = list(panel.query_one(Log).lines)
        ended = next(i for i, text in enumerate(shown) if text.startswith("── agent ended"))
        assert shown[ended].startswith("── agent ended (exit 3: agent exited with code 3")
        assert shown[ended + 1 : ended + 3] == ["   Could not fix it.", "   The tests need a database."]
        assert shown[-1].startswith("── failed: agent exited with code 3")
        assert any(
            text.startswith("── attempt 1: agent started (") and "timeout 600s" in text
            for text in shown[:ended]
        )
        assert line(panel, "state").startswith("FAILED")
        # The agent's clock stopped when it exited: the panel no longer counts.
        assert re.fullmatch(r"time \d+s / 10m  ░+", line(panel, "time")), line(panel, "time")
        # Every line of the log fits in the zoomed panel: none was cut off by the redraw.
        assert panel.query_one(Log).size.height >= len(shown)


async def test_a_skipped_candidate_shows_why_it_never_started(repo, tmp_path):
    path = race_file(
        tmp_path,
        repo,
        [
            ("first", fake("--write", "fix.txt", "--content", "fixed\n", "--commit")),
            ("second", fake("--hang")),
        ],
        race="concurrency = 1\n",
        budget="candidate_timeout = 60",
    )
    app = OutpostApp(path, start=True, testing=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.session.result, "the race to finish")
        panel = app.screen.query_one("#panel-second", CandidatePanel)
        await until(pilot, lambda: panel.has_class("-skipped"), "the next redraw")
        reason = panel.query_one(".reason", Static)
        assert str(reason.render()) == "not started: first won"
        assert reason.display and reason.size.height == 1
        assert line(panel, "state") == "SKIPPED"
        assert line(panel, "time") == "time –"  # it never ran, so no clock and no limit
        assert list(panel.query_one(Log).lines) == ["── skipped: not started: first won"]
        # A candidate with nothing to explain spends no row on an empty reason.
        assert not app.screen.query_one("#panel-first", CandidatePanel).query_one(".reason").display


async def test_a_commit_made_on_its_behalf_and_an_unknown_cost_are_shown(repo, tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    write_fake(
        bin_dir,
        "codex",
        record=tmp_path / "codex.json",
        transcript_name="codex_fix.jsonl",
        edits={"fix.txt": "fixed\n"},
    )
    monkeypatch.setenv("PATH", path_with(bin_dir))
    path = tmp_path / "race.toml"
    path.write_text(
        f'[race]\nrepository = "{repo}"\nbrief = "Fix it."\nselect = "best"\n'
        '[validate]\ncommand = ["true"]\n[score]\ncommand = ["echo", "1"]\n'
        '[[candidates]]\nkey = "known"\nagent = "codex"\n'
        '[[candidates]]\nkey = "mystery"\nagent = "codex"\nmodel = "mystery-model-1"\n'
    )
    app = OutpostApp(path, start=True, testing=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.session.result, "the race to finish")
        known = app.screen.query_one("#panel-known", CandidatePanel)
        mystery = app.screen.query_one("#panel-mystery", CandidatePanel)
        await until(pilot, lambda: known.has_class("-winner"), "the next redraw")
        assert line(known, "reason").startswith("committed on its behalf: codex (known): Fix it.")
        assert any(
            text.startswith("── committed on its behalf (it could not commit in its sandbox): ")
            for text in known.query_one(Log).lines
        )
        # Priced by its family (estimated, "~"); a model nothing prices is "cost unknown", not $0.
        assert re.match(r"\$0\.\d{4}~  · ", line(known, "cost")), line(known, "cost")
        assert line(mystery, "cost").startswith("cost unknown~  · ")


async def test_graded_panels_show_test_counts_and_the_gates_reason(tmp_path, monkeypatch):
    """The sample race: breaker's panel says how many tests ran and which baseline test it broke;
    the winner's says its counts."""
    from outpost_tui.samples import materialise

    monkeypatch.setenv("OUTPOST_DEMO_PACE", "0.3")
    app = OutpostApp(materialise("race", tmp_path / "demo"), start=True, testing=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.session.result, "the race")
        screen = app.screen
        breaker = screen.query_one("#panel-breaker", CandidatePanel)
        fixer = screen.query_one("#panel-fixer", CandidatePanel)
        await until(pilot, lambda: "tests 9 ran" in line(breaker, "reason"), "the redraw")
        assert line(breaker, "reason").startswith(
            "tests 9 ran: 8 passed, 1 failed, 0 skipped · 1 test(s) that passed on the baseline fail"
        )
        assert line(fixer, "reason").startswith("tests 9 ran: 9 passed, 0 failed, 0 skipped")
