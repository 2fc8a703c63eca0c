"""Configure a race before it starts: its candidates and its budget, saved back to the race file.

Saving writes what `dump_race` makes of the edited spec (atomically: temp file, fsync, rename),
then reads it back with `load_race`, the same check `outpost-tui check` makes. If the file does
not read back, the previous content is put back and the error is shown: a save never leaves a race
file that the next run would refuse. Comments in the file do not survive a save (the TOML is
regenerated from the spec).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shlex
from pathlib import Path

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Footer, Header, Input, Label, Select, Static, TextArea

from ...engine.agents import known_agents
from ...engine.files import write_atomically
from ...engine.racefile import RaceFileError, check_budget, dump_race, field_value, load_race
from ...engine.core.spec import KEY_PATTERN, BudgetSpec, CandidateSpec, RaceSpec
from .confirm import ConfirmScreen


def spec_problem(candidates: list[CandidateSpec]) -> str | None:
    """What makes these candidates unusable in a race file (as load_race would say), or None."""
    if not candidates:
        return "no candidates: add at least one (n)"
    seen: set[str] = set()
    for index, candidate in enumerate(candidates):
        if not KEY_PATTERN.fullmatch(candidate.key):
            return f"candidates[{index}].key: invalid key {candidate.key!r}"
        if candidate.key in seen:
            return f"candidates[{index}].key: duplicate key {candidate.key!r}"
        seen.add(candidate.key)
    return None


def save_race(spec: RaceSpec, race_file: Path) -> RaceSpec:
    """Write spec to race_file and return it as load_race reads it back; on a RaceFileError the
    file gets its previous content back and the error is raised."""
    text = dump_race(spec, relative_to=race_file.parent)
    try:
        previous: bytes | None = race_file.read_bytes()
    except FileNotFoundError:
        previous = None
    write_atomically(race_file, text.encode("utf-8"))
    try:
        return load_race(race_file)
    except RaceFileError:
        if previous is None:
            race_file.unlink(missing_ok=True)
        else:
            write_atomically(race_file, previous)
        raise


def _seconds(value: float | None) -> str:
    return "none" if value is None else f"{value:g}s"


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _blink_off(screen: Screen) -> None:
    # Tests and snapshots need a steady cursor; the app's testing flag (or a headless run) says so.
    if getattr(screen.app, "testing", False) or screen.app.is_headless:
        for widget in screen.query("Input, TextArea"):
            widget.cursor_blink = False  # type: ignore[attr-defined]


class FormScreen(ModalScreen):
    """A modal form: ctrl+s (or enter in a one-line field) submits, escape cancels; errors show
    under their field and the form stays open until they are fixed."""

    DEFAULT_CSS = """
    FormScreen { align: center middle; }
    FormScreen > VerticalScroll {
        width: 80%; max-width: 100; height: auto; max-height: 95%; padding: 0 2;
        border: thick $primary; background: $panel;
    }
    FormScreen .form-title { text-style: bold; margin: 1 0; }
    FormScreen Label { margin-top: 1; }
    FormScreen .field-error { color: $error; display: none; }
    FormScreen .field-error.-shown { display: block; }
    FormScreen .form-keys { color: $text-muted; margin: 1 0; }
    FormScreen .-hidden { display: none; }
    """

    def on_mount(self) -> None:
        _blink_off(self)

    def show_errors(self, errors: dict[str, str]) -> None:
        """errors: field id -> message; every other field's error is cleared."""
        for line in self.query(".field-error").results(Static):
            field = (line.id or "").removesuffix("-error")
            message = errors.get(field, "")
            line.update(message)
            line.set_class(bool(message), "-shown")
        first = next(iter(errors), None)
        if first is not None:
            self.query_one(f"#{first}").focus()

    @on(Input.Submitted)
    def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_submit()  # type: ignore[attr-defined]  (each form defines its own)

    def action_cancel(self) -> None:
        self.dismiss(None)


def _error_line(field: str) -> Static:
    return Static("", id=f"{field}-error", classes="field-error", markup=False)


