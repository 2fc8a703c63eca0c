"""Crash recovery as a keyboard-first wizard: stop the old coordinator, inspect, release, replay.

Every engine call here blocks (signals and a wait of up to 10 s, checkpoint reads, psutil), so each runs
in a thread worker and hands its result back with `call_from_thread`; the screen only draws what it was
handed. Each step says what it found and which key does what next, so the operator does not need to know
the CLI's order of operations, and no step can be skipped into an unsafe one (releasing a run whose
coordinator still runs, replaying a run that is still owned).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.content import Content
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static
from textual.worker import Worker, WorkerState, get_current_worker

from ...engine.core.spec import RaceSpec
from ...engine.durable import recovery
from ...engine.durable.checkpoint import RevisionChanged, RunSummary
from ...engine.errors import OutpostError
from ..paths import shown_path
from ..recovery_steps import ORDER, STEPS, step_text
from ..widgets.header import OutpostHeader
from ..widgets.recovery_tables import AttemptsTable, RunsTable
from .confirm import ConfirmScreen

STOP_TIMEOUT = 10.0
# What the engine raises for a bad run, storage, race file or repository: each has a one-line message.
EXPECTED = (OutpostError, OSError)


def one_line(error: BaseException | str) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


class RecoveryScreen(Screen[RaceSpec | None]):
    """Recover a durable run whose coordinator crashed. Dismissed with the spec to replay once the
    operator confirms the replay (resume authorised), for the app to start; None when left."""

    CSS_PATH = "recovery.tcss"
    BINDINGS = [
        # Priority so that enter means "next" even while a table has focus.
        Binding("enter", "next", "Next", id="recovery.next", priority=True),
        Binding("s", "stop", "Stop coordinator", id="recovery.stop"),
        Binding("i", "inspect", "Inspect", id="recovery.inspect"),
        Binding("l", "release", "Release", id="recovery.release"),
        Binding("p", "replay", "Replay", id="recovery.replay"),
        Binding("r", "refresh", "Refresh", id="recovery.refresh"),
        Binding("escape", "back", "Back", id="recovery.back"),
    ]

    step: reactive[str] = reactive("choose", bindings=True)
    busy: reactive[str] = reactive("", bindings=True)

    def __init__(
        self, repository: Path, run_id: str | None = None, *, stop_timeout: float = STOP_TIMEOUT
    ) -> None:
        super().__init__()
        self.repository = Path(repository).resolve()
        self.run_id = run_id
        self.stop_timeout = stop_timeout
        self.chose_from_list = run_id is None
        self.view: recovery.RunView | None = None
        self.summaries: list[RunSummary] = []
        self.error = ""
        self.outcome = ""
        self.revision_conflict = False
        self.set_reactive(RecoveryScreen.step, "choose" if run_id is None else "stop")

    # ------------------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        yield OutpostHeader()
        with Vertical():
            yield Static(id="title", markup=False)
            yield Static(id="steps")
            yield RunsTable(id="runs")
            yield Static(id="detail", markup=False)
            yield AttemptsTable(id="attempts")
            yield Static(id="busy", markup=False)
            yield Static(id="outcome", markup=False)
            yield Static(id="error", classes="error", markup=False)
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self._redraw()
        if self.run_id is None:
            self._start("Reading the durable runs…", self._load_runs)
        else:
            self._start("Reading the saved run…", self._inspect_worker, self.run_id, "stop")

    def watch_step(self) -> None:
        if self.is_mounted:
            self._redraw()

    def watch_busy(self) -> None:
        if self.is_mounted:
            self.query_one("#busy", Static).update(self.busy)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("stop", "inspect", "release", "replay") and (
            self.step == "choose" or self.view is None
        ):
            return False
        if self.busy and action != "back":
            return None
        return True

    # ------------------------------------------------------------------------------ drawing

    def _redraw(self) -> None:
        repository = shown_path(self.repository)
        where = f"Recover a durable run in {repository}"
        self.query_one("#title", Static).update(
            where if self.run_id is None else f"Recover run {self.run_id} in {repository}"
        )
        self.query_one("#steps", Static).update(self._indicator())
        choosing = self.step == "choose"
        self.query_one("#runs").display = choosing
        self.query_one("#attempts").display = (
            self.step in ("inspect", "release", "replay") and self.view is not None
        )
        self.query_one("#detail", Static).update(self._detail())
        self.query_one("#outcome", Static).update(self.outcome)
        error = self.error
        if error and self.revision_conflict:
            error += "  (i: inspect again)"
        self.query_one("#error", Static).update(error)
        if choosing:
            self.query_one("#runs").focus()

    def _indicator(self) -> Content:
        parts: list[str | tuple[str, str]] = []
        if self.step == "choose":
            parts += [(" Choose a run ", "bold reverse"), "  "]
        for index, (name, label) in enumerate(STEPS):
            if index:
                parts.append(" · ")
            if name == self.step:
                parts.append((f" {label} ", "bold reverse"))
            else:
                parts.append((f" {label} ", "dim"))
        return Content.assemble(*parts)

    def _detail(self) -> str:
        if self.step == "choose":
            if self.busy:
                return ""
            if not self.summaries:
                return f"No durable runs in {shown_path(self.repository)}."
            return "Choose the run to recover: ↑/↓ to move, enter to choose."
        view = self.view
        if view is None:
            return ""
        return step_text(self.step, view, now=self._now(), stop_timeout=self.stop_timeout)

    def _now(self) -> float:
        # The app may fix its clock (snapshot tests); a bare host app has none.
        clock = getattr(self.app, "clock", None)
        return clock() if callable(clock) else time.time()

    # ------------------------------------------------------------------------------ workers

    def _start(self, what: str, worker: Callable[..., Any], *args: Any) -> None:
        self.busy = what
        worker(*args)

    def _deliver(self, callback: Callable[..., None], *args: Any) -> None:
        """From a worker thread: run `callback` on the app's loop unless the worker was cancelled."""
        if not get_current_worker().is_cancelled:
            self.app.call_from_thread(self._landed, callback, *args)

    def _landed(self, callback: Callable[..., None], *args: Any) -> None:
        if not self.is_attached:
            return
        self.busy = ""
        callback(*args)
        self._redraw()
        self.refresh_bindings()

    def _failed(self, error: BaseException | str) -> None:
        self.error = one_line(error)
        self.revision_conflict = isinstance(error, RevisionChanged)
        self.notify(self.error, severity="error")

    @on(Worker.StateChanged)
    def _worker_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR:
            self.busy = ""
            error = event.worker.error
            self._failed(f"unexpected error: {type(error).__name__}: {one_line(error or 'no detail')}")
            self._redraw()

    @work(thread=True, exclusive=True, group="recovery", exit_on_error=False)
    def _load_runs(self) -> None:
        try:
            summaries = recovery.runs(self.repository)
        except EXPECTED as error:
            self._deliver(self._failed, error)
            return
        self._deliver(self._runs_loaded, summaries)

    def _runs_loaded(self, summaries: list[RunSummary]) -> None:
        self.summaries = summaries
        self.error = ""
        self.query_one("#runs", RunsTable).show(summaries)

    @work(thread=True, exclusive=True, group="recovery", exit_on_error=False)
    def _inspect_worker(self, run_id: str, step: str | None) -> None:
        try:
            view = recovery.inspect(self.repository, run_id)
        except EXPECTED as error:
            self._deliver(self._failed, error)
            return
        self._deliver(self._inspected, view, step, "")

    def _inspected(self, view: recovery.RunView, step: str | None, outcome: str) -> None:
        self.view = view
        self.run_id = view.run_id
        self.error = ""
        self.revision_conflict = False
        self.outcome = outcome
        self.query_one("#attempts", AttemptsTable).show(view, self.repository)
        if step is not None:
            self.step = step

    @work(thread=True, exclusive=True, group="recovery", exit_on_error=False)
    def _stop_worker(self, run_id: str) -> None:
        try:
            gone, reason = recovery.stop(self.repository, run_id, timeout=self.stop_timeout)
            view = recovery.inspect(self.repository, run_id)
        except EXPECTED as error:
            self._deliver(self._failed, error)
            return
        if gone:
            self._deliver(self._inspected, view, "stop", reason)
        else:
            self._deliver(self._stop_failed, view, reason)

    def _stop_failed(self, view: recovery.RunView, reason: str) -> None:
        self._inspected(view, "stop", "")
        self._failed(reason)

    @work(thread=True, exclusive=True, group="recovery", exit_on_error=False)
    def _release_worker(self, run_id: str, revision: str) -> None:
        try:
            new_revision = recovery.release(self.repository, run_id, revision)
            view = recovery.inspect(self.repository, run_id)
        except EXPECTED as error:
            self._deliver(self._failed, error)
            return
        self._deliver(
            self._inspected,
            view,
            "replay",
            f"run {run_id} released (revision {new_revision}); next: replay it (p)",
        )

    @work(thread=True, exclusive=True, group="recovery", exit_on_error=False)
    def _replay_worker(self, run_id: str) -> None:
        try:
            spec = recovery.replay_spec(self.repository, run_id)
        except EXPECTED as error:
            self._deliver(self._failed, error)
            return
        self._deliver(self._hand_over, spec)

    def _hand_over(self, spec: RaceSpec) -> None:
        self.dismiss(spec)

    # ------------------------------------------------------------------------------ actions

    def _confirm(self, question: str, then: Callable[[], None]) -> None:
        def answered(yes: bool | None) -> None:
            if yes:
                then()

        self.app.push_screen(ConfirmScreen(question), answered)

    def _clear_messages(self) -> None:
        self.error = ""
        self.outcome = ""
        self.revision_conflict = False

    def action_next(self) -> None:
        if self.step == "choose":
            self._choose_highlighted()
            return
        view = self.view
        if view is None:
            return
        if self.step == "stop":
            if view.coordinator is not None and view.coordinator.alive:
                self.action_stop()
            else:
                self.step = "inspect"
        elif self.step == "inspect":
            self.step = "release"
        elif self.step == "release":
            if view.owner is None:
                self.step = "replay"
            else:
                self.action_release()
        elif self.step == "replay":
            self.action_replay()

    def action_back(self) -> None:
        if self.step == "choose" or (self.step == "stop" and not self.chose_from_list):
            self.dismiss(None)
            return
        self._clear_messages()
        if self.step == "stop":
            self.view = None
            self.step = "choose"
            self._start("Reading the durable runs…", self._load_runs)
        else:
            self.step = ORDER[ORDER.index(self.step) - 1]

    def action_refresh(self) -> None:
        self._clear_messages()
        self._redraw()
        if self.step == "choose":
            self._start("Reading the durable runs…", self._load_runs)
        elif self.run_id is not None:
            self._start("Reading the saved run…", self._inspect_worker, self.run_id, None)

    def action_inspect(self) -> None:
        self._clear_messages()
        self._redraw()
        self._start("Reading the saved run…", self._inspect_worker, self.run_id, "inspect")

    def action_stop(self) -> None:
        view = self.view
        if view is None:  # check_action keeps the key off until a run is read
            return
        self._clear_messages()
        self.step = "stop"
        if view.owner is None or view.coordinator is None:
            self.outcome = f"no coordinator owns run {view.run_id}: nothing to stop"
        elif view.coordinator.alive is None:
            self.error = f"cannot stop it from here: {view.coordinator.reason}"
        elif not view.coordinator.alive:
            self.outcome = "the coordinator is not running: nothing to stop"
        else:
            pid, host = view.owner.get("pid"), view.owner.get("host")
            self._confirm(
                f"Stop the coordinator of run {view.run_id} (pid {pid} on {host})?\n"
                f"It gets TERM, then KILL if it is still running after {self.stop_timeout:.0f} s.",
                lambda: self._start(
                    f"Stopping pid {pid} (up to {self.stop_timeout:.0f} s)…", self._stop_worker, view.run_id
                ),
            )
        self._redraw()

    def action_release(self) -> None:
        view = self.view
        if view is None:  # check_action keeps the key off until a run is read
            return
        self._clear_messages()
        self.step = "release"
        if view.owner is None:
            self.outcome = f"run {view.run_id} is not owned: nothing to release"
        elif view.coordinator is not None and view.coordinator.alive:
            self.error = f"the coordinator (pid {view.owner.get('pid')}) is still running: stop it first (s)"
        else:
            revision = view.revision
            self._confirm(
                f"Release run {view.run_id} at revision {revision}?",
                lambda: self._start("Releasing…", self._release_worker, view.run_id, revision),
            )
        self._redraw()

    def action_replay(self) -> None:
        view = self.view
        if view is None:  # check_action keeps the key off until a run is read
            return
        self._clear_messages()
        self.step = "replay"
        if view.owner is not None:
            self.error = f"run {view.run_id} is still owned: release it first (l)"
        else:
            self._confirm(
                f"Replay run {view.run_id}? Interrupted attempts start again as new attempts.",
                lambda: self._start("Reading the race file…", self._replay_worker, view.run_id),
            )
        self._redraw()

    # ------------------------------------------------------------------------------ choosing

    @on(DataTable.RowSelected, "#runs")
    def _run_selected(self, event: DataTable.RowSelected) -> None:
        self._choose(event.row_key.value)

    def _choose_highlighted(self) -> None:
        table = self.query_one("#runs", DataTable)
        if table.row_count == 0:
            return
        self._choose(table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value)

    def _choose(self, key: str | None) -> None:
        summary = next((s for s in self.summaries if s.key == key), None)
        if summary is None:
            return
        if summary.run_id is None:
            self.error = one_line(summary.problem or f"{summary.key} cannot be read")
            self._redraw()
            return
        self._clear_messages()
        self._start("Reading the saved run…", self._inspect_worker, summary.run_id, "stop")
