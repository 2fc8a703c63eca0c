"""The race: a live panel per candidate, the race's usage against its budget, and the controls.

Rendering follows dolphie: the engine fills its model, and a timer (10 per second) redraws only
what changed, in one batched update. Keys (README, "The app"): 1-9 focus a panel, tab cycles, enter
zooms, escape goes back, c cancels, a accepts, x aborts, d shows a diff, / searches a log.
"""

from __future__ import annotations

import time
from typing import cast

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal
from textual.dom import DOMNode
from textual.widgets import DataTable, Input, Static

from ..footer_order import FooterOrder, SteadyFooter
from ..session import RaceSession
from ..widgets.candidate_panel import FINAL, TOKEN_FIELDS, CandidatePanel, duration, fill_style, tokens
from ..widgets.header import OutpostHeader
from .confirm import ConfirmScreen

REFRESH_EVERY = 0.1


# How long a typed digit waits for the next one to make a number (ten or more candidates).
NUMBER_WINDOW = 0.8
WIDE = 180
STATE_STYLE = {
    "winner": "bold green",
    "rejected": "red",
    "failed": "red",
    "quota": "yellow",
    "cancelled": "dim",
    "skipped": "dim",
    "running": "cyan",
    "validating": "bold cyan",
}
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


def _read(path) -> bytes | None:
    try:
        return open(path, "rb").read() if path is not None else None
    except OSError:
        return None


