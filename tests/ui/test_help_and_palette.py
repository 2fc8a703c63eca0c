"""The help screen lists the live keys of the screen below it; the palette lists the app's commands."""

from __future__ import annotations

import pytest
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.command import CommandList, CommandPalette
from textual.screen import Screen
from textual.widgets import DataTable, Input, Static

from outpost_tui.ui.commands import OutpostCommands, theme_commands
from outpost_tui.ui.keymap import CONFIG_DIR_VARIABLE
from outpost_tui.ui.screens.help import HelpScreen
from tests.ui.support import until


class Panels(Screen):
    BINDINGS = [
        Binding("c", "cancel", "Cancel", id="race.cancel"),
        Binding("x", "abort", "Abort", id="race.abort"),
        Binding("y,enter", "yes", "Yes", id="race.yes"),
        Binding("d", "diff", "Diff", id="race.diff"),
    ]

    def compose(self) -> ComposeResult:
        yield Static("panels")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # No candidate has a diff yet: the key is not offered.
        return action != "diff"


class Host(App):
    COMMANDS = {OutpostCommands}
    BINDINGS = [
        Binding("question_mark", "help", "Help", id="app.help"),
        Binding("ctrl+q", "quit", "Quit", id="app.quit", priority=True),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.called: list[str] = []
        self.candidates = ["fixer", "breaker"]

    def on_mount(self) -> None:
        self.push_screen(Panels())

    def action_help(self) -> None:
        self.push_screen(HelpScreen())

    def palette_commands(self):
        commands = [
            ("Start race", "calc-race, 2 candidates", lambda: self.called.append("start")),
            ("Abort race", "cancel every running candidate", lambda: self.called.append("abort")),
        ]
        for key in self.candidates:
            commands.append(
                (
                    f"Cancel candidate {key}",
                    "stop it now",
                    lambda key=key: self.called.append(f"cancel {key}"),
                )
            )
        commands += theme_commands(["outpost-dark", "outpost-light"], self.switch, current="outpost-dark")
        return commands

    def switch(self, name: str) -> None:
        self.called.append(f"theme {name}")


def rows(help_screen: HelpScreen) -> list[tuple[str, str, str]]:
    table = help_screen.query_one("#help-keys", DataTable)
    return [tuple(str(cell) for cell in table.get_row_at(index)) for index in range(table.row_count)]


@pytest.fixture(autouse=True)
def config(tmp_path, monkeypatch):
    monkeypatch.setenv(CONFIG_DIR_VARIABLE, str(tmp_path / "config"))


@pytest.mark.anyio
async def test_help_lists_the_keys_of_the_screen_below_and_the_app(tmp_path):
    app = Host()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        listed = rows(app.screen)
        assert listed[:3] == [
            ("c", "Cancel", "race.cancel"),
            ("x", "Abort", "race.abort"),
            ("y ⏎", "Yes", "race.yes"),
        ]
        assert ("?", "Help", "app.help") in listed
        assert ("^q", "Quit", "app.quit") in listed
        # Disabled by check_action: not listed. Help's own keys are not the screen's keys.
        assert not any(binding_id in ("race.diff", "help.close") for _, _, binding_id in listed)
        text = " ".join(str(static.render()) for static in app.screen.query(Static))
        assert "1-9 focus a candidate panel" in text and "ctrl+p command palette" in text
        assert str(tmp_path / "config" / "keymap.toml") in text

        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, Panels)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, Panels)


@pytest.mark.anyio
async def test_help_shows_keys_as_rebound_by_the_keymap():
    app = Host()
    async with app.run_test(size=(120, 40)) as pilot:
        app.set_keymap({"race.cancel": "k", "race.abort": "ctrl+x,f8"})
        await pilot.pause()
        app.push_screen(HelpScreen())
        await pilot.pause()
        listed = rows(app.screen)
        assert ("k", "Cancel", "race.cancel") in listed
        assert ("^x f8", "Abort", "race.abort") in listed
        assert not any(keys == "c" for keys, _, _ in listed)


@pytest.mark.anyio
async def test_help_lists_the_focused_widgets_keys_after_the_screens():
    class WithInput(Screen):
        BINDINGS = [Binding("ctrl+s", "save", "Save", id="form.save")]

        def compose(self) -> ComposeResult:
            yield Input()

    app = Host()
    async with app.run_test(size=(120, 40)) as pilot:
        await app.push_screen(WithInput())
        app.screen.query_one(Input).focus()
        await pilot.pause()
        app.push_screen(HelpScreen())
        await pilot.pause()
        listed = rows(app.screen)
        ids = [binding_id for _, _, binding_id in listed]
        assert ids[0] == "form.save"
        # The Input's own keys (cursor movement) come after the screen's and the app's.
        input_row = next(index for index, row in enumerate(listed) if row[1] == "Move cursor left")
        assert input_row > ids.index("app.quit")
        # "?" types a character into the focused Input, so the app's help key is not active here.
        assert "app.help" not in ids


# ---------------------------------------------------------------------------- palette


async def hits(app: App, query: str) -> list[str]:
    provider = OutpostCommands(app.screen)
    found = [hit async for hit in provider.search(query)]
    return [str(hit.text) for hit in sorted(found, key=lambda hit: -hit.score)]


@pytest.mark.anyio
async def test_palette_searches_the_apps_commands_and_runs_the_chosen_one():
    app = Host()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert (await hits(app, "cancel fix"))[0] == "Cancel candidate fixer"
        assert "Switch theme: outpost-light" in await hits(app, "theme")
        assert "Switch theme: outpost-dark" not in await hits(app, "theme")
        assert await hits(app, "zzz") == []

        discovered = [hit async for hit in OutpostCommands(app.screen).discover()]
        assert [str(hit.text) for hit in discovered][:4] == [
            "Start race",
            "Abort race",
            "Cancel candidate fixer",
            "Cancel candidate breaker",
        ]
        assert discovered[0].help == "calc-race, 2 candidates"

        await pilot.press("ctrl+p")
        await pilot.pause()
        assert isinstance(app.screen, CommandPalette)
        await pilot.press(*"cancel breaker")
        palette_list = app.screen.query_one(CommandList)
        await until(pilot, lambda: palette_list.option_count == 1)
        await pilot.press("enter")
        await until(pilot, lambda: app.called == ["cancel breaker"])
        assert not isinstance(app.screen, CommandPalette)


@pytest.mark.anyio
async def test_palette_follows_what_the_app_offers_now():
    app = Host()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert "Cancel candidate breaker" in await hits(app, "cancel")
        app.candidates = ["fixer"]
        assert await hits(app, "cancel") == ["Cancel candidate fixer"]

        found = [hit async for hit in OutpostCommands(app.screen).search("light")]
        found[0].command()
        assert app.called == ["theme outpost-light"]


@pytest.mark.anyio
async def test_palette_is_empty_for_an_app_without_commands():
    app = App()
    async with app.run_test() as pilot:
        await pilot.pause()
        provider = OutpostCommands(app.screen)
        assert [hit async for hit in provider.discover()] == []
        assert [hit async for hit in provider.search("start")] == []
