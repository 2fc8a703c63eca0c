"""How a spec field declares the race-file key that sets it: `setting()` and `table()` attach a `Key`
(or a `Table`) to a dataclass field, and a value that breaks its key's rule raises `Refused`.

Separate from `spec` because it is the mechanism, not the race: the race-file reader, the writer and
the docs' key tables (`racefile/schema.py`) read these declarations back from the fields.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import MISSING, dataclass, field
from typing import Any

from ..errors import OutpostError


class Refused(OutpostError):
    """A value that breaks its key's rule; `at` is where inside the value (an index, a name)."""

    def __init__(self, message: str, at: tuple[str | int, ...] = ()):
        super().__init__(message)
        self.message = message
        self.at = at


@dataclass(frozen=True)
class Key:
    """A race-file key: how its value is checked and what the docs say of it.

    The value's kind comes from the field's type (str, int, float, bool, a tuple of strings, a
    Path, a mapping of strings, a Literal of choices, a nested dataclass) unless `kind` says
    otherwise ("argv": a command line). `type` and `default_text` are the docs' words when the kind and
    the field's default do not say it well."""

    rules: str = ""
    kind: str = ""
    type: str = ""
    default_text: str = ""
    minimum: int | None = None
    maximum: int | None = None
    positive: bool = False  # a number > 0 (otherwise >= 0)
    expected: str = ""  # the "expected ..." words for a value of the wrong kind
    check: Callable[[Any], None] | None = None  # a further rule; raises Refused
    # Keys a race file may give instead of this one, which the reader resolves (brief_file).
    companions: tuple[tuple[str, Key], ...] = ()


@dataclass(frozen=True)
class Table:
    """A top-level table (or array of tables) of the race file, holding a spec dataclass."""

    array: bool = False


def setting(default: Any = MISSING, *, default_factory: Any = MISSING, **declaration: Any) -> Any:
    """A dataclass field that a race file can set (see Key)."""
    return field(default=default, default_factory=default_factory, metadata={"key": Key(**declaration)})


def table(default: Any = MISSING, *, default_factory: Any = MISSING, **declaration: Any) -> Any:
    """A dataclass field holding a race-file table (see Table)."""
    return field(default=default, default_factory=default_factory, metadata={"table": Table(**declaration)})
