"""Configure a race before it starts: every key of the race file, saved back to it.

The screen edits the file's own TOML document (ui/race_document.py): a save changes only the keys
that were edited, so the user's comments, order and formatting stay. Before anything is written the
text is read by the race-file reader (`check`'s code); a text it refuses is not saved, the error is
shown and the file is untouched. The previous content is kept beside the file as `<name>.bak`; the
write is atomic, and a file that does not read back once written gets its previous content again.
"""

from __future__ import annotations

import asyncio
import os
import shlex
from pathlib import Path

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.coordinate import Coordinate
from textual.message import Message
from textual.widgets import DataTable, Footer, Static

from ...engine.core.spec import RaceSpec
from ...engine.racefile import RaceFileError
from ..footer_order import FooterOrder
from ..form_sections import SECTIONS
from ..paths import shown_path
from ..race_document import RaceDocument, RaceFileChanged, backup_path
from ..widgets.header import OutpostHeader
from .confirm import ConfirmScreen
from .settings_form import CandidateForm, SettingsForm


def _seconds(value: float | None) -> str:
    return "none" if value is None else f"{value:g}s"


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def section_summary(name: str, spec: RaceSpec) -> str:
    """One line for a section of the race, as the spec reads."""
    if name == "race":
        concurrency = "all at once" if spec.concurrency is None else str(spec.concurrency)
        brief = f" · brief: {_first_line(spec.brief)}" if spec.brief else ""
        score = (
            f" by {shlex.join(spec.score.command)}" if spec.score is not None and spec.score.command else ""
        )
        return (
            f"{spec.name} · {spec.mode} · select {spec.select}{score} · concurrency {concurrency} · "
            f"base {spec.base}{brief}"
        )
    if name == "validate":
        validate = spec.validate
        if not validate.command:
            return "none: the agent's success is accepted"
        return (
            f"{shlex.join(validate.command)} · {_seconds(validate.timeout)} · gate {validate.gate}"
            + (f" · {validate.repeat} rerun(s)" if validate.repeat else "")
            + (f" · protect {validate.protect_mode}" if validate.protect_mode != "restore" else "")
        )
    if name == "budget":
        budget = spec.budget
        parts = [f"attempts {budget.attempts if budget.attempts is not None else 'no limit'}"]
        parts += [
            f"{dimension.replace('_', '-')} tokens {limit:,}" for dimension, limit in budget.tokens.items()
        ]
        parts.append("cost " + ("no limit" if budget.cost_usd is None else f"${budget.cost_usd:g}"))
        parts.append(f"candidate timeout {_seconds(budget.candidate_timeout)}")
        return " · ".join(parts)
    if name == "sandbox":
        sandbox = spec.sandbox
        if sandbox.provider == "local":
            # how candidates are kept from the user's repository: the one setting not to miss here
            mode = sandbox.isolation
            isolated = "unisolated (as you)" if mode == "none" else f"isolation {mode}"
            writable = f" · writable {', '.join(sandbox.writable)}" if sandbox.writable else ""
            return f"local processes · {isolated}{writable}"
        limits = [
            f"{label} {value}"
            for label, value in (("memory", sandbox.memory), ("cpus", sandbox.cpus), ("pids", sandbox.pids))
            if value is not None
        ]
        return " · ".join([f"{sandbox.provider} {sandbox.image}", f"network {sandbox.network}", *limits])
    if name == "setup":
        return spec.setup.describe() if spec.setup.enabled else "none"
    if name == "prices":
        if not spec.prices:
            return "the built-in price table"
        return " · ".join(
            f"{model} in ${price.input:g} out ${price.output:g}" for model, price in spec.prices.items()
        )
    if name == "durability":
        durability = spec.durability
        if not durability.enabled:
            return "off" + (f" · run id {spec.run_id}" if spec.run_id else "")
        return f"on · run id {spec.run_id} · version {durability.version}" + (
            f" · resume {durability.resume}" if durability.resume else ""
        )
    raise KeyError(name)


