"""The race screen driven by Pilot over real races of scripted agents (real git, real processes)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import psutil
import pytest
from textual.widgets import Log

from outpost_tui.samples import materialise
from outpost_tui.ui.app import OutpostApp
from outpost_tui.ui.screens.confirm import ConfirmScreen
from outpost_tui.ui.screens.race import RaceScreen
from outpost_tui.ui.widgets.candidate_panel import CandidatePanel
from tests.conftest import FAKE_AGENT
from tests.ui.support import prepared, until

pytestmark = pytest.mark.anyio
SIZE = (120, 40)


def fake_race(
    tmp_path: Path, repo: Path, candidates: list[tuple[str, list[str]]], validate: str = '["true"]'
) -> Path:
    text = f'[race]\nname = "ui"\nrepository = "{repo}"\n\n[validate]\ncommand = {validate}\n'
    for key, flags in candidates:
        argv = json.dumps([sys.executable, str(FAKE_AGENT), *flags])
        text += f'\n[[candidates]]\nkey = "{key}"\nagent = "command"\nbrief = "b"\ncommand = {argv}\n'
    path = tmp_path / "race.toml"
    path.write_text(text)
    return path


@pytest.fixture(autouse=True)
def quick_demo(monkeypatch):
    monkeypatch.setenv("OUTPOST_DEMO_PACE", "0")


async def test_sample_race_runs_live_and_shows_the_winner(tmp_path, monkeypatch):
    monkeypatch.setenv("OUTPOST_DEMO_PACE", "0.3")  # breaker must finish (and fail) before fixer wins
    race_file = materialise("race", tmp_path / "demo")
    app = OutpostApp(race_file, start=True, testing=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.session and app.session.result, "the race to finish")
        screen = app.screen
        await until(pilot, lambda: screen.query_one("#panel-fixer").has_class("-winner"), "the next redraw")
        assert isinstance(screen, RaceScreen)
        panels = {p.key: p for p in screen.query(CandidatePanel)}
        assert set(panels) == {"fixer", "breaker", "slow"}
        assert panels["fixer"].has_class("-winner")
        assert panels["breaker"].has_class("-rejected")
        assert panels["slow"].has_class("-cancelled")
        fixer_log = "\n".join(panels["fixer"].query_one(Log).lines)
        assert "validation passed" in fixer_log
        summary = str(screen.query_one("#summary").render())
        assert "winner fixer" in summary and "integration clean" in summary


async def test_ready_until_s_then_keys_focus_zoom_and_back(tmp_path):
    race_file = materialise("race", tmp_path / "demo")
    app = OutpostApp(race_file, testing=True)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, RaceScreen)
        await prepared(pilot)
        assert not app.session.started
        assert "ready" in str(screen.query_one("#summary").render())
        await pilot.press("2")
        assert screen.focused_key() == "breaker"
        await pilot.press("enter")
        assert screen.maximized is screen.query_one("#panel-breaker")
        await pilot.press("escape")
        assert screen.maximized is None
        await pilot.press("tab")
        assert screen.focused_key() == "slow"
        await pilot.press("s")
        await until(pilot, lambda: app.session.result, "the race to finish")
        assert app.session.result.status.value == "winner"  # at pace 0 any correct fixer may win


async def test_cancel_accept_and_confirmation_keys(repo, tmp_path):
    race_file = fake_race(
        tmp_path,
        repo,
        [
            ("keep", ["--write", "k.txt", "--commit", "--touch", str(tmp_path / "keep-done"), "--hang"]),
            ("drop", ["--pidfile", str(tmp_path / "drop.pid"), "--hang"]),
        ],
        validate='["false"]',
    )
    app = OutpostApp(race_file, start=True, testing=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(
            pilot,
            lambda: (tmp_path / "drop.pid").exists() and (tmp_path / "keep-done").exists(),
            "both agents to run",
        )
        await pilot.press("2", "c")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")  # refused: nothing happens
        assert app.session.model.candidates["drop"].state == "running"
        await pilot.press("c", "y")
        await until(pilot, lambda: app.session.model.candidates["drop"].state == "cancelled", "the cancel")
        await pilot.press("1", "a", "enter")
        await until(pilot, lambda: app.session.result, "the race to finish")
        result = app.session.result
        assert result.winner.key == "keep" and result.winner.decided_by == "operator"
        assert result.candidates[1].error == "cancelled by operator"
    assert not psutil.pid_exists(int((tmp_path / "drop.pid").read_text().split()[0]))


async def test_abort_and_quit_while_running_leaves_no_process(repo, tmp_path):
    race_file = fake_race(
        tmp_path, repo, [("hang", ["--pidfile", str(tmp_path / "p"), "--spawn-child", "--hang"])]
    )
    app = OutpostApp(race_file, start=True, testing=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: (tmp_path / "p").exists(), "the agent to start")
        await pilot.press("ctrl+q")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await until(pilot, lambda: app.session.result, "the race to stop")
        assert app.session.result.status.value == "aborted"
    for pid in (int(p) for p in (tmp_path / "p").read_text().split()):
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


async def test_search_filters_the_focused_log_and_diff_shows_the_change(repo, tmp_path):
    race_file = fake_race(
        tmp_path, repo, [("a", ["--lines", "30", "--write", "fix.txt", "--content", "fixed\n", "--commit"])]
    )
    app = OutpostApp(race_file, start=True, testing=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.session.result, "the race")
        panel = app.screen.query_one(CandidatePanel)
        await until(pilot, lambda: len(panel.query_one(Log).lines) > 30, "the log to be drawn")
        await pilot.press("1", "slash", *"line 2", "enter")
        shown = panel.query_one(Log).lines
        assert shown and all("line 2" in line for line in shown)
        assert len(shown) == 11  # "log line 2" and "log line 20".."29"
        await pilot.press("slash", "escape")
        assert len(panel.query_one(Log).lines) > 30
        await pilot.press("d")
        await until(pilot, lambda: app.screen.__class__.__name__ == "DiffScreen", "the diff screen")
        from textual.widgets import RichLog

        await until(pilot, lambda: len(app.screen.query_one(RichLog).lines) > 3, "the diff")
        text = "\n".join(line.text for line in app.screen.query_one(RichLog).lines)
        assert "+fixed" in text and "fix.txt" in text
        await pilot.press("escape")
        assert isinstance(app.screen, RaceScreen)


async def test_a_bad_race_file_is_one_notification_not_a_crash(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[race]\nrepository = '.'\nconcurency = 2\n")
    app = OutpostApp(bad, testing=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.screen.__class__.__name__ == "HomeScreen"
        messages = [n.message for n in app._notifications]
        assert any("bad.toml" in m and "concurency" in m for m in messages)


async def test_a_user_keymap_rebinds_a_key_by_its_id(repo, tmp_path, monkeypatch):
    config = tmp_path / "config"
    config.mkdir()
    (config / "keymap.toml").write_text('[keys]\n"race.cancel" = "k"\n')
    monkeypatch.setenv("OUTPOST_TUI_CONFIG_DIR", str(config))
    race_file = fake_race(tmp_path, repo, [("hang", ["--pidfile", str(tmp_path / "p"), "--hang"])])
    app = OutpostApp(race_file, start=True, testing=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: (tmp_path / "p").exists(), "the agent to start")
        await pilot.press("c")
        assert not isinstance(app.screen, ConfirmScreen)  # c no longer cancels
        await pilot.press("k")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("y")
        await until(pilot, lambda: app.session.result, "the race to end")
        assert app.session.result.candidates[0].error == "cancelled by operator"
        titles = [title for title, _, _ in app.palette_commands()]
        assert "Show worktrees" in titles and any(t.startswith("Switch theme: outpost-") for t in titles)


async def test_quitting_a_durable_race_leaves_it_resumable(repo, tmp_path):
    """Quitting is the coordinator going away: the durable run is stopped, not finished, and the
    next step is a replay."""
    from outpost_tui.engine.durable import recovery

    race_file = fake_race(tmp_path, repo, [("hang", ["--pidfile", str(tmp_path / "p"), "--hang"])])
    race_file.write_text(
        race_file.read_text().replace("[race]\n", '[race]\nrun_id = "ui-durable"\n')
        + '\n[durability]\nenabled = true\nversion = "1"\n'
    )
    app = OutpostApp(race_file, start=True, testing=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: (tmp_path / "p").exists(), "the agent to start")
        await pilot.press("ctrl+q")
        assert isinstance(app.screen, ConfirmScreen)
        assert "recover ui-durable --replay" in app.screen.question
        await pilot.press("y")
        await until(pilot, lambda: app.session.result, "the race to stop")
    view = recovery.inspect(repo, "ui-durable")
    assert view.owner is None and view.status == "interrupted"
    for pid in (int(p) for p in (tmp_path / "p").read_text().split()):
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
