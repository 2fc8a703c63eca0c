"""The kept work as the review screen (f3) lists it: a row per race, then a row per attempt with how
it ended, what its worktree holds beyond its last commit, its diff stat, size, age, and whether a
process or container still runs in it. Rows are keyed by the attempt's id (RACE/KEY/ATTEMPT), a
race's by `race:` and its id."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from ...engine.kept.retained import RetainedAttempt, RetainedRace, human_age, human_bytes
from ..outcome_style import OUTCOME_STYLE

RACE_ROW = "race:"
COLUMNS = ("attempt", "outcome", "holds", "diff", "size", "age", "live")
# a durable run interrupted mid-attempt
KEPT_STYLE = {**OUTCOME_STYLE, "interrupted": "yellow"}


def holds_cell(row: RetainedAttempt) -> str:
    """What the worktree holds beyond its last commit, in a few characters (legend in the details)."""
    if not row.present:
        return "archived" if row.archive else "branch" if row.head and not row.path else "missing"
    if row.link_changed:
        return "link changed"
    if row.holds is None:
        return "?"
    held = row.holds
    parts = [
        f"{code}{n}"
        for code, n in (
            ("M", held.uncommitted),
            ("?", held.untracked),
            ("!", held.ignored),
            ("H", held.hidden),
        )
        if n
    ]
    return " ".join(parts) or "clean"


def diff_cell(row: RetainedAttempt) -> str:
    stat = row.diff_stat
    return f"{stat['files']}f +{stat['insertions']} -{stat['deletions']}" if stat else "—"


def live_cell(row: RetainedAttempt) -> str:
    marks = []
    if row.occupants:
        marks.append(f"{len(row.occupants)} proc")
    if row.container:
        marks.append("ctr " + str(row.container.get("status") or "?")[:4])
    return ", ".join(marks) or "—"


class KeptTable(DataTable[str | Text]):
    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=True)
        self.add_columns(*COLUMNS)

    def selected_key(self) -> str | None:
        if self.row_count == 0:
            return None
        return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value

    def show(self, races: list[RetainedRace], marked: str | None) -> None:
        """Every race and its attempts (`marked`, the one marked for compare, with a dot); the
        cursor stays on the row it was on, else goes to the first attempt."""
        keep = self.selected_key()
        self.clear()
        for race in races:
            self.add_row(
                Text(f"▾ {race.id}", style="bold"),
                Text(race.status, style="bold"),
                *([""] * (len(COLUMNS) - 2)),
                key=RACE_ROW + race.id,
            )
            for row in race.attempts:
                mark = "● " if row.id == marked else "  "
                self.add_row(
                    f"{mark}{row.key}#{row.attempt}",
                    Text(row.outcome, style=KEPT_STYLE.get(row.outcome, "")),
                    holds_cell(row),
                    diff_cell(row),
                    human_bytes(row.size_bytes) if row.size_bytes is not None else "—",
                    human_age(row.age_seconds),
                    live_cell(row),
                    key=row.id,
                )
        keys = [RACE_ROW + r.id for r in races] + [row.id for race in races for row in race.attempts]
        if keep in keys:
            self.move_cursor(row=self.get_row_index(keep))
        elif races and races[0].attempts:
            self.move_cursor(row=1)
