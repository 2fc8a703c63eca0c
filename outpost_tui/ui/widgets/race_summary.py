"""The race at a glance, above its panels: where it stands and for how long, each limited budget as
a bar (attempts, every limited token dimension, cost), who leads, and a warning line when its
candidates run unisolated.

The text is built from the session's model and spec (`state_line`, `budget_line`); the widget only
repaints when the text changed, and lays the screen out again only when its number of lines did.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual.widgets import Static

from ...engine.core.text import visible
from ...engine.core.usage import Usage
from ..session import RaceSession
from .candidate_panel import TOKEN_FIELDS, duration, fill_style, tokens

# How far along a live candidate is, for the leader.
STAGE = {"starting": 1, "running": 2, "validating": 3, "scoring": 3}
GAUGE_CELLS = 5


def _gauge(label: str, used, limit, shown) -> Text:
    """`label used/limit ████░░░░` against a limit, or `label used` without one."""
    text = Text(f"{label} {shown(used)}" if label != "$" else f"${shown(used)}")
    if limit is None:
        text.append(" ")
        return text
    text.append(f"/{shown(limit)} " if label != "$" else f"/${limit:.2f} ")
    fraction = 1.0 if limit <= 0 else min(1.0, used / limit)
    filled = round(fraction * GAUGE_CELLS)
    style = {"$error": "bold red", "$warning": "yellow", "$primary": "green"}[fill_style(fraction)]
    text.append("█" * filled, style=style)
    text.append("░" * (GAUGE_CELLS - filled), style="dim")
    text.append(" ")
    return text


def leader(session: RaceSession):
    """Who is ahead while nobody has won: the furthest along (validating before running before
    starting), then the busiest, then the first declared."""
    model = session.model
    if model.winner or not session.running:
        return None
    order = list(model.candidates)
    live = [c for c in model.candidates.values() if c.state in STAGE]
    if not live:
        return None
    return max(live, key=lambda c: (STAGE[c.state], c.tools, c.lines, -order.index(c.key)))


def state_line(session: RaceSession, clock: Callable[[], float], recovery_note: str | None) -> Text:
    """The summary's first line: why the race cannot run, how it ended, or where it stands."""
    text = Text()
    if session.error:
        text.append(f"cannot run: {session.error}", style="bold red")
        return text
    if not session.checked:
        text.append("preparing…", style="bold")
        text.append(f"  ({len(session.sketch.candidates)} candidates)")
        return text
    spec = session.spec
    if not session.ready:
        text.append("preparing…", style="bold")
        text.append(f"  ({spec.mode}, select {spec.select}, {len(spec.candidates)} candidates)")
        return text
    model = session.model
    if session.result is not None:
        result = session.result
        if result.winner:
            # the status is "winner" then: say it once, with whom
            text.append(f"winner {result.winner.key}", style="bold")
            text.append(f" on {result.winner.branch} at {str(result.winner.commit)[:12]}")
        else:
            text.append(f"{result.status}", style="bold")
        if result.integration:
            text.append(f"  · integration {result.integration['status']}")
        if model.started_at is not None and model.finished_at is not None:
            text.append(f"  · took {duration(model.finished_at - model.started_at)}")
        if result.error:
            text.append(f"  · {result.error}")
    elif session.started:
        # most telling first: a narrow terminal cuts the end of the line
        text.append("racing", style="bold")
        if model.started_at is not None:
            text.append(f" {duration(clock() - model.started_at)}")
        ahead = leader(session)
        if ahead is not None:
            text.append(" · leader ")
            text.append(ahead.key, style="bold")
            text.append(f" ({ahead.state}, {ahead.tools} tools)")
        text.append(f" · {spec.mode}, select {spec.select}")
        if model.race_id:
            text.append(f" · race {model.race_id}")
    elif recovery_note:
        text.append(f"needs recovery: {recovery_note}", style="bold yellow")
        text.append("  · f4 opens the recovery wizard (stop, inspect, release, replay)")
    else:
        text.append("ready: press s to start", style="bold")
        text.append(f"  ({spec.mode}, select {spec.select}, {len(spec.candidates)} candidates)")
    return text


def with_budget(session: RaceSession, state: Text) -> Text:
    """`state` (the first line), then the budget's bars and why the budget stopped the race, if it
    did; nothing more when the race cannot run."""
    text = state
    if session.error:
        return text
    if not session.checked:  # its limits are not known yet: the line they will take is kept
        text.append("\nchecking the race file…", style="dim")
        return text
    # before the race is built, nothing is used yet: its limits are shown all the same
    model = session.model if session.ready else None
    budget, usage = session.spec.budget, model.usage if model is not None else Usage()
    text.append("\n")
    text.append_text(_gauge("attempts", model.attempts if model else 0, budget.attempts, str))
    for field, label in TOKEN_FIELDS:
        limit = getattr(budget.tokens, field)
        if limit is None and field == "cache_write":
            continue
        text.append_text(_gauge(label, getattr(usage, field), limit, tokens))
    if usage.cost_unknown and not usage.cost_usd:
        text.append(usage.cost_text() + " ")  # nothing to put on a bar
    else:
        cost = _gauge("$", usage.cost_usd, budget.cost_usd, lambda v: f"{v:.4f}" if v < 100 else f"{v:.0f}")
        if usage.estimated:
            cost.append("~")
        if usage.cost_unknown:
            cost.append("+ unknown ")
        text.append_text(cost)
    if model is not None and model.budget_reason:
        text.append(f"· {model.budget_reason}", style="bold yellow")
    return text


def isolation_warning(session: RaceSession) -> str | None:
    """Why candidates run unisolated, if they do: the result's word once the race ended, the
    race's own from its start (a recorded race has only its result)."""
    result = session.result
    isolation = result.isolation if result is not None else None
    if isolation is None:
        race = getattr(session, "race", None)
        isolation = race.isolation if race is not None else None
    warning = (isolation or {}).get("warning")
    return visible(str(warning)) if warning else None


def with_isolation(session: RaceSession, summary: Text) -> Text:
    """`summary`, then the unisolated race's warning on a line of its own: a notification goes
    away, and this is what every candidate could do to the user's repository all race long."""
    warning = isolation_warning(session)
    if warning:
        summary.append("\n")
        summary.append(f"⚠ {warning}", style="bold yellow")
    return summary


class RaceSummary(Static):
    """The summary's widget: remembers what it shows, so that an unchanged text costs nothing."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__("", id=id)
        self.shown: Text | None = None

    def show(self, summary: Text) -> None:
        if summary == self.shown:  # the clock moves it once a second, not ten times
            return
        # a layout only when its number of rows changes (its lines never wrap)
        rows = summary.plain.count("\n")
        self.update(summary, layout=self.shown is None or rows != self.shown.plain.count("\n"))
        self.shown = summary
