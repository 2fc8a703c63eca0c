"""How the race screen shows its candidates: as panels, in one to three columns, or as the table
when panels would be too small to show a log; and which candidate a typed number picks."""

from __future__ import annotations

from textual.geometry import Offset

# A terminal this wide (or wider) puts three panels side by side.
WIDE = 180
# A panel shows its five lines and its border in 7 rows: below this many, its log is gone.
PANEL_ROWS_NEEDED = 11
# How long a typed digit waits for the next one to make a number (ten or more candidates).
NUMBER_WINDOW = 0.8


def table_or_columns(count: int, width: int, height: int, choice: str | None) -> tuple[bool, int]:
    """Whether `count` candidates show as the table in a `width` x `height` screen, and else in how
    many columns of panels; `choice` ("table" or "panels") is the operator's, None: whichever fits."""
    columns = 1 if count <= 1 else 3 if width >= WIDE and count >= 3 else 2
    if choice is not None:
        return choice == "table", columns
    rows = -(-count // columns)
    room = max(0, (height or 24) - 5)  # header, two summary lines, footer, margin
    return count > 1 and room // max(1, rows) < PANEL_ROWS_NEEDED, columns


def in_bands(places: dict[str, Offset], size: int) -> list[list[str]]:
    """The panels at `places` (each one's top left corner on screen) in reading order, in bands of
    at most `size` neighbours on one row: what the race screen redraws together."""
    bands: list[list[str]] = []
    for key in sorted(places, key=lambda key: (places[key].y, places[key].x)):
        band = bands[-1] if bands else None
        if band and len(band) < size and places[band[0]].y == places[key].y:
            band.append(key)
        else:
            bands.append([key])
    return bands


class TypedNumber:
    """1-9 pick a candidate at once; with ten or more, digits typed in a row make one number (1
    then 2 picks the twelfth), and 0 completes one (1 then 0 picks the tenth)."""

    def __init__(self) -> None:
        self._last: tuple[int, float] | None = None  # a number being typed, and when

    def pick(self, digit: int, count: int, now: float) -> int | None:
        """The candidate's number (from 1) that `digit`, typed at `now`, picks among `count`."""
        number = digit
        if self._last is not None and now - self._last[1] < NUMBER_WINDOW:
            combined = self._last[0] * 10 + digit
            if combined <= count:
                number = combined
        self._last = (number, now) if count >= 10 else None
        return number if 1 <= number <= count else None
