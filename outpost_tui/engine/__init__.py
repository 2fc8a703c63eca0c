"""The race engine: no Textual here, ever (a test enforces it).

Public API: `race(...)`, `run_race(spec_or_path)`, `run_race_async(spec)`, `build_spec(...)`,
`load_race(path)`, and the spec and result types.
"""

from .api import build_spec, race, run_race, run_race_async
from .coordinator import Race, RaceError
from .events import Event, EventBus, EventKind
from .result import CandidateRecord, RaceResult
from .spec import BudgetSpec, CandidateSpec, RaceSpec, ScoreSpec, TokenLimits, ValidateSpec
from .statuses import CandidateStatus, RaceStatus
from .usage import Usage

__all__ = [
    "BudgetSpec", "CandidateRecord", "CandidateSpec", "CandidateStatus", "Event", "EventBus",
    "EventKind", "Race", "RaceError", "RaceResult", "RaceSpec", "RaceStatus", "ScoreSpec",
    "TokenLimits", "Usage", "ValidateSpec", "build_spec", "load_race", "race", "run_race",
    "run_race_async",
]


def __getattr__(name: str):
    # The race-file parser is imported lazily so the engine stays cheap to import.
    if name == "load_race":
        from .racefile import load_race

        return load_race
    raise AttributeError(name)