class ConfigureScreen(FooterOrder):
    """The race's settings and candidates; edits are kept here until saved (ctrl+s).
    Dismisses with the spec to start (s) or None (escape)."""

    FOOTER_LAST = ("edit",)  # enter edits too (the line under the header says so)

    CSS_PATH = "configure.tcss"
    BINDINGS = [
        Binding("e", "edit", "Edit", id="configure.edit"),
        Binding("n", "add", "New", id="configure.add"),
        Binding("delete", "remove", "Remove", id="configure.remove"),
        Binding("b", "section('budget')", "Budget", id="configure.budget", show=False),
        Binding("ctrl+up", "move(-1)", "Move up", id="configure.move_up", show=False),
        Binding("ctrl+down", "move(1)", "Move down", id="configure.move_down", show=False),
        Binding("ctrl+s", "save", "Save", id="configure.save"),
        Binding("s", "start", "Start", id="configure.start"),
        Binding("escape", "back", "Back", id="configure.back"),
    ]

    class Saved(Message):
        """The race file was written and reads back as spec."""

        def __init__(self, spec: RaceSpec, race_file: Path) -> None:
            super().__init__()
            self.spec = spec
            self.race_file = race_file

    def __init__(self, spec: RaceSpec, race_file: str | os.PathLike[str]) -> None:
        super().__init__()
        self.race_file = Path(race_file).absolute()
        self.document = RaceDocument(self.race_file)
        self.spec = spec  # as the file was read; what `s` starts when nothing changed
        self.working = spec  # as the edited document reads
        self.saving = False

    @property
    def dirty(self) -> bool:
        return self.document.dirty

    # ---------------------------------------------------------------------------- layout

    def compose(self) -> ComposeResult:
        yield OutpostHeader()
        yield Static("", id="file", markup=False)
        yield DataTable(id="sections", cursor_type="row", show_header=False)
        yield DataTable(id="candidates", cursor_type="row", zebra_stripes=True)
        yield Static("", id="configure-status", markup=False)
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.sub_title = f"configure {self.race_file.name}"
        self.query_one("#file", Static).update(
            f"{shown_path(self.race_file)}   enter edit · tab sections/candidates · ctrl+↑↓ order"
        )
        self.query_one("#sections", DataTable).add_columns("Section", "Settings")
        self.query_one("#candidates", DataTable).add_columns("Key", "Agent", "Model", "Brief", "Options")
        self.refresh_view()
        self.query_one("#candidates", DataTable).focus()

    def refresh_view(self, cursor: int | None = None) -> None:
        spec = self.working
        sections = self.query_one("#sections", DataTable)
        section_row = sections.cursor_row
        sections.clear()
        for name, section in SECTIONS.items():
            sections.add_row(section.title, section_summary(name, spec), key=name)
        sections.move_cursor(row=section_row)

        table = self.query_one("#candidates", DataTable)
        row = table.cursor_row if cursor is None else cursor
        table.clear()
        for index, candidate in enumerate(spec.candidates):
            own = (
                self.document.value(("candidates", index, "brief")) is not None
                or self.document.value(("candidates", index, "brief_file")) is not None
            )
            brief = _first_line(candidate.brief) if own else "(the race's brief)"
            options = [
                f"{name} {value}"
                for name, value in (("timeout", candidate.timeout), ("max_turns", candidate.max_turns))
                if value is not None
            ]
            options += [f"{len(candidate.env)} env"] if candidate.env else []
            options += [f"args {shlex.join(candidate.args)}"] if candidate.args else []
            table.add_row(
                candidate.key,
                candidate.agent,
                candidate.model or "(default)",
                brief,
                " · ".join(options),
                key=candidate.key,
            )
        if spec.candidates:
            table.move_cursor(row=max(0, min(row, len(spec.candidates) - 1)))
        if self.dirty:
            self.set_status("unsaved changes: ctrl+s saves, s saves and starts")

    def set_status(self, text: str, error: bool = False) -> None:
        status = self.query_one("#configure-status", Static)
        status.update(text)
        status.set_class(error, "error")

    @property
    def current_index(self) -> int | None:
        count = len(self.working.candidates)
        if not count:
            return None
        row = self.query_one("#candidates", DataTable).cursor_row
        return max(0, min(row, count - 1))

    # --------------------------------------------------------------------------- editing

    @on(DataTable.RowSelected)
    def _row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        if event.data_table.id == "sections":
            self.action_section(str(event.row_key.value))
        else:
            self.action_edit()

    def _edited(self, cursor: int | None = None):
        def done(result: tuple | None) -> None:
            if result is None:
                return
            changes, spec = result
            if changes:
                self.document.apply(changes)
                self.working = spec
                self.refresh_view(cursor)

        return done

    def action_section(self, name: str) -> None:
        section = SECTIONS[name]
        self.app.push_screen(SettingsForm(self.document, section.title, section.fields), self._edited())

    def action_edit(self) -> None:
        if self.focused is self.query_one("#sections"):
            key = (
                self.query_one("#sections", DataTable)
                .coordinate_to_cell_key(Coordinate(self.query_one("#sections", DataTable).cursor_row, 0))
                .row_key.value
            )
            self.action_section(str(key))
            return
        index = self.current_index
        if index is None:
            self.set_status("no candidate to edit: n adds one", error=True)
            return
        self.app.push_screen(CandidateForm(self.document, index), self._edited(index))

    def action_add(self) -> None:
        index = self.document.candidate_count()
        self.app.push_screen(CandidateForm(self.document, index), self._edited(index))

    def action_remove(self) -> None:
        index = self.current_index
        if index is None:
            return
        key = self.working.candidates[index].key
        if len(self.working.candidates) == 1:
            self.set_status(
                f"a race needs at least one candidate: add another (n) before removing {key}", error=True
            )
            return

        def answer(yes: bool | None) -> None:
            if yes:
                self.document.remove_candidate(index)
                self._reread(index)

        self.app.push_screen(ConfirmScreen(f"Remove candidate {key} from the race?"), answer)

    def action_move(self, offset: int) -> None:
        index = self.current_index
        if index is None:
            return
        to = index + offset
        if 0 <= to < len(self.working.candidates):
            self.document.move_candidate(index, to)
            self._reread(to)

    @work(group="configure-read")
    async def _reread(self, cursor: int | None = None) -> None:
        try:
            self.working = await asyncio.to_thread(self.document.read)
        except RaceFileError as error:
            # an edit that is valid alone (a removed candidate) may break another key
            self.set_status(f"the file would not read: {error}", error=True)
            return
        self.refresh_view(cursor)

    # ---------------------------------------------------------------------- save, start

    def action_save(self) -> None:
        if not self.dirty:
            self.set_status("no changes to save")
            return
        self._save(start=False)

    def action_start(self) -> None:
        if self.dirty:
            self._save(start=True)
        elif not self.saving:
            self._start(self.spec)

    @work(group="configure-save")
    async def _save(self, start: bool, overwrite: bool = False) -> None:
        if self.saving:
            return
        self.saving = True
        self.set_status(f"saving {self.race_file.name}…")
        try:
            spec = await asyncio.to_thread(self.document.save, overwrite)
        except RaceFileChanged as changed:
            self._ask_overwrite(str(changed), start)
            return
        except (RaceFileError, OSError) as error:
            self.set_status(f"not saved (the file is unchanged): {error}", error=True)
            self.notify(f"not saved: {error}", severity="error", markup=False)
            return
        finally:
            self.saving = False
        self.spec = self.working = spec
        self.refresh_view()
        self.set_status(
            f"saved {self.race_file} (the previous version is in {backup_path(self.race_file).name})"
        )
        self.app.post_message(self.Saved(spec, self.race_file))
        if start:
            self._start(spec)

    def _ask_overwrite(self, why: str, start: bool) -> None:
        self.set_status(f"not saved: {why}", error=True)

        def answer(yes: bool | None) -> None:
            if yes:
                self._save(start, overwrite=True)

        self.app.push_screen(
            ConfirmScreen(
                f"{why}. Save your edits over it? What is on disk now is kept in "
                f"{backup_path(self.race_file).name}."
            ),
            answer,
        )

    def _start(self, spec: RaceSpec) -> None:
        self._leave(spec)  # the spec to start is the screen's result

    def action_back(self) -> None:
        if not self.dirty:
            self._leave(None)
            return

        def answer(yes: bool | None) -> None:
            if yes:
                self._leave(None)

        self.app.push_screen(ConfirmScreen(f"Discard the unsaved changes to {self.race_file.name}?"), answer)

    def _leave(self, result: RaceSpec | None) -> None:
        if len(self.app.screen_stack) > 1 and self.app.screen is self:
            self.dismiss(result)
