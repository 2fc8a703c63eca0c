"""How an attempt's outcome is coloured wherever a table lists it: the race's table, its result, the
work races kept. Tables that list more states (a live race's, an interrupted durable run's) add
theirs to these."""

from __future__ import annotations

OUTCOME_STYLE = {
    "winner": "bold green",
    "rejected": "red",
    "failed": "red",
    "quota": "yellow",
    "cancelled": "dim",
    "skipped": "dim",
}
