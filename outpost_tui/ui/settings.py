"""What the app remembers between runs, in `<config dir>/settings.toml`:

    theme = "outpost-light"

Only choices the user made in the app go here (the keymap and themes are files the user edits).
The file is rewritten whole, atomically, keeping any key this version does not know.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import tomli_w

from ..engine.files import write_atomically
from .keymap import ConfigFileError, config_dir, read_toml

SETTINGS_FILE = "settings.toml"


def settings_path() -> Path:
    return config_dir() / SETTINGS_FILE


def load_settings(path: Path | None = None) -> tuple[dict[str, Any], list[str]]:
    """The saved settings and one error line per problem; a missing file is no settings."""
    file = path or settings_path()
    try:
        document = read_toml(file)
    except ConfigFileError as error:
        return {}, [f"{file}: {error}"]
    if document is None:
        return {}, []
    errors = []
    theme = document.get("theme")
    if theme is not None and not isinstance(theme, str):
        errors.append(f"{file}: theme: expected a theme name as a string, found {theme!r}")
        document.pop("theme")
    return document, errors


def saved_theme(path: Path | None = None) -> tuple[str | None, list[str]]:
    settings, errors = load_settings(path)
    return settings.get("theme"), errors


def save_theme(name: str, path: Path | None = None) -> Path:
    """Remember `name` as the theme to start with; raises OSError when the file cannot be written."""
    file = path or settings_path()
    settings, _ = load_settings(file)
    settings["theme"] = name
    file.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(file, tomli_w.dumps(settings).encode("utf-8"))
    return file