class RaceScreen(FooterOrder):
    CSS_PATH = "race.tcss"
    BINDINGS = [
        Binding("s", "start", "Start", id="race.start"),
        Binding("c", "cancel", "Cancel", id="race.cancel"),
        Binding("a", "accept", "Accept", id="race.accept"),
        Binding("x", "abort", "Abort", id="race.abort"),
        Binding("d", "diff", "Diff", id="race.diff"),
        Binding("enter", "zoom", "Zoom", id="race.zoom"),
        Binding("escape", "back", "Back", id="race.back"),
        Binding("slash", "search", "Search", id="race.search"),
        Binding("v", "results", "Results", id="race.results"),
        Binding("l", "layout", "Layout", id="race.layout", tooltip="Table or panels"),
        *[
            Binding(str(n), f"focus_panel({n})", f"Panel {n}", show=False, id=f"race.panel{n}")
            for n in range(10)
        ],
    ]

    def __init__(self, session: RaceSession, *, start: bool = False, clock=time.time) -> None:
        super().__init__()
        self.session = session
        self.start_now = start
        self.clock = clock
        self._panels: dict[str, CandidatePanel] = {}
        self._model_version = -1
        self._summary_shown: Text | None = None
        self._turn = 0  # the grid row the timer redraws next (see _due)
        # The race file as it was when this screen's spec was read: before the start, the screen
        # runs what the file says now (a save in the configure screen, or an edit elsewhere).
        self.race_file = getattr(session.spec, "path", None)
        self._source = _read(self.race_file)
        # The open race's durable run, when it waits for recovery (f4 opens the wizard on it).
        self.recovery_run: str | None = None
        self._recovery_note: str | None = None
        self._starting = False
        self.rebuilding = False
        self._tampering_shown = 0
        self._warnings_shown = 0
        # key -> state already announced (None: this screen announces nothing, a recorded race)
        self._announced: dict[str, str] | None = {}
        # "table" or "panels" as the operator chose with `l`; None: whichever fits (see fit_layout)
        self.layout_choice: str | None = None
        self._digits: tuple[int, float] | None = None  # a number being typed, and when

    # ------------------------------------------------------------------------- layout

    def compose(self) -> ComposeResult:
        yield OutpostHeader()
        yield Static("", id="summary")
        with Horizontal(id="body"):
            table: DataTable[str | Text] = DataTable(id="table", cursor_type="row", zebra_stripes=True)
            table.can_focus = False  # until fit_layout shows it
            yield table
            with Grid(id="panels"):
                for index, candidate in enumerate(self.session.spec.candidates, 1):
                    panel = CandidatePanel(
                        candidate.key,
                        candidate.agent,
                        index,
                        clock=self.clock,
                        budget=self.session.spec.budget,
                        timeout=candidate.timeout or self.session.spec.budget.candidate_timeout,
                    )
                    self._panels[candidate.key] = panel
                    yield panel
        yield Input(placeholder="search the focused log (enter to filter, escape to clear)", id="search")
        yield SteadyFooter(compact=True)

    def on_mount(self) -> None:
        self.title = f"outpost-tui · {self.session.spec.name}"
        self.set_interval(REFRESH_EVERY, self._tick)
        self._build_table()
        self.fit_layout()
        self.refresh_panels()
        first = next(iter(self._panels.values()), None)
        if first is not None:
            self.select(first.key)
        if self.start_now:
            self.action_start()
        else:
            self._check_durable_run()

    @work(thread=True, group="durable-check", exit_on_error=False)
    def _check_durable_run(self) -> None:
        """A durable race whose saved run was interrupted (or is owned by a coordinator that is
        gone) cannot simply start: say so and offer the wizard."""
        spec = self.session.spec
        if not spec.durability.enabled or not spec.run_id or self.session.started:
            return
        from ...engine.durable import recovery
        from ...engine.errors import OutpostError

        try:
            view = recovery.inspect(spec.repository, spec.run_id)
        except (OutpostError, OSError, ValueError):
            return  # never saved (a first run), or unreadable: starting says why
        coordinator = view.coordinator
        if view.status == "interrupted":
            note = f"durable run {spec.run_id} was interrupted"
        elif view.status == "owned" and coordinator is not None and coordinator.alive is False:
            note = f"durable run {spec.run_id} is owned by a coordinator that is gone ({coordinator.reason})"
        else:
            return
        self.app.call_from_thread(self._needs_recovery, spec.run_id, note)

    def _needs_recovery(self, run_id: str, note: str) -> None:
        if self.session.started:
            return
        self.recovery_run = run_id
        self._recovery_note = note
        self.refresh_panels()
        self.notify(f"{note}: press f4 to recover it", severity="warning", markup=False)

    def _tick(self) -> None:
        self.refresh_panels(rotate=True)

    def _due(self, rotate: bool) -> tuple[set[str], bool]:
        """The panels to redraw now, and whether the summary is due too.

        Every panel, unless `rotate` (the timer): then one row of the grid per tick, in turn. The
        compositor repaints the box around everything that changed, so under a flood of log lines
        eight panels redrawn at once cost a whole-screen paint ten times a second; a row at a time
        keeps each paint to a band, and every panel still moves a few times a second. Panels out of
        sight (the table's hidden ones, the others while one is zoomed) are not drawn at all; a
        zoomed panel, the only one in sight, is drawn on every tick."""
        shown = {key for key, panel in self._panels.items() if panel.display and panel.region}
        if self.maximized is not None:
            shown = {key for key, panel in self._panels.items() if panel is self.maximized}
        if not rotate:
            return set(self._panels), True
        rows = sorted({self._panels[key].region.y for key in shown})
        if len(rows) <= 1:
            return shown, True
        self._turn = (self._turn + 1) % len(rows)
        row = rows[self._turn]
        return {key for key in shown if self._panels[key].region.y == row}, self._turn == 0

    def refresh_panels(self, rotate: bool = False) -> None:
        if self.rebuilding:
            return
        # The race runs in a thread of its own (see RaceSession): one consistent view of its model.
        with self.session.model.lock:
            self._refresh(rotate)

    def _refresh(self, rotate: bool) -> None:
        model = self.session.model
        due, summary_due = self._due(rotate)
        with self.app.batch_update():
            summary = self._summary() if summary_due else self._summary_shown
            if (
                summary is not None and summary != self._summary_shown
            ):  # the clock moves it once a second, not ten times
                # a layout only when its number of rows changes (its lines never wrap)
                rows = summary.plain.count("\n")
                self.query_one("#summary", Static).update(
                    summary,
                    layout=self._summary_shown is None or rows != self._summary_shown.plain.count("\n"),
                )
                self._summary_shown = summary
            for key, panel in self._panels.items():
                if key in due:
                    panel.refresh_from(model.candidates[key])
            if self.table_view:
                self._refresh_table()
            elif (
                self.focused is None
                and getattr(self, "_selected", None) in self._panels
                and self.app.screen is self
            ):
                # the table that had focus was just hidden: its candidate's panel takes it
                self._panels[self._selected].focus()
        for line in model.tampering[self._tampering_shown :]:
            # the one thing that must not scroll by in a log: the user's repository was changed
            self.notify(
                f"your repository was changed: {line}",
                title="repository changed",
                severity="error",
                timeout=30,
                markup=False,
            )
        self._tampering_shown = len(model.tampering)
        for line in model.warnings[self._warnings_shown :]:
            self.notify(line, title="race warning", severity="warning", timeout=30, markup=False)
        self._warnings_shown = len(model.warnings)
        self._announce()

    def _announce(self) -> None:
        """A notification for what an operator must not miss: a winner, a quota (and when it
        resets), the budget running out. Said once each, for what changed while this screen ran."""
        if self._announced is None or not self.session.started:
            return
        model = self.session.model
        for key, candidate in model.candidates.items():
            state = candidate.state
            if self._announced.get(key) == state:
                continue
            self._announced[key] = state
            if state == "winner":
                how = " (accepted by operator)" if candidate.accepted else ""
                self.notify(f"{key} won{how}", title="winner", markup=False)
            elif state == "quota":
                quota = candidate.quota or {}
                reset = quota.get("reset_at")
                self.notify(
                    f"{key} hit its quota: {quota.get('message') or 'usage limit'}"
                    + (f"; resets {reset}" if reset else ""),
                    title="quota",
                    severity="warning",
                    markup=False,
                    timeout=15,
                )
        if model.budget_reason and self._announced.get("") != model.budget_reason:
            self._announced[""] = model.budget_reason
            self.notify(model.budget_reason, title="budget", severity="warning", markup=False, timeout=15)

    def _summary(self) -> Text:
        """The race at a glance: where it stands and for how long, each limited budget as a bar
        (attempts, every limited token dimension, cost), and who leads."""
        spec, model, session = self.session.spec, self.session.model, self.session
        text = self._state_text()
        if session.error:
            return text
        budget, usage = spec.budget, model.usage
        text.append("\n")
        text.append_text(_gauge("attempts", model.attempts, budget.attempts, str))
        for field, label in TOKEN_FIELDS:
            limit = getattr(budget.tokens, field)
            if limit is None and field == "cache_write":
                continue
            text.append_text(_gauge(label, getattr(usage, field), limit, tokens))
        if usage.cost_unknown and not usage.cost_usd:
            text.append(usage.cost_text() + " ")  # nothing to put on a bar
        else:
            cost = _gauge(
                "$", usage.cost_usd, budget.cost_usd, lambda v: f"{v:.4f}" if v < 100 else f"{v:.0f}"
            )
            if usage.estimated:
                cost.append("~")
            if usage.cost_unknown:
                cost.append("+ unknown ")
            text.append_text(cost)
        if model.budget_reason:
            text.append(f"· {model.budget_reason}", style="bold yellow")
        return text

    def leader(self):
        """Who is ahead while nobody has won: the furthest along (validating before running before
        starting), then the busiest, then the first declared."""
        model = self.session.model
        if model.winner or not self.session.running:
            return None
        order = list(model.candidates)
        live = [c for c in model.candidates.values() if c.state in STAGE]
        if not live:
            return None
        return max(live, key=lambda c: (STAGE[c.state], c.tools, c.lines, -order.index(c.key)))

    def _state_text(self) -> Text:
        """The summary's first line: why the race cannot run, how it ended, or where it stands."""
        spec, model, session = self.session.spec, self.session.model, self.session
        text = Text()
        if session.error:
            text.append(f"cannot run: {session.error}", style="bold red")
            return text
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
                text.append(f" {duration(self.clock() - model.started_at)}")
            leader = self.leader()
            if leader is not None:
                text.append(" · leader ")
                text.append(leader.key, style="bold")
                text.append(f" ({leader.state}, {leader.tools} tools)")
            text.append(f" · {spec.mode}, select {spec.select}")
            if model.race_id:
                text.append(f" · race {model.race_id}")
        elif self._recovery_note:
            text.append(f"needs recovery: {self._recovery_note}", style="bold yellow")
            text.append("  · f4 opens the recovery wizard (stop, inspect, release, replay)")
        else:
            text.append("ready: press s to start", style="bold")
            text.append(f"  ({spec.mode}, select {spec.select}, {len(spec.candidates)} candidates)")
        return text

    # ------------------------------------------------------------------- table or panels

    TABLE_COLUMNS = ("#", "candidate", "state", "try", "time", "out", "in", "cost", "last line")
    # A panel shows its five lines and its border in 7 rows: below this many, its log is gone.
    PANEL_ROWS_NEEDED = 11

    @property
    def table_view(self) -> bool:
        return self.has_class("-table")

    def fit_layout(self) -> None:
        """Panels for a few candidates; the table when panels would be too small to show a log
        (or the operator's own choice, `l`)."""
        count = len(self._panels)
        # a wide terminal (200 columns) puts three panels side by side
        columns = 1 if count <= 1 else 3 if self.size.width >= WIDE and count >= 3 else 2
        if self.layout_choice is not None:
            table = self.layout_choice == "table"
        else:
            rows = -(-count // columns)
            room = max(0, (self.size.height or 24) - 5)  # header, two summary lines, footer, margin
            table = count > 1 and room // max(1, rows) < self.PANEL_ROWS_NEEDED
        self.set_class(table, "-table")
        self.query_one("#panels", Grid).styles.grid_size_columns = 1 if table else columns
        # a hidden table must not take focus (its enter would shadow zoom)
        self.query_one("#table", DataTable).can_focus = table

    def on_resize(self) -> None:
        self.fit_layout()

    def action_layout(self) -> None:
        self.layout_choice = "panels" if self.table_view else "table"
        self.fit_layout()
        key = self.focused_key()
        if key is not None:
            self.select(key)

    def _build_table(self) -> None:
        table = self.query_one("#table", DataTable)
        for name in self.TABLE_COLUMNS:
            table.add_column(name, key=name)
        for index, key in enumerate(self._panels, 1):
            table.add_row(str(index), key, *([""] * (len(self.TABLE_COLUMNS) - 2)), key=key)

    def _refresh_table(self) -> None:
        table = self.query_one("#table", DataTable)
        for key, candidate in self.session.model.candidates.items():
            if key not in self._panels:
                continue
            end = candidate.agent_ended_at or candidate.finished_at or self.clock()
            elapsed = duration(end - candidate.agent_started_at) if candidate.agent_started_at else "–"
            last = candidate.log[-1] if candidate.log else ""
            values = {
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
                table.update_cell(key, column, value, update_width=True)

    @on(DataTable.RowSelected, "#table")
    def _row_selected(self) -> None:
        self.action_zoom()  # enter on a row zooms its panel, as enter on a panel does

    @on(DataTable.RowHighlighted, "#table")
    def _row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value is not None and self.table_view:
            self._show_selected(str(event.row_key.value))

    def _show_selected(self, key: str) -> None:
        for other, panel in self._panels.items():
            panel.set_class(other == key, "-selected")
        self._selected = key

    def select(self, key: str) -> None:
        """Make `key` the candidate the keys act on: its panel focused, or its table row."""
        if key not in self._panels:
            return
        self._show_selected(key)
        if self.table_view:
            table = self.query_one("#table", DataTable)
            table.move_cursor(row=table.get_row_index(key))
            table.focus()
        else:
            self._panels[key].focus()
            # a panel that was hidden a moment ago (the table's) takes focus once it is shown
            self.call_after_refresh(self._panels[key].focus)

    # ------------------------------------------------------------- the file on disk

    def file_changed(self) -> bool:
        return (
            self.race_file is not None and not self.session.started and _read(self.race_file) != self._source
        )

    async def reload_from_file(self) -> bool:
        """Before the start: read the race file again if it changed, and show what it says now.
        False when it no longer reads (the error is shown; the screen keeps the previous race)."""
        if not self.file_changed():
            return True
        import anyio.to_thread

        from ...engine.racefile import RaceFileError, load_race

        path = self.race_file
        if path is None:  # file_changed() is False without a file
            return True
        source = _read(path)
        try:
            spec = await anyio.to_thread.run_sync(load_race, path)
        except RaceFileError as error:
            self.notify(f"{error}", severity="error", markup=False, timeout=15)
            return False
        await self.use_session(RaceSession(spec), source)
        return True

    async def use_session(self, session: RaceSession, source: bytes | None = None) -> None:
        """Show (and run) another race: rebuilds the panels for its candidates."""
        self.session = session
        if getattr(self.app, "session", None) is not None:
            self.host.session = session
        self._source = source if source is not None else _read(self.race_file)
        self._panels.clear()
        self.rebuilding = True  # the timer must not draw into widgets being replaced
        try:
            await self.recompose()
            self._summary_shown = None  # a new summary widget: nothing shown yet
        finally:
            self.rebuilding = False
        self._build_table()
        self.fit_layout()
        self.title = f"outpost-tui · {session.spec.name}"
        self.refresh_panels()
        first = next(iter(self._panels.values()), None)
        if first is not None:
            self.select(first.key)
        self.refresh_bindings()

    async def on_screen_resume(self) -> None:
        if not self.session.started:
            await self.reload_from_file()

    FOOTER_FIRST = ("results", "start", "cancel", "accept", "abort")
    FOOTER_LAST = ("zoom", "back", "search", "diff", "layout")

    # ------------------------------------------------------------------------ actions

    def focused_key(self) -> str | None:
        if self.table_view:
            return getattr(self, "_selected", None)
        node: DOMNode | None = self.focused
        while node is not None and not isinstance(node, CandidatePanel):
            node = node.parent
        return node.key if isinstance(node, CandidatePanel) else None

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        session = self.session
        if action == "start":
            return not session.started
        if action == "results":
            return session.result is not None
        if action == "back":
            return (
                self.query_one("#search", Input).has_class("-visible")
                or self.maximized is not None
                or (not session.running and len(self.app.screen_stack) > 2)
            )
        if action == "diff":
            key = self.focused_key()
            return key is not None and self.session.model.candidates[key].branch is not None
        if action in ("cancel", "accept", "abort"):
            # hidden, not greyed, when there is no running race: the footer keeps its room for
            # the keys that still do something
            return session.running
        return True

    def action_start(self) -> None:
        if self.session.started or self._starting:
            return
        self._starting = True
        self.app.run_worker(self._run(), group="race", exclusive=True, exit_on_error=False)
        self.refresh_bindings()

    async def _run(self) -> None:
        try:
            if not await self.reload_from_file():
                return
        finally:
            self._starting = False
        self.recovery_run = self._recovery_note = None
        # a replay's candidates that ended before the crash were announced then, not now
        self._announced = {key: c.state for key, c in self.session.model.candidates.items()}
        await self.session.run()
        self.refresh_panels()
        self.refresh_bindings()
        result = self.session.result
        if getattr(self.app, "ring_bell", False):
            self.app.bell()  # the operator asked to hear a race end (settings.toml: bell = true)
        if result is not None:
            self.notify(
                f"race {result.status}"
                + (f": {result.winner.key} won" if result.winner else "")
                + " · v shows the results",
                title="race over",
                severity="information" if result.winner else "warning",
            )
        elif self.session.error:
            self.notify(self.session.error, severity="error")

    def action_results(self) -> None:
        from .result import ResultScreen

        result = self.session.result
        if result is None:
            return
        self.app.push_screen(
            ResultScreen(
                result.to_json(), race_file=self.race_file, recorded=isinstance(self.session, RecordedSession)
            )
        )

    def action_focus_panel(self, number: int) -> None:
        """1-9 pick a candidate at once; with ten or more, digits typed in a row make one number
        (1 then 2 picks the twelfth), and 0 completes one (1 then 0 picks the tenth)."""
        keys = list(self._panels)
        now = time.monotonic()
        if self._digits is not None and now - self._digits[1] < NUMBER_WINDOW:
            combined = self._digits[0] * 10 + number
            if combined <= len(keys):
                number = combined
        self._digits = (number, now) if len(keys) >= 10 else None
        if 1 <= number <= len(keys):
            self.select(keys[number - 1])

    def action_zoom(self) -> None:
        key = self.focused_key()
        if key is not None:
            self.maximize(self._panels[key])

    def action_back(self) -> None:
        search = self.query_one("#search", Input)
        if search.has_class("-visible"):
            self._close_search(clear=True)
        elif self.maximized is not None:
            self.minimize()
        elif not self.session.running and len(self.app.screen_stack) > 2:
            self.dismiss()

    def action_cancel(self) -> None:
        key = self.focused_key()
        if key is None or not self.session.running:
            return

        def answer(yes: bool | None) -> None:
            if yes and not self.session.cancel(key):
                self.notify(f"{key} has already finished", severity="warning")

        self.app.push_screen(ConfirmScreen(f"Cancel candidate {key}?"), answer)

    def action_accept(self) -> None:
        key = self.focused_key()
        if key is None or not self.session.running:
            return

        def answer(yes: bool | None) -> None:
            if yes:
                self._accept(key)

        self.app.push_screen(
            ConfirmScreen(f"Accept {key} as the winner by hand? Every other candidate is cancelled."), answer
        )

    @work(group="accept")
    async def _accept(self, key: str) -> None:
        why_not = await self.session.accept(key)
        if why_not:
            self.notify(f"cannot accept {key}: {why_not}", severity="warning")

    def action_abort(self) -> None:
        if not self.session.running:
            return

        def answer(yes: bool | None) -> None:
            if yes:
                self.session.abort()

        self.app.push_screen(ConfirmScreen("Abort the race? Every running candidate is cancelled."), answer)

    def action_diff(self) -> None:
        from .diff import DiffScreen

        key = self.focused_key()
        race = self.session.race
        if key is None or race.baseline is None or race.repository is None:
            return
        candidate = self.session.model.candidates.get(key)
        branch = candidate.branch if candidate is not None else None
        if branch is None:
            self.notify(f"{key} has no branch yet", severity="warning")
            return
        self.app.push_screen(
            DiffScreen(
                race.repository, race.baseline, branch, f"{key}: {branch} against {race.baseline[:12]}"
            )
        )

    def action_search(self) -> None:
        if self.focused_key() is None:
            return
        self._search_target = self.focused_key()
        search = self.query_one("#search", Input)
        search.add_class("-visible")
        search.focus()

    @on(Input.Submitted, "#search")
    def _filter(self, event: Input.Submitted) -> None:
        key = getattr(self, "_search_target", None)
        if key is None:
            return
        matches = self._panels[key].apply_filter(self.session.model.candidates[key], event.value)
        self.notify(f"{matches} line(s) match {event.value!r}" if event.value else "filter cleared")
        self._close_search(clear=False)

    def _close_search(self, *, clear: bool) -> None:
        search = self.query_one("#search", Input)
        search.remove_class("-visible")
        key = getattr(self, "_search_target", None)
        if clear and key is not None:
            self._panels[key].apply_filter(self.session.model.candidates[key], None)
            search.value = ""
        if key is not None:
            self.select(key)


# ------------------------------------------------------------------------ recorded races


class RecordedSession:
    """A race that already ran, shaped as the screen reads a RaceSession: started, never running,
    its model filled once from the recorded events."""

    started = True
    running = False
    error = None

    def __init__(self, recording) -> None:
        self.recording = recording
        self.spec = recording.spec
        self.model = recording.model
        self.result = recording.result


READ_ONLY = ("start", "cancel", "accept", "abort")


class RecordedRaceScreen(RaceScreen):
    """A recorded race, read-only: every panel, zoom, log search and diff; the controls that
    would change a race are not offered and say why when pressed."""

    # Same keys and binding ids (a user's rebinding applies here too), hidden from the footer.
    BINDINGS = [
        Binding(b.key, b.action, f"{b.description} (live races only)", show=False, id=b.id)
        for b in RaceScreen.BINDINGS
        if isinstance(b, Binding) and b.action in READ_ONLY
    ]

    def __init__(self, recording) -> None:
        last = recording.last_event_at
        # Read as a RaceSession that never started: the controls that would reach its race are off.
        session = cast(RaceSession, RecordedSession(recording))
        super().__init__(session, clock=(lambda: last) if last else time.time)
        self.recording = recording
        self._announced = None

    def on_mount(self) -> None:
        # Textual calls RaceScreen.on_mount after this one (handlers run up the MRO) and it sets
        # the live title: the recorded one is set once it has run.
        self.call_later(self._recorded_title)

    def _recorded_title(self) -> None:
        race = self.recording.race
        started = (
            time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(race.started_at)) if race.started_at else "?"
        )
        self.title = f"outpost-tui · {self.session.spec.name} · recorded"
        self.sub_title = f"race {race.id}, started {started}"

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        if action == "results":
            return self.session.result is not None
        return True

    def _state_text(self) -> Text:
        if self.session.result is not None:
            return super()._state_text()
        text = Text("unfinished", style="bold")
        text.append("  no race-finished event was recorded: its coordinator was killed, or it still runs")
        return text

    def _read_only(self, what: str) -> None:
        self.notify(f"a recorded race: nothing to {what}", severity="warning")

    def action_start(self) -> None:
        self._read_only("start")

    def action_cancel(self) -> None:
        self._read_only("cancel")

    def action_accept(self) -> None:
        self._read_only("accept")

    def action_abort(self) -> None:
        self._read_only("abort")

    def action_diff(self) -> None:
        from .diff import DiffScreen

        key = self.focused_key()
        baseline = self.recording.baseline
        if key is None or baseline is None:
            return
        branch = self.session.model.candidates[key].branch
        if branch is None:
            self.notify(f"{key} never had a branch", severity="warning")
            return
        self.app.push_screen(
            DiffScreen(
                self.recording.repository, baseline, branch, f"{key}: {branch} against {baseline[:12]}"
            )
        )
