"""One candidate's live panel: state, usage against the budget, and its log.

The panel never subscribes to anything: `refresh_from(model)` is called by the screen's timer and
only does work when the candidate's model changed since the last call.
"""

from __future__ import annotations

import time

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Log, Static

from ...engine.model import CandidateModel

FINAL = {"winner", "rejected", "failed", "quota", "cancelled", "skipped"}


def tokens(n: int) -> str:
    return f"{n / 1000:.1f}k" if n >= 1000 else str(n)


class CandidatePanel(Vertical, can_focus=True):
    DEFAULT_CSS = """
    CandidatePanel { border: round $panel-lighten-2; height: 1fr; min-height: 8; padding: 0 1; }
    CandidatePanel .stats { color: $text-muted; }
    CandidatePanel .reason { color: $text-muted; }
    CandidatePanel Log {
        height: 1fr; background: transparent;
        scrollbar-size-horizontal: 0; scrollbar-size-vertical: 1;
        scrollbar-background: $panel; scrollbar-color: $panel-lighten-2;
    }
    CandidatePanel.-running { border: round $status-running 60%; }
    CandidatePanel.-winner { border: round $status-winner; }
    CandidatePanel.-rejected { border: round $status-rejected; }
    CandidatePanel.-failed { border: round $status-failed; }
    CandidatePanel.-quota { border: round $status-quota; }
    CandidatePanel.-cancelled, CandidatePanel.-skipped { border: round $status-cancelled; }
    CandidatePanel:focus.-running, CandidatePanel:focus { border: double $accent; }
    """

    def __init__(self, key: str, agent: str, index: int, clock=time.time) -> None:
        super().__init__(id=f"panel-{key}")
        self.key = key
        self.agent = agent
        self.index = index
        self.clock = clock
        self.border_title = f"{index} {key} · {agent}" if index <= 9 else f"{key} · {agent}"
        self._version = -1
        self._seen = 0
        self.filter: str | None = None

    def compose(self) -> ComposeResult:
        yield Static("", classes="state")
        yield Static("", classes="stats")
        yield Static("", classes="reason")
        log = Log(max_lines=2000, auto_scroll=True)
        log.can_focus = False  # tab moves between candidates, not into their logs
        yield log

    def refresh_from(self, model: CandidateModel, force: bool = False) -> None:
        if model.version == self._version and not force and model.state not in ("running", "validating", "starting"):
            return
        self._version = model.version
        self.query_one(".state", Static).update(self._state_line(model))
        self.query_one(".stats", Static).update(self._stats_line(model))
        reason = model.reason or model.retrying or ""
        self.query_one(".reason", Static).update(Text(reason[:300]))
        for status in FINAL:
            self.set_class(model.state == status, f"-{status}")
        self.set_class(model.state in ("starting", "running", "validating"), "-running")
        log = self.query_one(Log)
        if self.filter is None:
            fresh = model.new_log(self._seen)
            self._seen = model.log_count
            if fresh:
                log.write_lines(fresh)

    def apply_filter(self, model: CandidateModel, text: str | None) -> int:
        """Show only log lines containing `text` (None shows everything); returns the matches."""
        self.filter = text or None
        log = self.query_one(Log)
        log.clear()
        lines = list(model.log)
        if self.filter:
            needle = self.filter.lower()
            lines = [line for line in lines if needle in line.lower()]
        log.write_lines(lines)
        self._seen = model.log_count
        return len(lines)

    def _state_line(self, model: CandidateModel) -> Text:
        text = Text()
        text.append(model.state.upper() if model.state in FINAL else model.state, style="bold")
        if model.attempt:
            text.append(f"  attempt {model.attempt}")
        if model.started_at:
            end = model.finished_at or self.clock()
            text.append(f"  {max(0.0, end - model.started_at):.0f}s")
        if model.last_tool and model.state not in FINAL:
            text.append(f"  ▸ {model.last_tool}", style="italic")
        if model.retrying:
            text.append("  retrying…", style="bold yellow")
        return text

    @staticmethod
    def _stats_line(model: CandidateModel) -> Text:
        u = model.usage
        cost = f"${u.cost_usd:.4f}" + ("~" if u.estimated else "")
        return Text(f"in {tokens(u.input)}  cached {tokens(u.cached)}  out {tokens(u.output)}  {cost}"
                    f"  · {model.lines} lines · {model.tools} tools")
