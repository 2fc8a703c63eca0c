"""Themes from TOML files and the user's keymap: what loads, and the one-line errors for what does not."""

from pathlib import Path

import pytest
from textual.app import App
from textual.color import Color

from outpost_tui.ui import keymap, themes
from outpost_tui.ui.keymap import config_dir, keymap_path, load_keymap
from outpost_tui.ui.themes import (
    DEFAULT_THEME,
    STATUS_DEFAULTS,
    STATUS_VARIABLES,
    load_themes,
    shipped_themes_dir,
    user_themes_dir,
)

SHIPPED = {"outpost-dark", "outpost-light", "high-contrast"}
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def config(tmp_path, monkeypatch) -> Path:
    directory = tmp_path / "config"
    monkeypatch.setenv(keymap.CONFIG_DIR_VARIABLE, str(directory))
    return directory


GOOD = """
name = "mine"
dark = false
primary = "#112233"
background = "white"
[variables]
status-winner = "rgb(0, 200, 0)"
"""


# ------------------------------------------------------------------------------------ themes


def test_shipped_themes_load_without_errors_and_define_every_status_colour(config):
    assert shipped_themes_dir() == REPO / "themes"
    loaded, errors = load_themes()
    assert errors == []
    by_name = {theme.name: theme for theme in loaded}
    assert set(by_name) == SHIPPED
    assert DEFAULT_THEME in by_name
    assert by_name["outpost-light"].dark is False and by_name["outpost-dark"].dark is True
    for theme in loaded:
        # The shipped files spell out every status colour (no fallback hides a missing one).
        text = (REPO / "themes" / f"{theme.name}.toml").read_text()
        for variable in STATUS_VARIABLES:
            assert f"{variable} =" in text, (theme.name, variable)
            Color.parse(theme.variables[variable])


@pytest.mark.anyio
async def test_shipped_themes_register_and_render_status_variables(config):
    loaded, _ = load_themes()

    class Host(App):
        CSS = "Screen { background: $status-winner; color: $status-quota; }"

        def get_theme_variable_defaults(self) -> dict[str, str]:
            # The CSS is parsed under the stock theme first: it needs values for our variables.
            return dict(STATUS_DEFAULTS)

        def on_mount(self) -> None:
            for theme in loaded:
                self.register_theme(theme)
            self.theme = "high-contrast"

    async with Host().run_test() as pilot:
        await pilot.pause()
        assert pilot.app.screen.styles.background == Color.parse("#00FF00")
        assert pilot.app.screen.styles.color == Color.parse("#FFFF00")


def test_a_broken_theme_is_one_error_naming_file_and_key_and_the_others_load(config):
    user = user_themes_dir()
    assert user == config / "themes"
    user.mkdir(parents=True)
    (user / "mine.toml").write_text(GOOD)
    (user / "broken.toml").write_text('name = "broken"\nprimary = "#123456"\naccent = "not-a-colour"\n')

    loaded, errors = load_themes()

    assert len(errors) == 1
    assert str(user / "broken.toml") in errors[0]
    assert "accent" in errors[0] and "not-a-colour" in errors[0]
    assert "\n" not in errors[0]
    names = {theme.name for theme in loaded}
    assert names == SHIPPED | {"mine"}
    mine = next(theme for theme in loaded if theme.name == "mine")
    assert mine.dark is False and mine.background == "white"
    assert mine.variables["status-winner"] == "rgb(0, 200, 0)"
    # A status colour the file leaves out comes from the theme's own colours.
    assert mine.variables["status-running"] == "#112233"


@pytest.mark.parametrize(
    "text, key",
    [
        ('primary = "#123456"\nprimary_colour = "#000000"\n', "primary_colour"),
        ("dark = true\n", "primary"),
        ('primary = "#123456"\ndark = "yes"\n', "dark"),
        ("primary = 12\n", "primary"),
        ('primary = "#123456"\n[variables]\nstatus-failed = "#12345"\n', "variables.status-failed"),
        ('primary = "#123456"\n[variables]\nfooter-key-foreground = 3\n', "variables.footer-key-foreground"),
        ('name = "two words"\nprimary = "#123456"\n', "name"),
    ],
)
def test_theme_errors_name_the_key(tmp_path, text, key):
    (tmp_path / "t.toml").write_text(text)
    loaded, errors = load_themes([tmp_path])
    assert loaded == []
    assert len(errors) == 1
    assert errors[0].startswith(f"{tmp_path / 't.toml'}: {key}: "), errors[0]