class CandidateForm(FormScreen):
    """Edit one candidate (or a new one when candidate is None); dismisses with the CandidateSpec."""

    BINDINGS = [
        Binding("ctrl+s", "submit", "Done", id="candidate-form.submit"),
        Binding("escape", "cancel", "Cancel", id="candidate-form.cancel"),
    ]

    def __init__(self, candidate: CandidateSpec | None, taken_keys: set[str], base_dir: Path) -> None:
        super().__init__()
        self.candidate = candidate
        self.taken_keys = taken_keys
        self.base_dir = base_dir

    def compose(self) -> ComposeResult:
        candidate = self.candidate
        agents = known_agents()
        agent = candidate.agent if candidate else ("claude" if "claude" in agents else agents[0])
        script = ""
        if candidate and candidate.script is not None:
            script = (candidate.script.relative_to(self.base_dir).as_posix()
                      if candidate.script.is_relative_to(self.base_dir) else str(candidate.script))
        with VerticalScroll():
            title = f"Candidate {candidate.key}" if candidate else "New candidate"
            yield Static(title, classes="form-title", markup=False)
            yield Label("Key (letters, digits, _ and -)")
            yield Input(candidate.key if candidate else "", id="key")
            yield _error_line("key")
            yield Label("Agent")
            yield Select([(name, name) for name in agents], value=agent, allow_blank=False,
                         id="agent")
            yield Label("Model (empty: the agent's default)")
            yield Input((candidate.model or "") if candidate else "", id="model")
            with Vertical(id="command-field"):
                yield Label("Command (the program and its arguments, split as a shell would)")
                command = shlex.join(candidate.command) if candidate and candidate.command else ""
                yield Input(command, id="command")
                yield _error_line("command")
            with Vertical(id="script-field"):
                yield Label("Script (the demo session to play, relative to the race file)")
                yield Input(script, id="script")
                yield _error_line("script")
            yield Label("Brief (the task, given to the agent on stdin)")
            yield TextArea(candidate.brief if candidate else "", id="brief", soft_wrap=True)
            yield _error_line("brief")
            yield Static("ctrl+s done   escape cancel", classes="form-keys")

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#brief", TextArea).styles.height = 8
        self._show_agent_fields(str(self.query_one("#agent", Select).value))
        self.query_one("#key", Input).focus()

    @on(Select.Changed, "#agent")
    def _agent_changed(self, event: Select.Changed) -> None:
        self._show_agent_fields(str(event.value))

    def _show_agent_fields(self, agent: str) -> None:
        self.query_one("#command-field").set_class(agent != "command", "-hidden")
        self.query_one("#script-field").set_class(agent != "demo", "-hidden")

    def action_submit(self) -> None:
        errors: dict[str, str] = {}
        key = self.query_one("#key", Input).value.strip()
        if not KEY_PATTERN.fullmatch(key):
            errors["key"] = (f"invalid key {key!r}: use letters, digits, '_' and '-', starting "
                             "with a letter or digit (at most 64 characters)")
        elif key in self.taken_keys:
            errors["key"] = f"another candidate already has the key {key!r}"
        agent = str(self.query_one("#agent", Select).value)
        model = self.query_one("#model", Input).value.strip() or None

        command: tuple[str, ...] | None = None
        if agent == "command":
            text = self.query_one("#command", Input).value
            try:
                command = tuple(shlex.split(text))
            except ValueError as error:
                errors["command"] = f"cannot split the command: {error}"
            else:
                if not command:
                    errors["command"] = 'agent "command" needs a command to run, e.g. python agent.py'

        script: Path | None = None
        if agent == "demo":
            text = self.query_one("#script", Input).value.strip()
            path = (self.base_dir / Path(text).expanduser()).resolve() if text else None
            if path is None:
                errors["script"] = 'agent "demo" needs a script file'
            elif not path.is_file():
                errors["script"] = f"no such file: {path}"
            script = path

        brief = self.query_one("#brief", TextArea).text
        if not brief.strip():
            errors["brief"] = "the brief is empty: say what the agent should do"

        self.show_errors(errors)
        if errors:
            return
        base = self.candidate or CandidateSpec(key=key, agent=agent, brief=brief)
        self.dismiss(dataclasses.replace(base, key=key, agent=agent, model=model, brief=brief,
                                         command=command, script=script))


