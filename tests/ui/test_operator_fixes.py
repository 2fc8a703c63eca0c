"""What an operator met that was wrong: each test drives the app over real races (real git, real
processes) and fails on the behaviour it describes."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from textual.widgets import Footer, Input, Log, Static
from textual.widgets._footer import FooterKey

from outpost_tui.samples import materialise
from outpost_tui.ui.app import OutpostApp
from outpost_tui.ui.screens.configure import ConfigureScreen
from outpost_tui.ui.screens.confirm import ConfirmScreen
from outpost_tui.ui.screens.race import RaceScreen
from outpost_tui.ui.screens.settings_form import SettingsForm
from outpost_tui.ui.widgets.candidate_panel import CandidatePanel
from tests.conftest import FAKE_AGENT, make_repo
from tests.ui.support import until

pytestmark = pytest.mark.anyio


@pytest.fixture(autouse=True)
def quick_demo(monkeypatch):
    monkeypatch.setenv("OUTPOST_DEMO_PACE", "0")


def summary(screen) -> str:
    return str(screen.query_one("#summary", Static).render())


def race_file(
    tmp_path: Path,
    repo: Path,
    candidates: list[tuple[str, list[str]]],
    *,
    validate: str = '["true"]',
    extra: str = "",
    tables: str = "",
) -> Path:
    text = f'[race]\nname = "ui"\nrepository = "{repo}"\n{extra}\n[validate]\ncommand = {validate}\n{tables}'
    for key, argv in candidates:
        text += (
            f'\n[[candidates]]\nkey = "{key}"\nagent = "command"\nbrief = "b"\ncommand = {json.dumps(argv)}\n'
        )
    path = tmp_path / "race.toml"
    path.write_text(text)
    return path


def fake(*flags: str) -> list[str]:
    return [sys.executable, str(FAKE_AGENT), *flags]


# ------------------------------------------------------------------ configure, then back


async def test_saved_in_configure_then_back_the_race_runs_and_shows_the_saved_file(tmp_path):
    path = materialise("race", tmp_path / "demo")
    app = OutpostApp(path, testing=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("f5")
        assert isinstance(app.screen, ConfigureScreen)
        await pilot.press("down", "down", "delete", "y")  # remove `slow`
        await pilot.press("b")
        form = app.screen
        assert isinstance(form, SettingsForm)
        form.query_one("#attempts", Input).value = "5"
        await pilot.press("ctrl+s")
        await until(pilot, lambda: isinstance(app.screen, ConfigureScreen), "the budget form to close")
        configure = app.screen
        assert configure.dirty
        await pilot.press("ctrl+s")
        await until(pilot, lambda: not configure.dirty and not configure.saving, "the save")
        await pilot.press("escape")
        screen = app.screen
        assert isinstance(screen, RaceScreen)
        await until(
            pilot,
            lambda: not screen.rebuilding and set(screen._panels) == {"fixer", "breaker"},
            "the saved candidates",
        )
        assert "attempts 0/5" in summary(screen)
        await pilot.press("s")
        await until(pilot, lambda: app.session.result, "the race")
        assert [c.key for c in app.session.result.candidates] == ["fixer", "breaker"]
        assert app.session.spec.budget.attempts == 5


async def test_an_edit_made_elsewhere_before_the_start_is_what_runs(tmp_path):
    repo = make_repo(tmp_path / "repo")
    path = race_file(tmp_path, repo, [("a", fake()), ("b", fake())])
    app = OutpostApp(path, testing=True)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert set(screen._panels) == {"a", "b"}
        path.write_text(path.read_text().replace('key = "b"', 'key = "c"'))
        await pilot.press("s")
        await until(pilot, lambda: app.session.result, "the race")
        assert [c.key for c in app.session.result.candidates] == ["a", "c"]
        assert set(screen._panels) == {"a", "c"}


# ------------------------------------------------------------------------ logs follow


SCRIPT = (
    'for i in $(seq 80); do echo first $i; done; while [ ! -e "$1" ]; do sleep 0.02; done; '
    'for i in $(seq 80); do echo second $i; done; touch "$1.done"; sleep 300'
)


def at_end(log: Log) -> bool:
    return log.max_scroll_y > 0 and log.scroll_y == log.max_scroll_y


async def test_a_log_follows_through_zoom_and_resize_until_scrolled_up_and_again_at_the_end(tmp_path):
    repo = make_repo(tmp_path / "repo")
    go = tmp_path / "go"
    path = race_file(tmp_path, repo, [("a", ["sh", "-c", SCRIPT, "sh", str(go)]), ("b", fake("--hang"))])
    app = OutpostApp(path, start=True, testing=True)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        log = screen.query_one("#panel-a", CandidatePanel).query_one(Log)
        await until(pilot, lambda: any("first 80" in line for line in log.lines), "the first lines")
        await until(pilot, lambda: at_end(log), "the log to follow")
        await pilot.press("1", "enter")
        await pilot.pause()
        await pilot.press("escape")
        await until(pilot, lambda: at_end(log), "the log to follow after zoom and back")
        await pilot.resize_terminal(100, 30)
        await until(pilot, lambda: at_end(log), "the log to follow after a resize")

        log.scroll_to(y=0, animate=False)  # the user scrolls up: the log stays where they are
        await pilot.pause()
        go.touch()
        await until(pilot, lambda: any("second 80" in line for line in log.lines), "more lines")
        await pilot.pause()
        assert log.scroll_y == 0

        log.scroll_end(animate=False)  # back at the end: it follows again
        await pilot.resize_terminal(120, 40)
        await until(pilot, lambda: at_end(log), "the log to follow again")
        await pilot.press("x", "y")
        await until(pilot, lambda: app.session.result, "the abort")


# ------------------------------------------------------- the race's repository, not cwd


async def test_worktrees_and_recovery_opened_from_a_race_look_in_its_repository(tmp_path, monkeypatch):
    repo = make_repo(tmp_path / "repo")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # not a git repository
    path = race_file(tmp_path, repo, [("a", fake("--write", "a.txt", "--commit"))])
    app = OutpostApp(path, testing=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("f3")
        worktrees = app.screen
        assert worktrees.__class__.__name__ == "WorktreesScreen"
        assert Path(worktrees.repository).resolve() == repo.resolve()
        await pilot.press("escape")
        await pilot.press("f4")
        recovery = app.screen
        assert recovery.__class__.__name__ == "RecoveryScreen"
        assert recovery.repository == repo.resolve()


async def test_a_race_whose_durable_run_was_interrupted_says_so_and_f4_opens_the_wizard_on_it(tmp_path):
    from tests.engine.test_durable import RUN_ID, crash, gone, start, wait_for
    from tests.engine.test_durable import race_file as durable_race_file

    repo = make_repo(tmp_path / "repo")
    ready, pidfile = tmp_path / "ready", tmp_path / "a.pid"
    path = durable_race_file(
        tmp_path, repo, [("a", ["--ready", str(ready), "--pidfile", str(pidfile), "--hang-on-attempt", "1"])]
    )
    process = start(path)
    try:
        wait_for(lambda: ready.exists() and pidfile.exists(), "the agent to start", process, timeout=60)
        crash(process)  # the coordinator dies: the run is owned by a process that is gone
        app = OutpostApp(path, testing=True)
        async with app.run_test(size=(120, 40)) as pilot:
            screen = app.screen
            await until(pilot, lambda: screen.recovery_run == RUN_ID, "the interrupted run to be noticed")
            text = summary(screen)
            assert "needs recovery" in text and "ready: press s" not in text and "f4" in text
            await pilot.press("f4")
            wizard = app.screen
            assert wizard.__class__.__name__ == "RecoveryScreen" and wizard.run_id == RUN_ID
    finally:
        import os
        import signal

        agent = int(pidfile.read_text().split()[0]) if pidfile.exists() else None
        if agent is not None and not gone(agent):
            os.killpg(os.getpgid(agent), signal.SIGKILL)


# ------------------------------------------------------------- replays start from saved state


async def test_a_replay_shows_candidates_settled_before_the_crash_as_they_ended(tmp_path):
    from outpost_tui.engine.durable import recovery
    from tests.engine.test_durable import RUN_ID, crash, start, wait_for
    from tests.engine.test_durable import race_file as durable_race_file

    repo = make_repo(tmp_path / "repo")
    ready = tmp_path / "ready"
    # `quick` fails at once (rejected before the crash); `slow` hangs on attempt 1 and succeeds on 2.
    path = durable_race_file(
        tmp_path,
        repo,
        [
            ("quick", ["--exit", "3"]),
            (
                "slow",
                [
                    "--ready",
                    str(ready),
                    "--hang-on-attempt",
                    "1",
                    "--write",
                    "fix.txt",
                    "--content",
                    "good",
                    "--commit",
                ],
            ),
        ],
    )
    process = start(path)
    wait_for(
        lambda: ready.exists() and recovery.inspect(repo, RUN_ID).attempts[0]["phase"] == "settled",
        "quick to settle and slow to run",
        process,
        timeout=60,
    )
    crash(process)
    recovery.release(repo, RUN_ID, recovery.inspect(repo, RUN_ID).revision)
    spec = recovery.replay_spec(repo, RUN_ID)
    app = OutpostApp(testing=True, repository=repo)
    seen: list[str] = []
    async with app.run_test(size=(120, 40)) as pilot:
        app.start_race(spec, start=True)
        await until(pilot, lambda: app.session is not None and app.session.started, "the replay to start")

        def quick_state() -> str:
            state = app.session.model.candidates["quick"].state
            seen.append(state)
            return state

        await until(pilot, lambda: quick_state() != "waiting" or app.session.result, "quick's state")
        await until(pilot, lambda: app.session.result, "the replay")
        assert "waiting" not in seen
        assert app.session.model.candidates["quick"].state == "failed"
        assert app.session.result.winner.key == "slow"


# ------------------------------------------------------------------- shared rules


async def test_the_budget_form_refuses_what_check_refuses_in_its_words(tmp_path):
    path = materialise("race", tmp_path / "demo")
    app = OutpostApp(path, testing=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("f5", "b")
        form = app.screen
        assert isinstance(form, SettingsForm)
        attempts = form.query_one("#attempts", Input)
        attempts.focus()
        attempts.value = ""
        await pilot.press("0")
        error = form.query_one("#attempts-error", Static)
        # inline, as typed, before any submit: the race-file reader's own words
        await until(pilot, lambda: str(error.render()) != "", "the check")
        assert str(error.render()) == "must be at least 1, found 0: no candidate would ever start"
        await pilot.press("ctrl+s")
        await pilot.app.workers.wait_for_complete()
        assert app.screen is form
        attempts.value = "2"
        await until(pilot, lambda: str(error.render()) == "", "the check")
        await pilot.press("ctrl+s")
        await until(pilot, lambda: isinstance(app.screen, ConfigureScreen), "the form to close")
        assert app.screen.working.budget.attempts == 2


# ---------------------------------------------------------------- text said once, in full


async def test_outcomes_are_said_once(tmp_path, monkeypatch):
    monkeypatch.setenv("OUTPOST_DEMO_PACE", "0.3")  # breaker fails, fixer wins, slow is cancelled
    path = materialise("race", tmp_path / "demo")
    app = OutpostApp(path, start=True, testing=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await until(pilot, lambda: app.session.result, "the race")
        screen = app.screen
        await until(pilot, lambda: "winner fixer" in summary(screen), "the redraw")
        text = summary(screen)
        assert "winner  winner" not in text and "winner winner" not in text
        logs = {key: "\n".join(app.session.model.candidates[key].log) for key in ("breaker", "slow")}
        assert "cancelled: cancelled:" not in logs["slow"] and "another candidate won" in logs["slow"]
        assert "validation failed: validation failed" not in logs["breaker"]
        # the verdict's reason: which test the baseline passed and breaker's commit fails
        assert (
            "1 test(s) that passed on the baseline fail: "
            "tests.test_calc.DivideTest::test_dividing_by_zero_raises"
        ) in logs["breaker"]


async def test_a_long_question_is_shown_whole(tmp_path):
    question = (
        "Remove worktree /tmp/some/long/path/.outpost/workspaces/abcdef/fixer-1? "
        "Its branch outpost/speculation/20260101-000000-abcdef/fixer/1 is kept."
    )
    app = OutpostApp(testing=True, repository=tmp_path)
    async with app.run_test(size=(80, 24)) as pilot:
        app.push_screen(ConfirmScreen(question))
        await pilot.pause()
        shown = app.screen.query_one(".question", Static)
        assert shown.size.height >= 2  # wrapped, not cut
        screen_text = app.export_screenshot()
        assert "is kept." in screen_text.replace("&#160;", " ")


async def test_screenshot_without_a_downloads_directory_is_saved_and_says_where(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    app = OutpostApp(testing=True, repository=tmp_path)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        app.action_screenshot()
        await pilot.pause()
        saved = list(work.glob("*.svg"))
        assert len(saved) == 1 and saved[0].read_text().startswith("<svg")
        messages = [n.message for n in app._notifications]
        assert any(str(saved[0]) in message for message in messages)


# ------------------------------------------------------------------------------ 80x24


async def test_at_80x24_the_footer_keeps_quit_help_and_the_function_keys(tmp_path):
    path = materialise("race", tmp_path / "demo")
    app = OutpostApp(path, testing=True)
    async with app.run_test(size=(80, 24)) as pilot:
        footer = app.screen.query_one(Footer)

        def shown() -> set[str]:
            return {
                key.key
                for key in footer.query(FooterKey)
                if key.region.width and key.region.right <= 80 and key.region.y == 23
            }

        await until(pilot, lambda: "s" in shown() and "f5" in shown(), "the footer's keys")
        shown = shown()
        for wanted in ("ctrl+q", "question_mark", "f3", "f4", "f5", "s"):
            assert wanted in shown, (wanted, shown)
