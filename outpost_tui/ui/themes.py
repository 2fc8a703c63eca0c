"""Themes as TOML files: the shipped ones in the repository's `themes/`, plus the user's own in
`<config dir>/themes/`. One file per theme:

    name = "outpost-dark"
    dark = true
    primary = "#5FA8D3"
    background = "#14171C"
    ...
    [variables]
    status-winner = "#5BBA6F"

Colours are checked with Textual's own parser, so a theme that loads also renders. A bad file is
one error line (file and key) and the other themes still load; a user theme replaces a shipped
theme of the same name.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from textual.color import Color, ColorParseError
from textual.theme import Theme

from ..engine.errors import OutpostError
from .keymap import ConfigFileError, config_dir, read_toml

DEFAULT_THEME = "outpost-dark"
COLOUR_KEYS = (
    "primary",
    "secondary",
    "accent",
    "foreground",
    "background",
    "surface",
    "panel",
    "boost",
    "success",
    "warning",
    "error",
)
ALLOWED_KEYS = ("name", "dark", *COLOUR_KEYS, "variables")
# What the app's panels use in TCSS ($status-winner, ...). A theme that leaves one out gets it
# from its own colours (see _status_from_theme); themes that are not ours use STATUS_DEFAULTS.
STATUS_VARIABLES = (
    "status-winner",
    "status-rejected",
    "status-failed",
    "status-cancelled",
    "status-running",
    "status-quota",
)
STATUS_DEFAULTS = {
    "status-winner": "#4EBF71",
    "status-rejected": "#E5534B",
    "status-failed": "#D9738A",
    "status-cancelled": "#8B95A5",
    "status-running": "#0178D4",
    "status-quota": "#FFA62B",
}


def shipped_themes_dir() -> Path:
    """The repository's themes/ in a checkout (or editable install), else where a wheel puts it."""
    candidates = [
        Path(__file__).resolve().parent.parent.parent / "themes",
        Path(sys.prefix) / "share" / "outpost-tui" / "themes",
    ]
    for directory in candidates:
        if directory.is_dir():
            return directory
    return candidates[-1]


def user_themes_dir() -> Path:
    return config_dir() / "themes"


class ThemeFileError(OutpostError):
    """One line: the file, the key and what is wrong with it."""

    def __init__(self, path: Path, key: str | None, message: str):
        self.path = path
        self.key = key
        self.message = message
        super().__init__(": ".join(part for part in (str(path), key, message) if part))


def load_themes(directories: list[Path] | None = None) -> tuple[list[Theme], list[str]]:
    """Every theme in the shipped and user directories (or the given ones, later ones winning
    over earlier ones on a name clash), and one error line per file that cannot be used."""
    themes: dict[str, Theme] = {}
    errors: list[str] = []
    if directories is None:
        directories = [shipped_themes_dir(), user_themes_dir()]
        if not directories[0].is_dir():
            errors.append(f"{directories[0]}: the shipped themes are missing (reinstall outpost-tui)")
    for directory in directories:
        if not directory.is_dir():
            continue
        seen_here: dict[str, Path] = {}
        for file in sorted(directory.glob("*.toml")):
            try:
                theme = load_theme(file)
            except ThemeFileError as error:
                errors.append(str(error))
                continue
            if theme.name in seen_here:
                errors.append(
                    str(
                        ThemeFileError(
                            file,
                            "name",
                            f"theme {theme.name!r} is already defined by {seen_here[theme.name].name}",
                        )
                    )
                )
                continue
            seen_here[theme.name] = file
            themes[theme.name] = theme
    return list(themes.values()), errors


def load_theme(file: Path) -> Theme:
    """The Theme a file describes; raises ThemeFileError."""
    try:
        document = read_toml(file, missing_ok=False)
    except ConfigFileError as error:
        raise ThemeFileError(file, None, str(error)) from None

    for key in document:
        if key not in ALLOWED_KEYS:
            raise ThemeFileError(file, key, f"unknown key (allowed: {', '.join(ALLOWED_KEYS)})")
    name = document.get("name", file.stem)
    if not isinstance(name, str) or not name.strip() or any(char.isspace() for char in name):
        raise ThemeFileError(file, "name", f"expected a name without spaces, found {name!r}")
    if "primary" not in document:
        raise ThemeFileError(file, "primary", "missing (every theme needs a primary colour)")
    dark = document.get("dark", True)
    if not isinstance(dark, bool):
        raise ThemeFileError(file, "dark", f"expected true or false, found {dark!r}")
    # Any: Theme takes each colour by its own keyword, which a dict of checked strings cannot name
    colours: dict[str, Any] = {
        key: _colour(file, key, document[key]) for key in COLOUR_KEYS if key in document
    }

    raw_variables = document.get("variables", {})
    if not isinstance(raw_variables, dict):
        raise ThemeFileError(file, "variables", "expected a [variables] table")
    variables: dict[str, str] = {}
    for key, value in raw_variables.items():
        where = f"variables.{key}"
        if not isinstance(value, str):
            raise ThemeFileError(file, where, f"expected a string, found {value!r}")
        # Textual's own variables may be styles ("bold") rather than colours; ours are colours.
        variables[key] = _colour(file, where, value) if key in STATUS_VARIABLES else value
    for key, value in _status_from_theme(colours).items():
        variables.setdefault(key, value)
    return Theme(name=name, dark=dark, variables=variables, **colours)


def _colour(file: Path, key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise ThemeFileError(file, key, f"expected a colour as a string, found {value!r}")
    try:
        Color.parse(value)
    except ColorParseError:
        raise ThemeFileError(
            file, key, f'not a colour: {value!r} (use e.g. "#5FA8D3", "rgb(95,168,211)" or a colour name)'
        ) from None
    return value


def _status_from_theme(colours: dict[str, str]) -> dict[str, str]:
    """Status colours a theme leaves out, taken from the nearest colour it does define."""

    def pick(*keys: str, default: str) -> str:
        return next((colours[key] for key in keys if key in colours), default)

    return {
        "status-winner": pick("success", default=STATUS_DEFAULTS["status-winner"]),
        "status-rejected": pick("error", default=STATUS_DEFAULTS["status-rejected"]),
        "status-failed": pick("error", default=STATUS_DEFAULTS["status-failed"]),
        "status-cancelled": STATUS_DEFAULTS["status-cancelled"],
        "status-running": pick("primary", default=STATUS_DEFAULTS["status-running"]),
        "status-quota": pick("warning", default=STATUS_DEFAULTS["status-quota"]),
    }