class BudgetForm(FormScreen):
    """Edit the race's budget; an empty field means no limit. Every field is checked as you type
    by the rules `check` applies to [budget], in its words. Dismisses with the BudgetSpec."""

    BINDINGS = [
        Binding("ctrl+s", "submit", "Done", id="budget-form.submit"),
        Binding("escape", "cancel", "Cancel", id="budget-form.cancel"),
    ]
    FIELDS = (
        ("attempts", "Attempts (agent runs the race may start; empty: no limit)"),
        ("output", "Output tokens (across every candidate; empty: no limit)"),
        ("input", "Uncached input tokens (empty: no limit)"),
        ("cached", "Cached input tokens (empty: no limit)"),
        ("cache_write", "Cache-write tokens (empty: no limit)"),
        ("cost_usd", "Cost in USD (empty: no limit)"),
        ("candidate_timeout", "Candidate timeout in seconds (empty: none)"),
    )
    TOKEN_FIELDS = ("output", "input", "cached", "cache_write")

    def __init__(self, budget: BudgetSpec) -> None:
        super().__init__()
        self.budget = budget

    def compose(self) -> ComposeResult:
        limits = self.budget.tokens
        values = {"attempts": self.budget.attempts, "cost_usd": self.budget.cost_usd,
                  "candidate_timeout": self.budget.candidate_timeout,
                  **{name: getattr(limits, name) for name in self.TOKEN_FIELDS}}
        with VerticalScroll():
            yield Static("Budget", classes="form-title")
            for field, label in self.FIELDS:
                value = values[field]
                yield Label(label)
                yield Input("" if value is None else f"{value:g}" if isinstance(value, float)
                            else str(value), id=field)
                yield _error_line(field)
            yield Static("ctrl+s done   escape cancel", classes="form-keys")

    def on_mount(self) -> None:
        super().on_mount()
        self.query_one("#attempts", Input).focus()

    def table(self) -> dict:
        """The fields as the [budget] table the race file would hold (empty fields left out)."""
        table: dict = {}
        tokens: dict = {}
        for field, _ in self.FIELDS:
            text = self.query_one(f"#{field}", Input).value.strip()
            if not text:
                continue
            (tokens if field in self.TOKEN_FIELDS else table)[field] = field_value(text)
        if tokens:
            table["tokens"] = tokens
        return table

    def check(self) -> tuple[BudgetSpec | None, dict[str, str]]:
        """The budget, or the errors by field; the race file's rules give one error at a time,
        so each field is checked alone and every wrong field shows its own."""
        errors: dict[str, str] = {}
        table = self.table()
        for field, _ in self.FIELDS:
            alone = ({"tokens": {field: table["tokens"][field]}} if field in table.get("tokens", {})
                     else {field: table[field]} if field in table else None)
            if alone is None:
                continue
            try:
                check_budget(alone)
            except RaceFileError as error:
                errors[field] = error.message
        if errors:
            return None, errors
        return check_budget(table), {}

    @on(Input.Changed)
    def _typed(self, event: Input.Changed) -> None:
        _, errors = self.check()
        field = event.input.id or ""
        # as you type: this field's error appears or goes; the others keep what they showed
        for line in self.query(f"#{field}-error").results(Static):
            line.update(errors.get(field, ""))
            line.set_class(field in errors, "-shown")

    def action_submit(self) -> None:
        budget, errors = self.check()
        self.show_errors(errors)
        if budget is None:
            return
        # what the form does not show is kept as the race file had it
        self.dismiss(dataclasses.replace(budget, unreachable_timeout=self.budget.unreachable_timeout))


