"""Writing a race file: RaceSpec → TOML that `load_race` reads back to an equal spec.

Which keys each table has and their defaults come from the spec's declarations (schema.py): a
setting at its default is left out, a path is written relative to the race file when it is inside
its directory, and Python-only fields (validation callables) have no key and are never written.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import tomli_w

from ..core.spec import RaceSpec
from . import schema


def dump_race(spec: RaceSpec, relative_to: Path | None = None) -> str:
    """The race file for spec, which load_race reads back to an equal spec (Python-only callables
    are left out). Paths inside relative_to (default: the race file's directory) are written
    relative to it."""
    if relative_to is None and spec.path is not None:
        relative_to = spec.path.parent
    where = Path(relative_to).resolve() if relative_to is not None else None

    def path_text(path: Path) -> str:
        path = Path(path).resolve()
        if where is not None and path.is_relative_to(where):
            return path.relative_to(where).as_posix() or "."
        return str(path)

    chunks = []
    for name in schema.sections():
        value: Any = spec if name == "race" else getattr(spec, name)
        if value is None or (name == "score" and value.command is None):
            continue  # a Python-only score (a callable) has nothing a file can say
        if name == "setup" and not spec.setup.command:
            # without a command the timeout has nothing to bound, so "no limit" need not be said
            value = dataclasses.replace(value, timeout=schema.option(type(value), "timeout").default)
        table = _settings(value, name, path_text)
        if name == "race":
            # the name is written even at its default: it says what the file is
            table = {"name": spec.name, **table}
        if table:
            chunks.append(_toml({name: table}))
    prices = {
        model: _settings(price, f"{schema.PRICES}.{model}", path_text) for model, price in spec.prices.items()
    }
    if prices:
        chunks.append(_toml({schema.PRICES: prices}))
    for candidate in spec.candidates:
        table = _settings(candidate, "candidates", path_text)
        brief = table.pop("brief")  # last: the longest value reads best at the end
        if brief != spec.brief:  # the shared brief is written once, in [race]
            table["brief"] = brief
        # A table in a candidate (env) is written as a sub-table header after its [[candidates]],
        # which TOML gives to that candidate.
        subtables = {name: table.pop(name) for name, value in list(table.items()) if isinstance(value, dict)}
        chunks.append(
            "".join(
                [
                    f"[[candidates]]\n{_toml(table)}",
                    *(f"\n[candidates.{name}]\n{_toml(value)}" for name, value in subtables.items()),
                ]
            )
        )
    return "\n".join(chunk.strip("\n") + "\n" for chunk in chunks)


def _settings(obj: Any, where: str, path_text: Callable[[Path], str]) -> dict[str, Any]:
    """The declared settings of a spec dataclass that differ from their defaults, as TOML values
    (a required one always). None is a value no race file can hold: where the default is not None
    (a timeout's "no limit"), writing it would read back as the default, so it is refused."""
    out: dict[str, Any] = {}
    kind: type = type(obj)
    for option in schema.options(kind):
        if not option.is_field:
            continue
        value = getattr(obj, option.name)
        if value is None:
            if option.default is not None and option.default is not schema.REQUIRED:
                raise ValueError(f"{where}.{option.name} = None (no limit) cannot be written in a race file")
            continue
        if option.default is not schema.REQUIRED and value == option.default:
            continue
        out[option.name] = _toml_value(value, where, path_text)
    return out


def _toml_value(value: Any, where: str, path_text: Callable[[Path], str]) -> Any:
    if isinstance(value, Path):
        return path_text(value)
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    if dataclasses.is_dataclass(value):
        return _settings(value, where, path_text)
    return value


def _toml(table: dict[str, Any]) -> str:
    # Multi-line strings keep briefs readable, but TOML normalises their line endings: a string
    # with a carriage return must be written escaped to come back the same.
    return tomli_w.dumps(table, multiline_strings=not _has_carriage_return(table))


def _has_carriage_return(value: Any) -> bool:
    if isinstance(value, str):
        return "\r" in value
    if isinstance(value, dict):
        return any(_has_carriage_return(key) or _has_carriage_return(item) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return any(_has_carriage_return(item) for item in value)
    return False
