"""A candidate panel's log: Textual's Log, with writes that cost what the screen shows rather than
what the agent printed.

Eight agents printing 5,000 lines a second hand every panel hundreds of lines per tick, nearly all
of them pushed out of a 2,000-line log before they could be seen. Textual's Log spends Python work
on each line written (a split, a cache discard, a line refresh), starts a thread per write to
measure the new lines' width, and lays the whole screen out again whenever its line count changes
(a panel's log grows by a few lines at every tick of an ordinary race). Here a write splits,
appends and trims the lines in a few C-level calls, measures only the lines it keeps, repaints the
log's own region once, and changes its scrollable size without a layout: the log always shows its
scrollbar (Log's `overflow: scroll`), so its length never changes the size of anything on screen.
Under such a flood every line in sight is new at each redraw: a plain line (printable ASCII, as
agents nearly always print) is drawn as one strip of its text and its padding, where Log builds a
Text and four strips from it. What it shows, line for line, is what Log shows.
"""

from __future__ import annotations

from collections.abc import Iterable

from rich.cells import cell_len
from rich.segment import Segment
from rich.style import Style
from textual.geometry import Region, Size
from textual.strip import Strip
from textual.widget import Widget
from textual.widgets import Log


class PanelLog(Log):
    _style_now: Style | None = None

    def render_lines(self, crop: Region) -> list[Strip]:
        # Log looks its style up for each line it draws, and the lookup walks every ancestor's
        # styles; nothing restyles anything while the lines of one paint are drawn.
        self._style_now = self.rich_style
        try:
            return super().render_lines(crop)
        finally:
            self._style_now = None

    @property
    def rich_style(self) -> Style:
        return self._style_now or super().rich_style

    def _render_line(self, y: int, scroll_x: int, width: int) -> Strip:
        if y >= len(self._lines) or self.highlight or self.text_selection is not None:
            return super()._render_line(y, scroll_x, width)
        line = self._lines[y]
        if not (line.isascii() and line.isprintable()):  # tabs, control codes, wide characters
            return super()._render_line(y, scroll_x, width)
        # Log's strip, cropped and padded to the width: the text, then the padding, each with the
        # offset text selection reads (where in the log's text a cell is)
        style = self.rich_style
        shown = line[scroll_x : scroll_x + width]
        segments = []
        for x, text in ((scroll_x, shown), (scroll_x + len(shown), " " * (width - len(shown)))):
            if text:
                offset = Style.from_meta({"offset": (x, y)})
                segments.append(Segment(text, style + offset if style else offset))
        return Strip(segments, width)

    def write_lines(self, lines: Iterable[str], scroll_end: bool | None = None) -> PanelLog:
        """Write `lines` as Log does: an entry of several lines is split, an empty entry shows
        nothing, and only the last `max_lines` lines are kept."""
        entries = list(lines)
        if not entries:
            return self
        at_end = self.is_vertical_scroll_end
        auto_scroll = self.auto_scroll if scroll_end is None else scroll_end
        written = "\n".join(entries).splitlines()
        if len(written) != len(entries) or "" in entries:
            # an entry with line breaks in it, or an empty one: split entry by entry, as Log does
            written = [line for entry in entries for line in entry.splitlines()]
        if self.max_lines is not None:
            written = written[-self.max_lines :]
        self._width = max(self._width, _width(written))
        self._lines.extend(written)
        if self.max_lines is not None and len(self._lines) > self.max_lines:
            del self._lines[: len(self._lines) - self.max_lines]
        # rendered lines are cached by their index, which every trimmed line shifts
        self._render_line_cache.clear()
        size = Size(self._width, len(self._lines))
        if size != self.virtual_size:
            # what Textual does for a size change that needs no layout (Widget._size_updated)
            self.set_reactive(Widget.virtual_size, size)
            self._scroll_update(size)
        if auto_scroll and at_end and not self.is_vertical_scrollbar_grabbed:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
        self.refresh()
        return self


def _width(lines: list[str]) -> int:
    """The widest line's width in cells, as Log measures it (tabs expanded, control codes one
    cell each); plain ASCII, which nearly every agent prints, is measured by its length."""
    if not lines:
        return 0
    joined = "".join(lines)
    if joined.isascii() and joined.isprintable():
        return max(map(len, lines))
    return max(cell_len(Log._process_line(line)) for line in lines)
