"""The configure screen edits a real race file: what it saves is what load_race reads back."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest
from textual.app import App
from textual.widgets import DataTable, Input, Select, Static, TextArea

from outpost_tui.engine.racefile import load_race
from outpost_tui.samples import materialise
from outpost_tui.ui.screens.configure import BudgetForm, CandidateForm, ConfigureScreen
from outpost_tui.ui.screens.confirm import ConfirmScreen


class Host(App):
    def __init__(self, race_file: Path) -> None:
        super().__init__()
        self.race_file = race_file
        self.messages: list[object] = []
        self.results: list[object] = []

    def on_mount(self) -> None:
        self.push_screen(ConfigureScreen(load_race(self.race_file), self.race_file), self.results.append)

    def on_configure_screen_start_requested(self, message: ConfigureScreen.StartRequested) -> None:
        self.messages.append(message)

    def on_configure_screen_saved(self, message: ConfigureScreen.Saved) -> None:
        self.messages.append(message)


@pytest.fixture
def race_file(tmp_path) -> Path:
    return materialise("race", tmp_path / "sample")


async def until(pilot, condition, seconds: float = 20.0) -> None:
    """Let the app run until condition() holds (saving runs git in a thread)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await pilot.pause(0.01)


async def type_into(pilot, widget: Input, text: str) -> None:
    widget.focus()
    widget.value = ""
    await pilot.press(*text)


def status(app: App) -> Static:
    return app.screen.query_one("#configure-status", Static)


def saved(app: Host) -> list[ConfigureScreen.Saved]:
    return [message for message in app.messages if isinstance(message, ConfigureScreen.Saved)]


@pytest.mark.anyio
async def test_edit_a_candidates_model_and_the_budget_then_save(race_file):
    app = Host(race_file)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        table = app.screen.query_one("#candidates", DataTable)
        assert [str(table.get_row_at(row)[0]) for row in range(3)] == ["fixer", "breaker", "slow"]

        await pilot.press("down", "e")  # the second candidate: breaker
        assert isinstance(app.screen, CandidateForm)
        await type_into(pilot, app.screen.query_one("#model", Input), "opus-4")
        await pilot.press("ctrl+s")
        assert isinstance(app.screen, ConfigureScreen)
        assert str(table.get_row_at(1)[2]) == "opus-4"
        assert "unsaved" in str(status(app).render())

        await pilot.press("b")
        assert isinstance(app.screen, BudgetForm)
        await type_into(pilot, app.screen.query_one("#attempts", Input), "7")
        await type_into(pilot, app.screen.query_one("#output", Input), "50000")
        await type_into(pilot, app.screen.query_one("#cost_usd", Input), "1.25")
        await pilot.press("enter")
        assert isinstance(app.screen, ConfigureScreen)

        await pilot.press("ctrl+s")
        await until(pilot, lambda: saved(app))

    spec = load_race(race_file)
    assert spec.candidate("breaker").model == "opus-4"
    assert spec.candidate("fixer").model is None
    assert (spec.budget.attempts, spec.budget.tokens.output, spec.budget.cost_usd) == (7, 50000, 1.25)
    assert spec.budget.candidate_timeout == 120  # untouched fields keep their values
    # Paths stay relative to the race file, so the sample directory can still move.
    text = race_file.read_text()
    assert 'repository = "project"' in text and 'script = "scripts/breaker.toml"' in text
    assert saved(app)[0].spec == spec
    assert app.results == []  # saving does not leave the screen


@pytest.mark.anyio
async def test_an_invalid_or_duplicate_key_is_shown_and_nothing_is_saved(race_file):
    before = race_file.read_bytes()
    app = Host(race_file)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("e")
        form = app.screen
        key = form.query_one("#key", Input)
        error = form.query_one("#key-error", Static)
        assert not error.display

        await type_into(pilot, key, "bad key!")
        await pilot.press("ctrl+s")
        assert app.screen is form
        assert error.display and "invalid key 'bad key!'" in str(error.render())
        assert app.screen.focused is key

        await type_into(pilot, key, "slow")
        await pilot.press("ctrl+s")
        assert app.screen is form
        assert "another candidate already has the key 'slow'" in str(error.render())

        await pilot.press("escape")
        assert isinstance(app.screen, ConfigureScreen)
        assert "unsaved" not in str(status(app).render())
        await pilot.press("ctrl+s")
        assert str(status(app).render()) == "no changes to save"
    assert saved(app) == []
    assert race_file.read_bytes() == before


@pytest.mark.anyio
async def test_budget_errors_are_inline_and_keep_the_form_open(race_file):
    app = Host(race_file)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("b")
        form = app.screen
        await type_into(pilot, form.query_one("#attempts", Input), "-1")
        await type_into(pilot, form.query_one("#cost_usd", Input), "lots")
        await type_into(pilot, form.query_one("#candidate_timeout", Input), "0")
        await pilot.press("ctrl+s")
        assert app.screen is form
        errors = {field: str(form.query_one(f"#{field}-error", Static).render())
                  for field in ("attempts", "output", "cost_usd", "candidate_timeout")}
        # `check`'s own words: the form and the race file share one set of rules
        assert errors == {"attempts": "must be at least 1, found -1", "output": "",
                          "cost_usd": 'expected a number, found a string ("lots")',
                          "candidate_timeout": "must be greater than 0, found 0"}
        assert form.focused is form.query_one("#attempts", Input)

        await type_into(pilot, form.query_one("#attempts", Input), "1")
        await type_into(pilot, form.query_one("#cost_usd", Input), "")
        await type_into(pilot, form.query_one("#candidate_timeout", Input), "")
        await pilot.press("ctrl+s")
        assert isinstance(app.screen, ConfigureScreen)
        assert app.screen.budget.attempts == 1 and app.screen.budget.cost_usd is None
        assert app.screen.budget.tokens.output == 200000


