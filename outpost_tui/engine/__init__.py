"""The race engine: no Textual here, ever (a test enforces it).

Public API: `race(...)`, `run_race(spec_or_path)`, `run_race_async(spec)`, `new_race(spec)` (a
`Race` to drive yourself, durable when its spec says so), `build_spec(...)`, `load_race(path)`, and
the spec and result types.
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the checker sees every public name where it lives; the program imports it late
    from .api import build_spec, race, run_race, run_race_async
    from .core.events import Event, EventBus, EventKind
    from .core.result import CandidateRecord, RaceResult
    from .core.spec import BudgetSpec, CandidateSpec, RaceSpec, ScoreSpec, TokenLimits, ValidateSpec
    from .core.statuses import CandidateStatus, RaceStatus
    from .core.usage import Usage
    from .racefile import load_race
    from .racing.coordinator import Race, RaceError

# Every public name is imported on first use (PEP 562): a command that needs only the race-file
# parser must not pay for the coordinator, GitPython and the Docker SDK
# (see tests/cli/test_startup_imports.py).
_PUBLIC = {
    "build_spec": "api",
    "new_race": "api",
    "race": "api",
    "run_race": "api",
    "run_race_async": "api",
    "Race": "racing.coordinator",
    "RaceError": "racing.coordinator",
    "Event": "core.events",
    "EventBus": "core.events",
    "EventKind": "core.events",
    "CandidateRecord": "core.result",
    "RaceResult": "core.result",
    "BudgetSpec": "core.spec",
    "CandidateSpec": "core.spec",
    "RaceSpec": "core.spec",
    "ScoreSpec": "core.spec",
    "TokenLimits": "core.spec",
    "ValidateSpec": "core.spec",
    "CandidateStatus": "core.statuses",
    "RaceStatus": "core.statuses",
    "Usage": "core.usage",
    "load_race": "racefile",
}

__all__ = [
    "BudgetSpec",
    "CandidateRecord",
    "CandidateSpec",
    "CandidateStatus",
    "Event",
    "EventBus",
    "EventKind",
    "Race",
    "RaceError",
    "RaceResult",
    "RaceSpec",
    "RaceStatus",
    "ScoreSpec",
    "TokenLimits",
    "Usage",
    "ValidateSpec",
    "build_spec",
    "load_race",
    "new_race",
    "race",
    "run_race",
    "run_race_async",
]


def __getattr__(name: str) -> object:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
