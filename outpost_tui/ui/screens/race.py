"""The race: a live panel per candidate, the race's usage against its budget, and the controls.

Rendering follows dolphie: the engine fills its model, and a timer (20 per second) redraws only
what changed, in one batched update. The first frame shows the panels from the race file's sketch
("preparing…"); the file is checked and the Race built once it is painted, in a thread (see
RaceSession.prepare).
Keys (README, "The app"): 1-9 focus a panel, tab cycles, enter zooms, escape goes back,
c cancels, a accepts, x aborts, d shows a diff, / searches a log.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Grid, Horizontal
from textual.dom import DOMNode
from textual.reactive import Reactive
from textual.widget import Widget
from textual.widgets import DataTable, Input

from ..durable_wait import waiting_for_recovery
from ..footer_order import FooterOrder, SteadyFooter
from ..race_controls import RaceControls
from ..race_layout import TypedNumber, in_bands, table_or_columns
from ..race_notices import RaceNotices
from ..race_source import RaceSource
from ..session import RaceSession
from ..widgets.candidate_panel import CandidatePanel
from ..widgets.candidate_table import CandidateTable
from ..widgets.header import OutpostHeader
from ..widgets.log_search import LogSearch
from ..widgets.race_summary import RaceSummary, state_line, with_budget, with_isolation

if TYPE_CHECKING:
    from ...engine.core.model import CandidateModel

REFRESH_EVERY = 0.05
PANELS_PER_TICK = 1  # see _due


class RaceScreen(FooterOrder, RaceControls):
    CSS_PATH = "race.tcss"
    # Textual repaints the whole screen when the focus moves; the panels that gain and lose it
    # restyle and repaint themselves (their borders), and under a flood of logs a whole-screen
    # paint per key is most of the time a key takes to answer.
    focused: Reactive[Widget | None] = Reactive(None, repaint=False)
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
        self._table: CandidateTable | None = None  # added once shown (see _add_table)
        self._turn = 0  # the band of panels the timer redraws next (see _due)
        self.source = RaceSource(session.sketch.path, session.sketch.source)
        # The open race's durable run, when it waits for recovery (f4 opens the wizard on it).
        self.recovery_run: str | None = None
        self._recovery_note: str | None = None
        self._starting = False
        self.rebuilding = False
        self.notices = RaceNotices(self.notify)
        # "table" or "panels" as the operator chose with `l`; None: whichever fits (see fit_layout)
        self.layout_choice: str | None = None
        self.typed = TypedNumber()

    # ------------------------------------------------------------------------- layout

    def compose(self) -> ComposeResult:
        yield OutpostHeader()
        yield RaceSummary(id="summary")
        with Horizontal(id="body"), Grid(id="panels"):
            for index, (key, agent) in enumerate(self.session.sketch.candidates, 1):
                panel = CandidatePanel(key, agent, index, clock=self.clock)
                self._panels[key] = panel
                yield panel
        if self.session.checked:
            self._limit_panels()
        yield LogSearch(id="search")
        yield SteadyFooter(compact=True)

    def _limit_panels(self) -> None:
        """Each panel's limits, from the checked spec: the race's budget and its own timeout."""
        spec = self.session.spec
        for candidate in spec.candidates:
            panel = self._panels.get(candidate.key)
            if panel is None:  # never: the sketch and the check read the same bytes
                continue
            panel.budget = spec.budget
            panel.planned_timeout = candidate.timeout or spec.budget.candidate_timeout

    def on_mount(self) -> None:
        self.title = f"outpost-tui · {self.session.sketch.name}"
        self.set_interval(REFRESH_EVERY, self._tick)
        self.fit_layout()
        self.refresh_panels()
        first = next(iter(self._panels.values()), None)
        if first is not None:
            self.select(first.key)
        # Painted first, then built (a durable race waiting for recovery is said once it is); a
        # recorded race's session is ready from the start.
        if not self.session.ready:
            self.call_after_refresh(self._prepare, not self.start_now)
        if self.start_now:
            self.call_after_refresh(self.action_start)

    def _prepare(self, check_durable: bool) -> None:
        self.run_worker(self._prepared(self.session, check_durable), group="prepare", exit_on_error=False)

    async def _prepared(self, session: RaceSession, check_durable: bool) -> None:
        ready = await session.prepare()
        if session is not self.session:  # the file was read again meanwhile: that race is shown
            return
        if ready:
            self._limit_panels()
        self.refresh_panels()
        self.refresh_bindings()
        if not ready:
            self.notify(session.error or "", severity="error", markup=False, timeout=15)
        elif check_durable:
            self._check_durable_run()

    @work(thread=True, group="durable-check", exit_on_error=False)
    def _check_durable_run(self) -> None:
        """A durable race whose saved run waits for recovery cannot simply start: say so and offer
        the wizard."""
        spec = self.session.spec
        note = None if self.session.started else waiting_for_recovery(spec)
        if note is not None and spec.run_id:
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
        """The panels to redraw now, and whether what spans the screen (the summary, the table)
        is due too.

        Every panel and all of it, unless `rotate` (the timer): then one band of panels per tick,
        in turn (see in_bands), and the rest once a round. The compositor repaints the box around
        everything that changed, and the event loop answers nothing else meanwhile: under a flood
        of log lines, the panels redrawn at once cost a paint of the screen; a band at a time
        keeps each paint to a panel, and every panel still moves a few times a second. Panels out
        of sight (the table's hidden ones, the others while one is zoomed) are not drawn at all;
        the only one in sight (zoomed, or the table's selected one) on every tick, what spans the
        screen on every other."""
        shown = {key for key, panel in self._panels.items() if panel.display and panel.region}
        if self.maximized is not None:
            shown = {key for key, panel in self._panels.items() if panel is self.maximized}
        if not rotate:
            return set(self._panels), True
        bands = in_bands({key: self._panels[key].region.offset for key in shown}, PANELS_PER_TICK)
        self._turn = (self._turn + 1) % max(2, len(bands))
        if len(bands) <= 1:
            return shown, self._turn == 0
        return set(bands[self._turn]), self._turn == 0

    def refresh_panels(self, rotate: bool = False) -> None:
        if self.rebuilding:
            return
        if not self.session.ready:  # the panels show their candidates; the summary says why not more
            self.query_one("#summary", RaceSummary).show(self._summary())
            return
        due, whole = self._due(rotate)
        table = self.table_view
        model = self.session.model
        # The race runs in a thread of its own (see RaceSession) and waits on the model's lock
        # while the screen holds it: held for one consistent view, copied (of a panel's log only
        # the lines it has not shown), and the drawing done after.
        copies: dict[str, CandidateModel] = {}
        with model.lock:
            for key, candidate in model.candidates.items():
                panel = self._panels.get(key)
                if panel is None:
                    continue
                taken = panel.take(candidate) if key in due else None
                if taken is None and table and whole:
                    taken = candidate.copy(candidate.log_count)  # the table shows its last line
                if taken is not None:
                    copies[key] = taken
            summary = self._summary() if whole else None
            self.notices.say(self.session)
        with self.app.batch_update():
            if summary is not None:
                self.query_one("#summary", RaceSummary).show(summary)
            for key in due & copies.keys():
                self._panels[key].refresh_from(copies[key])
            if table:
                if whole and self._table is not None:  # shown: added by fit_layout
                    self._table.refresh_from(copies, self.clock)
            elif (
                self.focused is None
                and getattr(self, "_selected", None) in self._panels
                and self.app.screen is self
            ):
                # the table that had focus was just hidden: its candidate's panel takes it
                self._panels[self._selected].focus()

    def _whole_log(self, key: str) -> CandidateModel:
        """`key`'s candidate with every line of its log, to filter (copied under the lock: the
        race's thread appends to the live log meanwhile)."""
        model = self.session.model
        with model.lock:
            return model.candidates[key].copy(0)

    def _summary(self) -> Text:
        return with_isolation(self.session, with_budget(self.session, self._state_text()))

    def _state_text(self) -> Text:
        return state_line(self.session, self.clock, self._recovery_note)

    # ------------------------------------------------------------------- table or panels

    @property
    def table_view(self) -> bool:
        return self.has_class("-table")

    def fit_layout(self) -> None:
        """Panels for a few candidates; the table when panels would be too small to show a log
        (or the operator's own choice, `l`)."""
        size = self.size
        table, columns = table_or_columns(len(self._panels), size.width, size.height, self.layout_choice)
        if table and self._table is None:
            self._add_table()
        self.set_class(table, "-table")
        self.query_one("#panels", Grid).styles.grid_size_columns = 1 if table else columns
        if self._table is not None:
            # a hidden table must not take focus (its enter would shadow zoom)
            self._table.can_focus = table

    def _add_table(self) -> None:
        """The table, the first time the screen shows it: a screen of panels never builds one
        (its widget is the dearest of the screen's first frame after the panels)."""
        self._table = CandidateTable(id="table", cursor_type="row", zebra_stripes=True)
        self._table.build(self._panels)
        self.query_one("#body").mount(self._table, before=0)

    def on_resize(self) -> None:
        self.fit_layout()

    def action_layout(self) -> None:
        self.layout_choice = "panels" if self.table_view else "table"
        self.fit_layout()
        key = self.focused_key()
        if key is not None:
            self.select(key)

    @on(DataTable.RowSelected, "#table")
    def _row_selected(self) -> None:
        self.action_zoom()  # enter on a row zooms its panel, as enter on a panel does

    @on(DataTable.RowHighlighted, "#table")
    def _row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value is not None and self.table_view:
            self._show_selected(str(event.row_key.value))

    def _show_selected(self, key: str) -> None:
        for other, panel in self._panels.items():
            # -selected shows a panel in the table view; in the panels' view it changes nothing,
            # and restyling two panels for it would be most of a key's work (a later restyle, as
            # the table view's, applies it)
            panel.set_class(other == key, "-selected", update=self.table_view)
        self._selected = key

    def select(self, key: str) -> None:
        """Make `key` the candidate the keys act on: its panel focused, or its table row."""
        if key not in self._panels:
            return
        self._show_selected(key)
        if self.table_view and self._table is not None:  # shown: added by fit_layout
            table = self._table
            table.move_cursor(row=table.get_row_index(key))
            table.focus()
        else:
            self._panels[key].focus()
            # a panel that was hidden a moment ago (the table's) takes focus once it is shown
            self.call_after_refresh(self._panels[key].focus)

    # ------------------------------------------------------------- the file on disk

    def file_changed(self) -> bool:
        return not self.session.started and self.source.changed()

    async def reload_from_file(self) -> bool:
        """Before the start: read the race file again if it changed, and show what it says now.
        False when it no longer reads (the error is shown; the screen keeps the previous race)."""
        if not self.file_changed():
            return True
        from ...engine.racefile import RaceFileError

        try:
            spec, source = await self.source.reread()
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
        self.source.read_as = source if source is not None else self.source.now()
        self._panels.clear()
        self._table = None  # recomposed without it: fit_layout adds one if it is shown
        self.rebuilding = True  # the timer must not draw into widgets being replaced
        try:
            await self.recompose()
        finally:
            self.rebuilding = False
        self.fit_layout()
        self.title = f"outpost-tui · {session.sketch.name}"
        self.refresh_panels()
        first = next(iter(self._panels.values()), None)
        if first is not None:
            self.select(first.key)
        self.refresh_bindings()
        if not session.ready:
            self._prepare(check_durable=False)

    async def on_screen_resume(self) -> None:
        if not self.session.started:
            await self.reload_from_file()

    RECORDED = False  # a race that already ran (see recorded_race.py)

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
            return not session.started and session.error is None
        if action == "results":
            return session.result is not None
        if action == "back":
            return (
                self.query_one("#search", LogSearch).is_open
                or self.maximized is not None
                or (not session.running and len(self.app.screen_stack) > 2)
            )
        if action == "diff":
            key = self.focused_key()
            return key is not None and session.ready and session.model.candidates[key].branch is not None
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
            ready = await self.session.prepare()
        finally:
            self._starting = False
        if not ready:
            return  # the screen's own preparing says why (_prepared)
        self.recovery_run = self._recovery_note = None
        self.notices.from_now(self.session)
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
            ResultScreen(result.to_json(), race_file=self.source.path, recorded=self.RECORDED)
        )

    def action_focus_panel(self, digit: int) -> None:
        keys = list(self._panels)
        number = self.typed.pick(digit, len(keys), time.monotonic())
        if number is not None:
            self.select(keys[number - 1])

    def action_zoom(self) -> None:
        key = self.focused_key()
        if key is not None:
            self.maximize(self._panels[key])

    def action_back(self) -> None:
        if self.query_one("#search", LogSearch).is_open:
            self._close_search(clear=True)
        elif self.maximized is not None:
            self.minimize()
        elif not self.session.running and len(self.app.screen_stack) > 2:
            self.dismiss()

    NO_BRANCH = "has no branch yet"

    def diff_base(self) -> tuple[Path | None, str | None]:
        """The repository and the commit a candidate's branch is diffed against."""
        race = self.session.race
        return (race.repository, race.baseline) if race is not None else (None, None)

    def action_diff(self) -> None:
        from .diff import DiffScreen

        key = self.focused_key()
        repository, baseline = self.diff_base()
        if key is None or baseline is None or repository is None:
            return
        candidate = self.session.model.candidates.get(key) if self.session.ready else None
        branch = candidate.branch if candidate is not None else None
        if branch is None:
            self.notify(f"{key} {self.NO_BRANCH}", severity="warning")
            return
        title = f"{key}: {branch} against {baseline[:12]}"
        self.app.push_screen(DiffScreen(repository, baseline, branch, title))

    def action_search(self) -> None:
        key = self.focused_key()
        if key is not None and self.session.ready:  # before it, every log is empty
            self.query_one("#search", LogSearch).open_on(key)

    @on(Input.Submitted, "#search")
    def _filter(self, event: Input.Submitted) -> None:
        key = self.query_one("#search", LogSearch).target
        if key is None:
            return
        matches = self._panels[key].apply_filter(self._whole_log(key), event.value)
        self.notify(f"{matches} line(s) match {event.value!r}" if event.value else "filter cleared")
        self._close_search(clear=False)

    def _close_search(self, *, clear: bool) -> None:
        key = self.query_one("#search", LogSearch).close(clear=clear)
        if key is not None:
            if clear:
                self._panels[key].apply_filter(self._whole_log(key), None)
            self.select(key)