@pytest.mark.anyio
async def test_add_a_command_candidate_remove_one_and_start(race_file):
    app = Host(race_file)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("n")
        form = app.screen
        assert isinstance(form, CandidateForm)
        assert not form.query_one("#command-field").display
        await type_into(pilot, form.query_one("#key", Input), "mine")
        form.query_one("#agent", Select).value = "command"
        await pilot.pause()
        assert form.query_one("#command-field").display and not form.query_one("#script-field").display
        # Long text is set rather than typed: typing is a pilot round trip per character.
        form.query_one("#command", Input).value = "python3 agent.py --note 'two words'"
        form.query_one("#brief", TextArea).focus()
        await pilot.press(*"fix add")
        await pilot.press("ctrl+s")
        assert isinstance(app.screen, ConfigureScreen)

        await pilot.press("ctrl+home")  # fixer
        await pilot.press("delete")
        assert isinstance(app.screen, ConfirmScreen)
        assert app.screen.question == "Remove candidate fixer from the race?"
        await pilot.press("y")
        table = app.screen.query_one("#candidates", DataTable)
        assert [str(table.get_row_at(row)[0]) for row in range(table.row_count)] == \
            ["breaker", "slow", "mine"]

        await pilot.press("s")  # unsaved changes: save, then start
        await until(pilot, lambda: app.results)

    starts = [message for message in app.messages if isinstance(message, ConfigureScreen.StartRequested)]
    assert len(starts) == 1
    spec = starts[0].spec
    assert [candidate.key for candidate in spec.candidates] == ["breaker", "slow", "mine"]
    assert spec.candidate("mine").command == ("python3", "agent.py", "--note", "two words")
    assert spec.candidate("mine").brief == "fix add"
    assert app.results == [spec]
    assert load_race(race_file) == spec


@pytest.mark.anyio
async def test_start_without_changes_sends_the_spec_as_loaded(race_file):
    before = race_file.read_bytes()
    app = Host(race_file)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("s")
        await until(pilot, lambda: app.results)
    assert [type(message) for message in app.messages] == [ConfigureScreen.StartRequested]
    assert app.messages[0].spec == load_race(race_file)
    assert race_file.read_bytes() == before  # nothing to save, nothing written


@pytest.mark.anyio
async def test_a_file_that_does_not_read_back_is_restored_and_the_error_shown(race_file):
    before = race_file.read_bytes()
    app = Host(race_file)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("e")
        await type_into(pilot, app.screen.query_one("#model", Input), "other")
        await pilot.press("enter")
        # The repository goes away after the race was opened: the saved file would not load.
        shutil.rmtree(race_file.parent / "project" / ".git")
        await pilot.press("ctrl+s")
        await until(pilot, lambda: status(app).has_class("error"))
        text = str(status(app).render())
        assert text.startswith("not saved (the file is unchanged): ")
        assert "race.repository" in text and "not a git repository" in text
        assert race_file.read_bytes() == before
        assert saved(app) == []
        assert app.screen.dirty  # the edit is still there to save once the problem is fixed
    assert sorted(path.name for path in race_file.parent.iterdir()) == ["project", "race.toml", "scripts"]


@pytest.mark.anyio
async def test_removing_every_candidate_cannot_be_saved_and_escape_asks_before_discarding(race_file):
    before = race_file.read_bytes()
    app = Host(race_file)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        for _ in range(3):
            await pilot.press("delete", "y")
        await pilot.press("ctrl+s")
        await until(pilot, lambda: status(app).has_class("error"))
        assert "no candidates" in str(status(app).render())

        await pilot.press("escape")
        assert isinstance(app.screen, ConfirmScreen)
        await pilot.press("n")
        assert isinstance(app.screen, ConfigureScreen)
        await pilot.press("escape", "y")
        await until(pilot, lambda: app.results)
    assert app.results == [None]
    assert race_file.read_bytes() == before


@pytest.mark.anyio
async def test_the_races_setup_is_shown_and_kept_when_saving(race_file):
    text = race_file.read_text()
    race_file.write_text(text.replace("[[candidates]]", '[setup]\ncommand = ["sh", "-c", "true"]\n'
                                      'copy = [".env"]\nports = 2\n\n[[candidates]]', 1))
    before = load_race(race_file).setup
    assert before.ports == 2
    app = Host(race_file)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        summary = str(app.screen.query_one("#race-summary", Static).render())
        assert "Setup sh -c true (timeout 600s); copy .env; 2 port(s) each" in summary
        await pilot.press("down", "e")
        await type_into(pilot, app.screen.query_one("#model", Input), "opus-4")
        await pilot.press("ctrl+s")
        await pilot.press("ctrl+s")
        await until(pilot, lambda: saved(app))
    after = load_race(race_file)
    assert after.setup == before
    assert after.candidate("breaker").model == "opus-4"