def test_invalid_toml_and_duplicate_names(tmp_path):
    (tmp_path / "a.toml").write_text('name = "same"\nprimary = "red"\n')
    (tmp_path / "b.toml").write_text('name = "same"\nprimary = "blue"\n')
    (tmp_path / "c.toml").write_text('primary = "red\n')
    loaded, errors = load_themes([tmp_path])
    assert [theme.primary for theme in loaded] == ["red"]
    assert len(errors) == 2
    assert errors[0].startswith(f"{tmp_path / 'b.toml'}: name: ") and "a.toml" in errors[0]
    assert errors[1].startswith(f"{tmp_path / 'c.toml'}: invalid TOML")


def test_a_user_theme_replaces_a_shipped_one_of_the_same_name(config):
    user = user_themes_dir()
    user.mkdir(parents=True)
    (user / "dark.toml").write_text('name = "outpost-dark"\nprimary = "#ABCDEF"\n')
    loaded, errors = load_themes()
    assert errors == []
    assert [theme.primary for theme in loaded if theme.name == "outpost-dark"] == ["#ABCDEF"]


def test_theme_name_defaults_to_the_file_name(tmp_path):
    (tmp_path / "sunset.toml").write_text('primary = "#FF7F50"\n')
    loaded, errors = load_themes([tmp_path])
    assert errors == [] and [theme.name for theme in loaded] == ["sunset"]


# ------------------------------------------------------------------------------------ keymap


def test_config_dir_follows_the_override_then_xdg(tmp_path, monkeypatch):
    monkeypatch.delenv(keymap.CONFIG_DIR_VARIABLE, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    assert config_dir() == tmp_path / "xdg" / "outpost-tui"
    monkeypatch.setenv("XDG_CONFIG_HOME", "relative/ignored")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert config_dir() == tmp_path / "home" / ".config" / "outpost-tui"
    monkeypatch.setenv(keymap.CONFIG_DIR_VARIABLE, str(tmp_path / "override"))
    assert keymap_path() == tmp_path / "override" / "keymap.toml"
    assert themes.user_themes_dir() == tmp_path / "override" / "themes"


def test_missing_keymap_is_empty_without_errors(config):
    assert load_keymap() == ({}, [])


def test_keymap_reads_quoted_and_dotted_ids_and_key_lists(config):
    config.mkdir()
    keymap_path().write_text(
        '[keys]\n"race.cancel" = "k"\nrace.abort = "ctrl+x, f8"\n"configure.save" = ["ctrl+w", "f2"]\n'
    )
    mapping, errors = load_keymap()
    assert errors == []
    assert mapping == {"race.cancel": "k", "race.abort": "ctrl+x,f8", "configure.save": "ctrl+w,f2"}


def test_bad_keymap_entries_are_reported_one_line_each_and_the_rest_apply(tmp_path):
    file = tmp_path / "keymap.toml"
    file.write_text(
        'colour = "blue"\n'
        "[keys]\n"
        '"race.cancel" = "k"\n'
        '"race.abort" = ""\n'
        '"race.diff" = 4\n'
        '"race.zoom" = "z,"\n'
        '"race.search" = "ctrl f"\n'
    )
    mapping, errors = load_keymap(file)
    assert mapping == {"race.cancel": "k"}
    assert len(errors) == 5
    assert all(error.startswith(f"{file}: ") and "\n" not in error for error in errors)
    assert errors[0].startswith(f"{file}: colour: unknown key")
    for error, binding_id in zip(
        errors[1:], ("race.abort", "race.diff", "race.zoom", "race.search"), strict=True
    ):
        assert error.startswith(f"{file}: keys.{binding_id}: expected one or more keys")


def test_keymap_that_is_not_toml_or_not_a_table(tmp_path):
    file = tmp_path / "keymap.toml"
    file.write_text("[keys\n")
    mapping, errors = load_keymap(file)
    assert mapping == {} and len(errors) == 1 and errors[0].startswith(f"{file}: invalid TOML")
    file.write_text('keys = "k"\n')
    mapping, errors = load_keymap(file)
    assert mapping == {} and len(errors) == 1 and errors[0].startswith(f"{file}: keys: expected a table")
