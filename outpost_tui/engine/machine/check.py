"""One finding of `doctor`: a named check, whether it passed (or cannot tell), and whether the race
needs it.

Separate so that each group of checks (the machine's in `doctor`, the container engine's in
`containers`) builds the same record without importing the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool | None  # None: cannot tell without spending tokens or credentials we do not read
    detail: str
    required: bool = False

    @property
    def missing(self) -> bool:
        return self.required and self.ok is False

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "ok": self.ok, "detail": self.detail, "required": self.required}


def missing(checks: list[Check]) -> list[Check]:
    return [check for check in checks if check.missing]
