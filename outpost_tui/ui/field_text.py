"""How a form field's text stands for a race-file value, by the field's kind: the text a value is
shown as, and the value a typed text stands for. What the value means is the race-file reader's to
judge; only a text that is no value at all (an unclosed quote) is refused here."""

from __future__ import annotations

import shlex
from typing import Any

from ..engine.errors import OutpostError
from ..engine.racefile import field_value
from .form_sections import Field


class FieldTextError(OutpostError):
    """A field's text that cannot be turned into a TOML value at all (an unclosed quote)."""


def field_text(field: Field, value: Any) -> str:
    """What a field shows for the value the file holds (None: the key is absent)."""
    if value is None:
        return ""
    if field.kind in ("argv", "words"):
        return shlex.join(str(item) for item in value) if isinstance(value, list) else str(value)
    if field.kind == "prices" and isinstance(value, dict):
        return "\n".join(
            " ".join([_quoted(model), *(f"{name}={amount}" for name, amount in table.items())])
            if isinstance(table, dict)
            else f"{_quoted(model)} {table}"
            for model, table in value.items()
        )
    if field.kind == "env" and isinstance(value, dict):
        return "\n".join(f"{name}={item}" for name, item in value.items())
    if field.kind == "bool":
        return "true" if value is True else "false" if value is False else str(value)
    return str(value)


def field_value_of(field: Field, text: str) -> Any:
    """The TOML value a field's text stands for; None removes the key."""
    if not text.strip():
        return None
    if field.kind == "number":
        return field_value(text)
    if field.kind == "bool":
        return {"true": True, "false": False}.get(text, text)
    if field.kind in ("argv", "words"):
        try:
            return shlex.split(text)
        except ValueError as error:
            raise FieldTextError(f"cannot split it as a shell would: {error}") from None
    if field.kind == "prices":
        return _prices(text)
    if field.kind == "env":
        env: dict[str, str] = {}
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            name, equals, item = line.partition("=")
            if not equals:
                raise FieldTextError(f"line {number}: expected NAME=value, found {line.strip()!r}")
            env[name.strip()] = item
        return env
    if field.kind == "long":
        return text
    return text.strip()


def _quoted(name: str) -> str:
    return shlex.quote(name)


def _prices(text: str) -> dict[str, dict[str, Any]]:
    """`model input=3 output=15` lines as [prices] tables; the amounts are the reader's to judge."""
    prices: dict[str, dict[str, Any]] = {}
    for number, line in enumerate(text.splitlines(), 1):
        try:
            words = shlex.split(line)
        except ValueError as error:
            raise FieldTextError(f"line {number}: {error}") from None
        if not words:
            continue
        table: dict[str, Any] = {}
        for word in words[1:]:
            name, equals, amount = word.partition("=")
            if not equals:
                raise FieldTextError(f"line {number}: expected NAME=amount after the model, found {word!r}")
            table[name] = field_value(amount)
        prices[words[0]] = table
    return prices
