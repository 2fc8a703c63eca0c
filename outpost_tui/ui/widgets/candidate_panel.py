"""One candidate's live panel: state, its own budget (time against its timeout, tokens and cost
against the race's limits), and its log.

The panel never subscribes to anything: `refresh_from(model)` is called by the screen's timer and
only does work when the candidate's model changed since the last call (or while its clock runs).
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING

from rich.highlighter import Highlighter
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.content import Content
from textual.style import Style
from textual.widget import Widget
from textual.widgets import Static

from ...engine.core.text import visible
from ..css import widget_css
from .panel_log import PanelLog

if TYPE_CHECKING:
    # the live model's module (and the engine's events it imports) loads with the race, and the
    # spec's with the race file's check: the race screen's first frame paints the panels before
    from ...engine.core.model import CandidateModel
    from ...engine.core.spec import BudgetSpec

FINAL = {"winner", "rejected", "failed", "quota", "cancelled", "skipped"}
LIVE = ("starting", "setting up", "running", "validating")
BAR_CELLS = 20
# How full a budget may get before the operator's eye should be drawn to it.
WARN_AT, ALARM_AT = 0.75, 0.9
# Output first, as in the race's header: it is what costs most and what limits usually cap, and
# it stays in view when a narrow panel cuts the line short.
TOKEN_FIELDS = (("output", "out"), ("input", "in"), ("cached", "cached"), ("cache_write", "written"))
# The panel's one-row lines, top to bottom (see `line`).
FIGURES = ("state", "time", "tokens", "cost")


def tokens(n: int) -> str:
    """A token count in at most five characters: 950, 12.3k, 200k, 1.5M."""
    if n < 1000:
        return str(n)
    if round(n / 1000, 1) < 1000:
        value, unit = n / 1000, "k"
    else:
        value, unit = n / 1_000_000, "M"
    text = f"{value:.1f}"
    return (text[:-2] if text.endswith(".0") else text) + unit


def duration(seconds: float) -> str:
    """41s, 2m05s, 15m, 1h20m: short enough to sit next to its limit."""
    whole = max(0, int(seconds))
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        minutes, rest = divmod(whole, 60)
        return f"{minutes}m{rest:02d}s" if rest else f"{minutes}m"
    hours, rest = divmod(whole, 3600)
    return f"{hours}h{rest // 60:02d}m" if rest >= 60 else f"{hours}h"


def fill_style(fraction: float) -> str:
    return "$error" if fraction >= ALARM_AT else "$warning" if fraction >= WARN_AT else "$primary"


class CandidatePanel(Vertical, can_focus=True):
    DEFAULT_CSS = widget_css(__file__)  # candidate_panel.tcss

    def __init__(
        self,
        key: str,
        agent: str,
        index: int,
        clock=time.time,
        *,
        budget: BudgetSpec | None = None,
        timeout: float | None = None,
    ) -> None:
        """budget: the race's limits (the panel shows this candidate's share of them);
        timeout: the candidate's planned timeout, until its agent starts and reports the real one."""
        super().__init__(id=f"panel-{key}")
        self.key = key
        self.agent = agent
        self.index = index
        self.clock = clock
        self.budget = budget  # None: no limits known (yet)
        self.planned_timeout = timeout
        # numbers past 9 are typed as two digits (1 then 2 for the twelfth)
        self.border_title = f"{index} {key} · {agent}"
        self._version = -1
        self._seen = 0
        self.filter: str | None = None
        self._shown_reason = Content("")  # what the reason line shows: nothing, as composed
        self._lines: tuple[PanelFigures, Static] | None = None

    def compose(self) -> ComposeResult:
        yield PanelFigures(classes="figures")
        yield Static("", classes="reason -empty")
        log = PanelLog(max_lines=2000, auto_scroll=True)
        log.can_focus = False  # tab moves between candidates, not into their logs
        yield log

    def on_mount(self) -> None:
        # Anchored: the log follows its end through resizes and zooms until the user scrolls up,
        # and follows again once they scroll back to the end.
        self.query_one(PanelLog).anchor()

    def _line_widgets(self) -> tuple[PanelFigures, Static]:
        """figures and reason (looked up once: a query per line per refresh adds up under a
        flood)."""
        if self._lines is None:
            self._lines = self.query_one(PanelFigures), self.query_one(".reason", Static)
        return self._lines

    def line(self, name: str) -> str:
        """What one of the panel's lines shows now, as text: state, time, tokens, cost or reason."""
        figures, reason = self._line_widgets()
        if name == "reason":
            return str(reason.render())
        return str(figures.lines[FIGURES.index(name)])

    def watch_has_focus(self, _has_focus: bool) -> None:
        # Focus changes the border and nothing else (candidate_panel.tcss styles none of the
        # panel's lines by its focus): Textual would restyle the panel's every line and its log
        # too, and then draw them all again, for each key that moves between panels.
        self.app.stylesheet.update_nodes([self], animate=True)

    def take(self, model: CandidateModel) -> CandidateModel | None:
        """What the panel will draw of the live `model`, copied while the caller holds the model's
        lock: None when nothing changed since it last drew (and no clock runs), and of the log
        only the lines it has not shown yet."""
        if model.version == self._version and model.state not in LIVE:
            return None
        return model.copy(model.log_count if self.filter is not None else self._seen)

    def refresh_from(self, model: CandidateModel, force: bool = False) -> None:
        if model.version == self._version and not force and model.state not in LIVE:
            return
        self._version = model.version
        figures, reason = self._line_widgets()
        figures.show(
            (self.state_line(model), self.time_line(model), self.tokens_line(model), self.cost_line(model))
        )
        why = model.reason or model.retrying or ""
        if model.committed_on_behalf:
            note = f"committed on its behalf: {model.committed_on_behalf}"
            why = f"{note} · {why}" if why else note
        if model.accepted and "accepted by operator" not in why:
            why = "accepted by operator" + (f" · {why}" if why else "")
        if model.tests:  # graded: the counts, then the gate's reason (the settled reason)
            from ...engine.verdict.record import describe_tests

            counts = f"tests {describe_tests(model.tests)}"
            why = f"{counts} · {why}" if why else counts
        if model.review:
            flags = "; ".join(model.review)
            why = f"⚑ review before merging: {flags}" + (f" · {why}" if why else "")
        if model.tampering:
            why = f"⚠ changed your repository: {'; '.join(model.tampering)}" + (f" · {why}" if why else "")
        shown = Content(visible(why[:300]))
        if shown != self._shown_reason:  # up to three rows: its height may change
            self._shown_reason = shown
            reason.update(shown, layout=True)
        reason.set_class(not why, "-empty")
        # one restyle when the state changes, not one per class that changes with it
        self.update_classes(
            {
                "-tampering": bool(model.tampering),
                "-running": model.state in LIVE,
                **{f"-{status}": model.state == status for status in FINAL},
            }
        )
        log = self.query_one(PanelLog)
        if self.filter is None:
            fresh = model.new_log(self._seen)
            self._seen = model.log_count
            if fresh:
                log.write_lines(fresh)

    def apply_filter(self, model: CandidateModel, text: str | None) -> int:
        """Show only log lines containing `text` (None shows everything), the matches
        highlighted, and say on the border that a filter is on; returns the matches."""
        self.filter = text or None
        log = self.query_one(PanelLog)
        log.highlight = self.filter is not None
        log.highlighter = Match(self.filter or "")
        self.set_class(self.filter is not None, "-filtered")
        log.clear()
        lines = list(model.log)
        if self.filter:
            needle = self.filter.lower()
            lines = [line for line in lines if needle in line.lower()]
        log.write_lines(lines)
        self._seen = model.log_count
        self.border_subtitle = (
            f"filter {self.filter!r}: {len(lines)} line(s) · / then escape clears" if self.filter else ""
        )
        return len(lines)

    # ----------------------------------------------------------------------------- lines

    def state_line(self, model: CandidateModel) -> Content:
        parts: list[str | tuple[str, str]] = [
            (model.state.upper() if model.state in FINAL else model.state, "bold")
        ]
        if model.attempt:
            parts.append(f"  attempt {model.attempt}")
        if model.last_tool and model.state not in FINAL:
            parts.append((f"  ▸ {model.last_tool}", "italic"))
        if model.retrying:
            parts.append(("  retrying…", "bold $warning"))
        return Content.assemble(*parts)

    def time_line(self, model: CandidateModel) -> Content:
        """The agent's running time against its timeout (the timeout limits the agent process,
        not the worktree set-up or the validation around it)."""
        limit = model.timeout if model.agent_started_at is not None else self.planned_timeout
        if model.agent_started_at is None:
            if model.state in FINAL or not limit:
                return Content("time –")
            return Content(f"time limit {duration(limit)}")
        end = model.agent_ended_at or model.finished_at or self.clock()
        elapsed = max(0.0, end - model.agent_started_at)
        if not limit:
            return Content(f"time {duration(elapsed)}")
        fraction = min(1.0, elapsed / limit)
        filled = round(fraction * BAR_CELLS)
        return Content.assemble(
            f"time {duration(elapsed)} / {duration(limit)}  ",
            ("█" * filled, fill_style(fraction)),
            "░" * (BAR_CELLS - filled),  # muted where drawn (PanelFigures.render)
        )

    def tokens_line(self, model: CandidateModel) -> Content:
        """Each count, and the race's limit beside it where there is one. Cache writes are shown
        only when limited: they are rarely what an operator watches."""
        usage, limits = model.usage, self.budget.tokens if self.budget is not None else None
        parts: list[str | tuple[str, str]] = []
        for field, label in TOKEN_FIELDS:
            used, limit = getattr(usage, field), getattr(limits, field, None)
            if limit is None and field == "cache_write":
                continue
            if parts:
                parts.append("  ")
            parts.append(f"{label} {tokens(used)}")
            if limit is not None:
                parts.append((f" of {tokens(limit)} race", _share_style(used, limit)))
        return Content.assemble(*parts)

    def cost_line(self, model: CandidateModel) -> Content:
        usage, limit = model.usage, self.budget.cost_usd if self.budget is not None else None
        parts: list[str | tuple[str, str]] = [usage.cost_text() + ("~" if usage.estimated else "")]
        if limit is not None:
            parts.append((f" of ${limit:.2f} race", _share_style(usage.cost_usd, limit)))
        parts.append(f"  · {model.lines} lines · {model.tools} tools")
        return Content.assemble(*parts)


