"""The race file's shape, derived from the spec's own declarations.

Every key a race file may hold is a RaceSpec field (or a field of one of its tables) declared with
`spec.setting()`, or a companion key a setting declares (brief_file). From those declarations come
the key lists the reader accepts (and suggests from), each value's kind and bounds, the defaults, the
writer's keys and the key tables of docs/race-file.md (`tests/engine/test_racefile_schema.py` fails
when the docs and the declarations disagree).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import types
import typing
from collections.abc import Mapping
from dataclasses import MISSING, dataclass
from pathlib import Path
from typing import Any, Literal, Union

from ..core.declaration import Key, Table
from ..core.spec import CandidateSpec, RaceSpec

REQUIRED = MISSING


@dataclass(frozen=True)
class Option:
    """One key of a race-file table: its name, its declaration and what its value must be."""

    name: str
    key: Key
    kind: str  # string, choice, integer, number, boolean, strings, argv, env, file, table
    choices: tuple[str, ...] = ()
    nested: type | None = None  # the dataclass a "table" value holds
    default: Any = None  # REQUIRED: no default (the reader resolves or refuses a missing one)
    is_field: bool = True  # False for a companion key, which has no field of its own


@functools.cache
def options(cls: type) -> tuple[Option, ...]:
    """The race-file keys of a spec dataclass, in declaration order, companions after their key."""
    hints = typing.get_type_hints(cls)
    out: list[Option] = []
    for field in dataclasses.fields(cls):
        key = field.metadata.get("key")
        if key is None:
            continue
        kind, choices, nested = _kind(hints[field.name], key)
        out.append(Option(field.name, key, kind, choices, nested, _default(field)))
        for name, companion in key.companions:
            out.append(Option(name, companion, companion.kind, default=None, is_field=False))
    return tuple(out)


def names(cls: type) -> list[str]:
    return [option.name for option in options(cls)]


def option(cls: type, name: str) -> Option:
    return next(option for option in options(cls) if option.name == name)


@functools.cache
def sections() -> dict[str, type]:
    """The plain tables of a race file and the dataclass each holds: `[race]` holds RaceSpec's own
    settings, the others are RaceSpec's table fields."""
    hints = typing.get_type_hints(RaceSpec)
    out: dict[str, type] = {"race": RaceSpec}
    for field in dataclasses.fields(RaceSpec):
        declared: Table | None = field.metadata.get("table")
        held = _without_none(hints[field.name])
        if (
            declared is not None
            and not declared.array
            and isinstance(held, type)
            and dataclasses.is_dataclass(held)
        ):
            out[field.name] = held
    return out


@functools.cache
def top_keys() -> list[str]:
    """Every top-level key: `[race]` first, the tables in declaration order, arrays of tables last."""
    tables = [
        (field.name, field.metadata["table"])
        for field in dataclasses.fields(RaceSpec)
        if "table" in field.metadata
    ]
    return [
        "race",
        *(name for name, table in tables if not table.array),
        *(name for name, table in tables if table.array),
    ]


# The array of tables and the tables of tables, each of one spec dataclass.
ARRAYS: dict[str, type] = {"candidates": CandidateSpec}
PRICES = "prices"  # [prices."model"], each a Price


def _without_none(hint: Any) -> Any:
    if typing.get_origin(hint) in (Union, types.UnionType):
        rest = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return rest[0] if len(rest) == 1 else hint
    return hint


def _kind(hint: Any, key: Key) -> tuple[str, tuple[str, ...], type | None]:
    hint = _without_none(hint)
    origin = typing.get_origin(hint)
    if origin is Literal:
        return key.kind or "choice", tuple(typing.get_args(hint)), None
    if key.kind:
        return key.kind, (), None
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return "table", (), hint
    if origin is tuple:
        return "strings", (), None
    if origin is not None and issubclass(origin, Mapping):
        return "env", (), None
    simple = {bool: "boolean", int: "integer", float: "number", str: "string", Path: "file"}
    if hint in simple:
        return simple[hint], (), None
    raise TypeError(f"no race-file kind for {hint!r}")


def _default(field: dataclasses.Field[Any]) -> Any:
    if field.default is not MISSING:
        return field.default
    if field.default_factory is not MISSING:
        return field.default_factory()
    return REQUIRED


# --- docs/race-file.md's key tables ---------------------------------------------------------------


def _type_text(option: Option) -> str:
    if option.key.type:
        return option.key.type
    key = option.key
    if option.kind == "choice":
        return r" \| ".join(f"`{json.dumps(choice)}`" for choice in option.choices)
    if option.kind == "integer":
        if key.minimum is not None and key.maximum is not None:
            return f"integer {key.minimum}–{key.maximum}"
        return f"integer ≥ {key.minimum}" if key.minimum is not None else "integer"
    if option.kind == "number":
        return "number > 0" if key.positive else "number ≥ 0"
    return {"strings": "list of strings", "env": "table of strings", "file": "path", "table": "table"}.get(
        option.kind, option.kind
    )


def _default_text(option: Option) -> str:
    if option.key.default_text:
        return option.key.default_text
    value = option.default
    if value is REQUIRED:
        return "required"
    if value is None or value == () or value == {}:
        return "none"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f"`{json.dumps(value)}`"
    if isinstance(value, (int, float)):
        return f"`{value:g}`"
    raise TypeError(f"{option.name}: say its default in words (default_text=...)")


def key_table(cls: type) -> str:
    """The Markdown table of a race-file table's keys, as docs/race-file.md shows it."""
    rows = ["| key | type | default | rules |", "| --- | --- | --- | --- |"]
    for option in options(cls):
        rows.append(
            f"| `{option.name}` | {_type_text(option)} | {_default_text(option)} | "
            f"{option.key.rules} |".replace("|  |", "| |")
        )
    return "\n".join(rows)


def key_tables() -> dict[str, str]:
    """Each documented table's heading (as in the docs, e.g. "`[race]`") and its key table."""
    tables = {f"`[{name}]`": key_table(cls) for name, cls in sections().items()}
    tables.update({f"`[[{name}]]`": key_table(cls) for name, cls in ARRAYS.items()})
    return tables
