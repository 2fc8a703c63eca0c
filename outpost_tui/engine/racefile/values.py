"""Values of a race file, read by their declarations: the kinds, bounds and rules each key's value
must follow, refused in `check`'s words (expected an integer, found a string) at its file, line and
dotted key.
"""

from __future__ import annotations

import difflib
import json
import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ..core.declaration import Refused
from ..core.spec import frozen_map
from . import schema
from .locate import KeyPath, Locator, RaceFileError, dotted
from .schema import Option

# A key a table does not give (distinct from any TOML value).
MISSING = object()


def _toml_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        text = json.dumps(value)
        return text if len(text) <= 40 else text[:37] + '..."'
    if isinstance(value, (int, float)):
        return repr(value)
    return ""


def _describe(value: Any) -> str:
    for kind, name in (
        (bool, "a boolean"),
        (int, "an integer"),
        (float, "a number"),
        (str, "a string"),
        (list, "an array"),
        (dict, "a table"),
    ):
        if isinstance(value, kind):
            shown = _toml_text(value)
            return f"{name} ({shown})" if shown else name
    return "a date/time"


class Reader:
    """Typed access to the parsed TOML, failing with a located RaceFileError."""

    def __init__(self, path: str | Path | None, locator: Locator, base_dir: Path = Path(".")):
        self.path = path
        self.locator = locator
        self.base_dir = base_dir  # relative paths in the file are relative to its directory

    def error(self, where: KeyPath, message: str) -> RaceFileError:
        return RaceFileError(self.path, self.locator.line(where), dotted(where), message)

    def expect(self, where: KeyPath, value: Any, expected: str) -> RaceFileError:
        return self.error(where, f"expected {expected}, found {_describe(value)}")

    def table(self, where: KeyPath, value: Any, allowed: Iterable[str], hint: str = "") -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.expect(where, value, f"a table{hint}")
        allowed = list(allowed)
        for name in value:
            if name not in allowed:
                raise self.error(where + (name,), _unknown_key(name, allowed))
        return value

    def integer(
        self, where: KeyPath, value: Any, minimum: int | None = None, maximum: int | None = None
    ) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.expect(where, value, "an integer")
        if minimum is not None and maximum is not None and not minimum <= value <= maximum:
            raise self.error(where, f"must be between {minimum} and {maximum}, found {value}")
        if minimum is not None and value < minimum:
            raise self.error(where, f"must be {_at_least(minimum)}, found {value}")
        return value

    def number(self, where: KeyPath, value: Any, positive: bool = False) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.expect(where, value, "a number")
        if not math.isfinite(value):
            raise self.error(where, f"must be a finite number, found {value}")
        if positive and value <= 0:
            raise self.error(where, f"must be greater than 0, found {value}")
        if value < 0:
            raise self.error(where, f"must be 0 or more, found {value}")
        return float(value)

    def string(self, where: KeyPath, value: Any, choices: Iterable[str] | None = None) -> str:
        if not isinstance(value, str):
            raise self.expect(where, value, "a string")
        if not value.strip():
            raise self.error(where, "must not be empty")
        if "\0" in value:
            raise self.error(where, "must not contain a NUL character")
        if choices is not None:
            choices = list(choices)
            if value not in choices:
                raise self.error(where, _not_one_of(value, choices))
        return value

    def boolean(self, where: KeyPath, value: Any) -> bool:
        if not isinstance(value, bool):
            raise self.expect(where, value, "a boolean (true or false)")
        return value

    def strings(self, where: KeyPath, value: Any, expected: str = "a list of strings") -> tuple[str, ...]:
        if not isinstance(value, list):
            raise self.expect(where, value, expected)
        for index, item in enumerate(value):
            if not isinstance(item, str):
                raise self.expect(where + (index,), item, "a string")
            if "\0" in item:
                raise self.error(where + (index,), "must not contain a NUL character")
        return tuple(value)

    def argv(self, where: KeyPath, value: Any) -> tuple[str, ...]:
        argv = self.strings(where, value, 'a list of strings (argv), e.g. ["pytest", "-q"]')
        if not argv:
            raise self.error(
                where, 'must not be empty: give the program and its arguments, e.g. ["pytest", "-q"]'
            )
        if not argv[0].strip():
            raise self.error(where + (0,), "the program name must not be empty")
        return argv

    def string_map(self, where: KeyPath, value: Any) -> dict[str, str]:
        if not isinstance(value, dict):
            raise self.expect(where, value, "a table of strings")
        for name, item in value.items():
            if not name or "=" in name or "\0" in name:
                raise self.error(where + (name,), "not a valid environment variable name")
            if not isinstance(item, str):
                raise self.expect(where + (name,), item, "a string")
            if "\0" in item:
                raise self.error(where + (name,), "must not contain a NUL character")
        return dict(value)

    def resolve_path(self, where: KeyPath, value: Any, base: Path) -> tuple[Path, str]:
        """A path relative to base, resolved, and what is there: file, directory, other or missing."""
        text = self.string(where, value)
        try:
            path = (base / Path(text).expanduser()).resolve()
            if path.is_dir():
                return path, "directory"
            if path.is_file():
                return path, "file"
            return path, "other" if path.exists() else "missing"
        except (OSError, RuntimeError) as error:  # RuntimeError: a symlink loop, or no home for ~
            raise self.error(
                where, f"cannot use {text}: {getattr(error, 'strerror', None) or error}"
            ) from None

    def file(self, where: KeyPath, value: Any, base: Path) -> Path:
        path, kind = self.resolve_path(where, value, base)
        if kind == "missing":
            raise self.error(where, f"no such file: {path}")
        if kind != "file":
            raise self.error(where, f"not a regular file: {path}")
        return path

    def value(self, where: KeyPath, value: Any, option: Option) -> Any:
        """A key's value checked by its declaration: its kind, its bounds, its further rule."""
        key = option.key
        if option.kind == "string":
            out: Any = self.string(where, value)
        elif option.kind == "choice":
            out = self.string(where, value, option.choices)
        elif option.kind == "integer":
            out = self.integer(where, value, key.minimum, key.maximum)
        elif option.kind == "number":
            out = self.number(where, value, key.positive)
        elif option.kind == "boolean":
            out = self.boolean(where, value)
        elif option.kind == "strings":
            out = self.strings(where, value, key.expected or "a list of strings")
        elif option.kind == "argv":
            out = self.argv(where, value)
        elif option.kind == "env":
            out = frozen_map(self.string_map(where, value))
        elif option.kind == "file":
            out = self.file(where, value, self.base_dir)
        elif option.kind == "table" and option.nested is not None:
            hint = " " + key.expected.removeprefix("a table ") if key.expected else ""
            out = option.nested(
                **self.settings(
                    where, self.table(where, value, schema.names(option.nested), hint), option.nested
                )
            )
        else:
            raise TypeError(f"{dotted(where)}: no reader for kind {option.kind!r}")
        if key.check is not None:
            try:
                key.check(out)
            except Refused as refused:
                raise self.error(where + refused.at, refused.message) from None
        return out

    def settings(
        self,
        where: KeyPath,
        table: dict[str, Any],
        cls: type,
        custom: Mapping[str, Callable[[], Any]] | None = None,
    ) -> dict[str, Any]:
        """The declared settings a table gives, in declaration order, checked; a name in `custom` is
        read by its function instead (a value whose rule involves other keys), if it returns one."""
        out: dict[str, Any] = {}
        for option in schema.options(cls):
            if custom is not None and option.name in custom:
                value = custom[option.name]()
                if value is not MISSING:
                    out[option.name] = value
            elif option.name in table and option.is_field:
                out[option.name] = self.value(where + (option.name,), table[option.name], option)
        return out


def _at_least(minimum: int) -> str:
    return "0 or more" if minimum == 0 else f"{minimum} or more"


def _not_one_of(value: str, choices: list[str]) -> str:
    message = f"{json.dumps(value)} is not one of: {', '.join(choices)}"
    close = difflib.get_close_matches(value, choices, n=1)
    return message + (f" (did you mean {json.dumps(close[0])}?)" if close else "")


def _unknown_key(name: str, allowed: list[str]) -> str:
    close = difflib.get_close_matches(name, allowed, n=1)
    if close:
        return f"unknown key {name!r} (did you mean {close[0]!r}?)"
    for section, cls in schema.sections().items():
        if name in schema.names(cls) and name not in allowed:
            return f"unknown key {name!r} (it belongs in [{section}])"
    return f"unknown key {name!r} (expected one of: {', '.join(allowed)})"
