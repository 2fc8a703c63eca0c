"""The candidates as a table, one row each: what the race screen shows in place of the panels when
there are too many of them to show a log (or when the operator asks for it, `l`).

Like the panels, the table never subscribes to anything: the screen's timer calls `refresh_from`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from rich.text import Text
from textual.widgets import DataTable

from ..outcome_style import OUTCOME_STYLE
from .candidate_panel import FINAL, duration, tokens

if TYPE_CHECKING:
    # the live model's module (and the engine's events it imports) loads with the race, not the panels
    from ...engine.core.model import CandidateModel

STATE_STYLE = {**OUTCOME_STYLE, "running": "cyan", "validating": "bold cyan"}
COLUMNS = ("#", "candidate", "state", "try", "time", "out", "in", "cost", "last line")


class CandidateTable(DataTable[str | Text]):
    """One row per candidate, keyed by the candidate's key."""

    def build(self, keys: Iterable[str]) -> None:
        for name in COLUMNS:
            self.add_column(name, key=name)
        for index, key in enumerate(keys, 1):
            self.add_row(str(index), key, *([""] * (len(COLUMNS) - 2)), key=key)

    def refresh_from(self, candidates: Mapping[str, CandidateModel], clock: Callable[[], float]) -> None:
        """Each candidate in `candidates` (its row's key) as it is now."""
        for key, candidate in candidates.items():
            end = candidate.agent_ended_at or candidate.finished_at or clock()
            elapsed = duration(end - candidate.agent_started_at) if candidate.agent_started_at else "–"
            last = candidate.log[-1] if candidate.log else ""
            values: dict[str, str | Text] = {
                "state": Text(
                    candidate.state.upper() if candidate.state in FINAL else candidate.state,
                    style=STATE_STYLE.get(candidate.state, ""),
                ),
                "try": str(candidate.attempt or ""),
                "time": elapsed,
                "out": tokens(candidate.usage.output),
                "in": tokens(candidate.usage.input),
                "cost": candidate.usage.cost_text(),
                "last line": last[:80],
            }
            for column, value in values.items():
                self.update_cell(key, column, value, update_width=True)
