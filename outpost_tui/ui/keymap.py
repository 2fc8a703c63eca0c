"""The user's keymap: rebinding keys by binding id, from `<config dir>/keymap.toml`.

    [keys]
    "race.cancel" = "k"
    race.abort = "ctrl+x,f8"      # unquoted dotted ids work too

The result goes to `App.set_keymap`. A bad entry is reported on its own line and left out; the
good entries still apply, so one typo does not cost the user every other binding.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any, Literal, overload

from ..engine.errors import OutpostError

CONFIG_DIR_VARIABLE = "OUTPOST_TUI_CONFIG_DIR"
KEYMAP_FILE = "keymap.toml"
EXAMPLE = 'e.g. "ctrl+s" or "f5,ctrl+r"'


def config_dir() -> Path:
    """Where the user's keymap and themes live: $OUTPOST_TUI_CONFIG_DIR, else
    $XDG_CONFIG_HOME/outpost-tui, else ~/.config/outpost-tui."""
    override = os.environ.get(CONFIG_DIR_VARIABLE)
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CONFIG_HOME")
    # The XDG spec says a relative value is invalid and must be ignored.
    if xdg and Path(xdg).is_absolute():
        return Path(xdg) / "outpost-tui"
    return Path.home() / ".config" / "outpost-tui"


def keymap_path() -> Path:
    return config_dir() / KEYMAP_FILE


class ConfigFileError(OutpostError):
    """A user file that cannot be read as TOML; the message says why, without the file name."""


@overload
def read_toml(file: Path, *, missing_ok: Literal[False]) -> dict[str, Any]: ...
@overload
def read_toml(file: Path, *, missing_ok: bool = True) -> dict[str, Any] | None: ...
def read_toml(file: Path, *, missing_ok: bool = True) -> dict[str, Any] | None:
    """The TOML document in one of the user's files; None when it does not exist (and
    `missing_ok`). Raises ConfigFileError with a one-line reason."""
    try:
        return tomllib.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError as error:
        if missing_ok:
            return None
        raise ConfigFileError(f"cannot read: {error.strerror or error}") from None
    except UnicodeDecodeError:
        raise ConfigFileError("not UTF-8 text") from None
    except OSError as error:
        raise ConfigFileError(f"cannot read: {error.strerror or error}") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigFileError(f"invalid TOML: {error}") from None


def load_keymap(path: str | os.PathLike[str] | None = None) -> tuple[dict[str, str], list[str]]:
    """The binding id -> keys mapping in the keymap file, and one error line per bad entry.
    A missing file is an empty keymap, not an error."""
    file = Path(path) if path is not None else keymap_path()
    try:
        document = read_toml(file)
    except ConfigFileError as error:
        return {}, [f"{file}: {error}"]
    if document is None:
        return {}, []

    errors: list[str] = []
    for name in document:
        if name != "keys":
            errors.append(f"{file}: {name}: unknown key (binding ids go in a [keys] table)")
    table = document.get("keys", {})
    if not isinstance(table, dict):
        return {}, errors + [
            f"{file}: keys: expected a table like [keys] with "
            f'"race.cancel" = "k", found {type(table).__name__}'
        ]

    mapping: dict[str, str] = {}
    for binding_id, value in _flatten(table):
        keys = _keys(value)
        if keys is None:
            errors.append(
                f"{file}: keys.{binding_id}: expected one or more keys as a string, "
                f"{EXAMPLE}, found {value!r}"
            )
            continue
        mapping[binding_id] = ",".join(keys)
    return mapping, errors


def _flatten(table: dict, prefix: str = "") -> list[tuple[str, object]]:
    """Binding ids contain dots, and TOML reads an unquoted `race.cancel = "k"` as a nested table:
    both spellings name the same id."""
    items: list[tuple[str, object]] = []
    for name, value in table.items():
        if isinstance(value, dict):
            items.extend(_flatten(value, f"{prefix}{name}."))
        else:
            items.append((f"{prefix}{name}", value))
    return items


def _keys(value: object) -> list[str] | None:
    """The keys a value names ("a", "a,b" or ["a", "b"]), or None when it names none or a blank."""
    if isinstance(value, str):
        parts = value.split(",")
    elif isinstance(value, list) and value and all(isinstance(part, str) for part in value):
        parts = value
    else:
        return None
    keys = [part.strip() for part in parts]
    if not keys or any(not key or any(char.isspace() for char in key) for key in keys):
        return None
    return keys
