"""The theme picker (`t`): highlight previews, enter keeps and remembers, escape restores."""

from __future__ import annotations

import os
import tomllib

import pytest
from textual.widgets import OptionList

from outpost_tui.ui.app import OutpostApp
from outpost_tui.ui.keymap import config_dir
from outpost_tui.ui.screens.help import HelpScreen
from outpost_tui.ui.screens.theme_picker import ThemePickerScreen
from outpost_tui.ui.settings import settings_path
from outpost_tui.ui.themes import DEFAULT_THEME

pytestmark = pytest.mark.anyio
SIZE = (120, 36)


def highlighted(app: OutpostApp) -> str:
    options = app.screen.query_one("#themes", OptionList)
    return options.get_option_at_index(options.highlighted).id


async def test_highlight_previews_escape_restores_and_nothing_is_remembered():
    app = OutpostApp(testing=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.theme == DEFAULT_THEME
        await pilot.press("t")
        assert isinstance(app.screen, ThemePickerScreen)
        assert highlighted(app) == DEFAULT_THEME  # the list opens on the theme in use
        await pilot.press("down")
        preview = highlighted(app)
        assert preview != DEFAULT_THEME and app.theme == preview
        await pilot.press("down")
        assert app.theme == highlighted(app) != preview
        await pilot.press("t")  # the picker's own key does not stack a second picker
        assert len([s for s in app.screen_stack if isinstance(s, ThemePickerScreen)]) == 1
        await pilot.press("escape")
        assert not isinstance(app.screen, ThemePickerScreen)
        assert app.theme == DEFAULT_THEME
    assert not settings_path().exists()


async def test_enter_keeps_the_theme_and_the_next_start_uses_it(monkeypatch):
    app = OutpostApp(testing=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("t", "down", "down")
        chosen = highlighted(app)
        assert chosen != DEFAULT_THEME
        await pilot.press("enter")
        assert not isinstance(app.screen, ThemePickerScreen)
        assert app.theme == chosen
    assert settings_path().parent == config_dir()
    assert tomllib.loads(settings_path().read_text())["theme"] == chosen

    again = OutpostApp(testing=True)
    async with again.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert again.theme == chosen
        assert not again._notifications  # a saved theme is not a complaint

    monkeypatch.setenv("OUTPOST_TUI_THEME", "outpost-light" if chosen != "outpost-light" else "high-contrast")
    by_environment = OutpostApp(testing=True)
    async with by_environment.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert by_environment.theme == os.environ["OUTPOST_TUI_THEME"]  # the environment still wins


async def test_a_saved_theme_that_no_longer_exists_is_one_error_and_the_default():
    settings_path().parent.mkdir(parents=True, exist_ok=True)
    settings_path().write_text('theme = "gone-theme"\nother = 1\n')
    app = OutpostApp(testing=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert app.theme == DEFAULT_THEME
        messages = [n.message for n in app._notifications]
        assert len(messages) == 1 and "gone-theme" in messages[0] and str(settings_path()) in messages[0]
        app.keep_theme("outpost-light")
    # Keeping a theme rewrites only the theme: a setting this version does not know survives.
    assert tomllib.loads(settings_path().read_text()) == {"theme": "outpost-light", "other": 1}


async def test_the_picker_key_is_in_the_help_and_rebindable_by_its_id():
    config_dir().mkdir(parents=True, exist_ok=True)
    (config_dir() / "keymap.toml").write_text('[keys]\n"app.theme" = "ctrl+t"\n')
    app = OutpostApp(testing=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        assert ("^t", "Pick theme", "app.theme") in app.screen.key_rows()
        await pilot.press("escape", "t")
        assert not isinstance(app.screen, ThemePickerScreen)
        await pilot.press("ctrl+t")
        assert isinstance(app.screen, ThemePickerScreen)
        titles = [title for title, _, _ in app.palette_commands()]
        assert "Pick theme" in titles
        await pilot.press("escape")
        app.action_change_theme()  # Textual's "Theme" palette command opens the same picker
        await pilot.pause()
        assert isinstance(app.screen, ThemePickerScreen)


async def test_each_theme_says_dark_or_light_in_a_muted_style_after_its_name():
    app = OutpostApp(testing=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("t")
        options = app.screen.query_one("#themes", OptionList)
        await pilot.pause()
        rows = [
            [segment for segment in options.render_line(y) if segment.text.strip()]
            for y in range(options.size.height)
        ]
        labelled = [row for row in rows if row and row[-1].text.strip() in ("dark", "light")]
        assert labelled, rows
        for *name, kind in labelled:
            # dimmed, or drawn closer to the background than the name: never starker, as an
            # unresolved theme variable had it
            assert kind.style.dim or contrast(kind.style) < contrast(name[0].style), (name, kind)


def contrast(style) -> float:
    def luminance(color) -> float:
        red, green, blue = color.get_truecolor()
        return 0.2126 * red + 0.7152 * green + 0.0722 * blue

    return abs(luminance(style.color) - luminance(style.bgcolor))