class PanelFigures(Widget):
    """A panel's four one-row lines (state, time, tokens, cost) in one widget, each cut short
    rather than wrapped (CSS). One widget instead of four: the panels' widgets are most of what
    the race screen builds and styles before its first frame."""

    COMPONENT_CLASSES = {"panel-figures--muted"}

    def __init__(self, *, classes: str | None = None) -> None:
        super().__init__(classes=classes)
        self.lines: tuple[Content, ...] = (Content(""),) * len(FIGURES)

    def show(self, lines: tuple[Content, ...]) -> None:
        """Draw `lines` unless they are what is shown: under a flood of log lines most redraws
        change none of them, and each change costs a repaint (never a layout: the height is
        fixed)."""
        if lines != self.lines:
            self.lines = lines
            self.refresh()

    def render(self) -> Content:
        # The muted colour is resolved here, against the panel's background and the current theme
        # (the theme's $text-muted is "auto 60%", which a style inside the content cannot
        # resolve: the time bar's unfilled cells, styled so, were drawn at full strength).
        muted = Style.from_rich_style(self.get_component_rich_style("panel-figures--muted"))
        state, time_, tokens_, cost = self.lines
        bar = str(time_).find("░")  # the time bar's unfilled cells, to the end of its line
        if bar >= 0:
            time_ = time_.stylize(muted, bar)
        return Content("\n").join((state, time_, tokens_.stylize_before(muted), cost.stylize_before(muted)))


class Match(Highlighter):
    """Marks every occurrence of a search text, whatever its case."""

    def __init__(self, needle: str) -> None:
        self.needle = needle

    def highlight(self, text: Text) -> None:
        if self.needle:
            text.highlight_regex(re.compile(re.escape(self.needle), re.IGNORECASE), "bold reverse")


def _share_style(used: float, limit: float) -> str:
    # Only a share that is becoming the race's problem is coloured; the rest stays muted.
    if limit <= 0:
        return "$error"
    fraction = used / limit
    return fill_style(fraction) if fraction >= WARN_AT else ""