class ConfigureScreen(Screen[RaceSpec | None]):
    """The race's settings and candidates; edits are kept here until saved (ctrl+s).
    Dismisses with the spec to start (s) or None (escape)."""

    DEFAULT_CSS = """
    ConfigureScreen #race-summary, ConfigureScreen #budget-summary {
        height: auto; padding: 0 1; background: $panel;
    }
    ConfigureScreen #budget-summary { margin-bottom: 1; }
    ConfigureScreen #candidates { height: 1fr; }
    ConfigureScreen #configure-status { height: auto; padding: 0 1; color: $text-muted; }
    ConfigureScreen #configure-status.error { color: $error; text-style: bold; }
    """
    BINDINGS = [
        Binding("e", "edit", "Edit", id="configure.edit"),
        Binding("n", "add", "New", id="configure.add"),
        Binding("delete", "remove", "Remove", id="configure.remove"),
        Binding("b", "budget", "Budget", id="configure.budget"),
        Binding("ctrl+s", "save", "Save", id="configure.save"),
        Binding("s", "start", "Start", id="configure.start"),
        Binding("escape", "back", "Back", id="configure.back"),
    ]

    class StartRequested(Message):
        """The operator asked to start the race as configured (and saved)."""

        def __init__(self, spec: RaceSpec) -> None:
            super().__init__()
            self.spec = spec

    class Saved(Message):
        """The race file was written and reads back as spec."""

        def __init__(self, spec: RaceSpec, race_file: Path) -> None:
            super().__init__()
            self.spec = spec
            self.race_file = race_file

    def __init__(self, spec: RaceSpec, race_file: str | os.PathLike[str]) -> None:
        super().__init__()
        self.spec = spec
        self.race_file = Path(race_file).absolute()
        self.candidates: list[CandidateSpec] = list(spec.candidates)
        self.budget: BudgetSpec = spec.budget
        self.dirty = False
        self.saving = False

    # ---------------------------------------------------------------------------- layout

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("", id="race-summary", markup=False)
        yield Static("", id="budget-summary", markup=False)
        yield DataTable(id="candidates", cursor_type="row", zebra_stripes=True)
        yield Static("", id="configure-status", markup=False)
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.sub_title = f"configure {self.race_file.name}"
        self.query_one("#candidates", DataTable).add_columns("Key", "Agent", "Model", "Brief")
        self.refresh_view()
        self.query_one("#candidates", DataTable).focus()

    def working_spec(self) -> RaceSpec:
        return dataclasses.replace(self.spec, candidates=tuple(self.candidates), budget=self.budget)

    def refresh_view(self, cursor: int | None = None) -> None:
        spec = self.spec
        concurrency = spec.concurrency if spec.concurrency is not None else "all"
        validate = shlex.join(spec.validate.command) if spec.validate.command else "none"
        self.query_one("#race-summary", Static).update(
            f"Race {spec.name}   mode {spec.mode}   select {spec.select}   concurrency {concurrency}\n"
            f"File {self.race_file}\n"
            f"Validate {validate}   (timeout {_seconds(spec.validate.timeout)})"
            + (f"\nSetup {spec.setup.describe()}   (edit [setup] in the file)" if spec.setup.enabled
               else ""))
        budget = self.budget
        cost = "none" if budget.cost_usd is None else f"${budget.cost_usd:g}"
        output = "none" if budget.tokens.output is None else f"{budget.tokens.output:,}"
        attempts = "none" if budget.attempts is None else str(budget.attempts)
        self.query_one("#budget-summary", Static).update(
            f"Budget attempts {attempts}   output tokens {output}   cost {cost}   "
            f"candidate timeout {_seconds(budget.candidate_timeout)}   (b edits)")

        table = self.query_one("#candidates", DataTable)
        row = table.cursor_row if cursor is None else cursor
        table.clear()
        for candidate in self.candidates:
            table.add_row(candidate.key, candidate.agent, candidate.model or "(default)",
                          _first_line(candidate.brief), key=candidate.key)
        if self.candidates:
            table.move_cursor(row=max(0, min(row, len(self.candidates) - 1)))
        if self.dirty:
            self.set_status("unsaved changes: ctrl+s saves, s saves and starts")

    def set_status(self, text: str, error: bool = False) -> None:
        status = self.query_one("#configure-status", Static)
        status.update(text)
        status.set_class(error, "error")

    def _changed(self, cursor: int | None = None) -> None:
        self.dirty = True
        self.refresh_view(cursor)

    @property
    def current_index(self) -> int | None:
        if not self.candidates:
            return None
        row = self.query_one("#candidates", DataTable).cursor_row
        return max(0, min(row, len(self.candidates) - 1))

    # --------------------------------------------------------------------------- editing

    @on(DataTable.RowSelected, "#candidates")
    def _row_selected(self) -> None:
        self.action_edit()

    def action_edit(self) -> None:
        index = self.current_index
        if index is None:
            self.set_status("no candidate to edit: n adds one", error=True)
            return
        candidate = self.candidates[index]
        taken = {other.key for other in self.candidates if other is not candidate}

        def edited(result: CandidateSpec | None) -> None:
            if result is not None and result != candidate:
                self.candidates[index] = result
                self._changed(index)

        self.app.push_screen(CandidateForm(candidate, taken, self.race_file.parent), edited)

    def action_add(self) -> None:
        taken = {candidate.key for candidate in self.candidates}

        def added(result: CandidateSpec | None) -> None:
            if result is not None:
                self.candidates.append(result)
                self._changed(len(self.candidates) - 1)

        self.app.push_screen(CandidateForm(None, taken, self.race_file.parent), added)

    def action_remove(self) -> None:
        index = self.current_index
        if index is None:
            return
        key = self.candidates[index].key

        def answer(yes: bool | None) -> None:
            if yes:
                del self.candidates[index]
                self._changed(index)

        self.app.push_screen(ConfirmScreen(f"Remove candidate {key} from the race?"), answer)

    def action_budget(self) -> None:
        def edited(result: BudgetSpec | None) -> None:
            if result is not None and result != self.budget:
                self.budget = result
                self._changed()

        self.app.push_screen(BudgetForm(self.budget), edited)

    # ---------------------------------------------------------------------- save, start

    def action_save(self) -> None:
        if not self.dirty:
            # Writing an unchanged race would only lose the file's comments.
            self.set_status("no changes to save")
            return
        self._save(start=False)

    def action_start(self) -> None:
        if self.dirty:
            self._save(start=True)
        elif not self.saving:
            self._start(self.spec)

    @work(group="configure-save")
    async def _save(self, start: bool) -> None:
        if self.saving:
            return
        problem = spec_problem(self.candidates)
        if problem is not None:
            self.set_status(f"not saved: {problem}", error=True)
            return
        self.saving = True
        self.set_status(f"saving {self.race_file.name}…")
        try:
            # load_race runs git to check the repository: keep it off the event loop.
            spec = await asyncio.to_thread(save_race, self.working_spec(), self.race_file)
        except (RaceFileError, ValueError, OSError) as error:
            self.set_status(f"not saved (the file is unchanged): {error}", error=True)
            self.notify(f"not saved: {error}", severity="error", markup=False)
            return
        finally:
            self.saving = False
        self.spec = spec
        self.candidates = list(spec.candidates)
        self.budget = spec.budget
        self.dirty = False
        self.refresh_view()
        self.set_status(f"saved {self.race_file}")
        self.app.post_message(self.Saved(spec, self.race_file))
        if start:
            self._start(spec)

    def _start(self, spec: RaceSpec) -> None:
        # The message goes to the app directly: this screen is leaving and would not bubble it.
        self.app.post_message(self.StartRequested(spec))
        self._leave(spec)

    def action_back(self) -> None:
        if not self.dirty:
            self._leave(None)
            return

        def answer(yes: bool | None) -> None:
            if yes:
                self._leave(None)

        self.app.push_screen(ConfirmScreen(f"Discard the unsaved changes to {self.race_file.name}?"),
                             answer)

    def _leave(self, result: RaceSpec | None) -> None:
        if len(self.app.screen_stack) > 1 and self.app.screen is self:
            self.dismiss(result)
