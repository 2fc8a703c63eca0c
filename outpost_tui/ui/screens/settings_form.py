"""The configure screen's forms: one per race-file section, one per candidate (which keys each
edits: form_sections.py; how a field's text stands for a value: field_text.py).

A form holds text; what the text means as a race file is the reader's business. As you type (and
again on ctrl+s) the form hands the would-be file to the reader (`RaceDocument.read`, the code
`outpost-tui check` runs) and shows its error beside the field whose key the error names. The
reader stops at the first error, so the field it names is set back and the rest read again: every
wrong field shows its own error. An empty field removes its key (the default applies); a field
left as it was is not touched, so the file keeps how the user wrote it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Input, Label, Select, Static, TextArea
from textual.worker import Worker

from ...engine.agents import known_agents
from ...engine.core.spec import RaceSpec
from ...engine.racefile import RaceFileError
from ..field_text import FieldTextError, field_text, field_value_of
from ..form_sections import AGENT_OPTIONS, CANDIDATE_FIELDS, Field, agent_fields
from ..race_document import Changes, Key, RaceDocument, error_key

_MISSING_KEY = re.compile(r"^missing key '([A-Za-z0-9_]+)'")


class SettingsForm(ModalScreen[tuple[Changes, RaceSpec] | None]):
    """Edit some keys of the race file; dismisses with the changes and the spec the file would then
    read as, or None (escape)."""

    CSS_PATH = "settings_form.tcss"
    BINDINGS = [
        Binding("ctrl+s", "submit", "Done", id="form.submit"),
        Binding("escape", "cancel", "Cancel", id="form.cancel"),
    ]

    def __init__(self, document: RaceDocument, title: str, fields: Iterable[Field], table: Key = ()) -> None:
        super().__init__()
        self.document = document
        self.title_text = title
        self.fields = tuple(fields)
        self.table = table  # the table the fields' keys are in: () or ("candidates", index)
        self.initial = {
            field.id: field_text(field, document.value(self.path(field))) for field in self.fields
        }
        self.errors: dict[str, str] = {}
        self.live = False
        self.checked = 0  # checks finished (tests wait on it)

    def path(self, field: Field) -> Key:
        return self.table + field.key

    # ------------------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(self.title_text, classes="form-title", markup=False)
            yield Static("", id="form-error", classes="field-error", markup=False)
            for field in self.fields:
                yield from self.compose_field(field)
            yield Static(
                "ctrl+s done   escape cancel   tab next field   empty: the default", classes="form-keys"
            )

    def compose_field(self, field: Field) -> ComposeResult:
        text = self.initial[field.id]
        if field.kind in ("long", "env", "prices"):
            label = field.label + (f" (empty: {field.hint})" if field.hint else "")
            yield Label(label, classes="long-label", id=f"{field.id}-label")
            yield TextArea(text, id=field.id, soft_wrap=True, compact=True)
        else:
            with Horizontal(classes="form-row", id=f"{field.id}-row"):
                yield Label(field.label)
                yield self.input_for(field, text)
        yield Static("", id=f"{field.id}-error", classes="field-error", markup=False)

    def input_for(self, field: Field, text: str) -> Widget:
        if field.kind in ("choice", "bool"):
            choices = field.choices if field.kind == "choice" else ("true", "false")
            options = [(choice, choice) for choice in choices]
            if text and text not in choices:
                options.append((text, text))
            blank = bool(field.hint)
            return Select(
                options,
                value=text if text else (Select.NULL if blank else choices[0]),
                allow_blank=blank,
                prompt=f"({field.hint})" if blank else "Select",
                id=field.id,
                compact=True,
            )
        return Input(text, placeholder=field.hint, id=field.id, compact=True)

    def on_mount(self) -> None:
        if getattr(self.app, "testing", False) or self.app.is_headless:
            for widget in self.query("Input, TextArea"):
                widget.cursor_blink = False  # type: ignore[attr-defined]
        first = next(iter(self.visible_fields()), None)
        if first is not None:
            self.query_one(f"#{first.id}").focus()
        # the fields' own Changed messages at mount are not the user typing
        self.call_after_refresh(setattr, self, "live", True)

    def visible_fields(self) -> list[Field]:
        return list(self.fields)

    # ---------------------------------------------------------------------------- reading

    def text_of(self, field: Field) -> str:
        widget = self.query_one(f"#{field.id}")
        if isinstance(widget, TextArea):
            return widget.text
        if isinstance(widget, Select):
            return "" if widget.value is Select.NULL else str(widget.value)
        return widget.value  # type: ignore[attr-defined]

    def changes(self) -> tuple[Changes, dict[str, str]]:
        """What the form changes (key path -> value, None removes), and the fields whose text is
        no value at all."""
        changes: Changes = {}
        errors: dict[str, str] = {}
        for field in self.visible_fields():  # a hidden field's text is not the agent's to use
            text = self.text_of(field)
            if text == self.initial[field.id]:
                continue
            try:
                changes[self.path(field)] = field_value_of(field, text)
            except FieldTextError as error:
                errors[field.id] = str(error)
        return changes, errors

    def field_for(self, error: RaceFileError) -> Field | None:
        """The field a reader error is about: the one whose key is the longest start of the
        error's key (a missing key is named in the message)."""
        path = error_key(error)
        missing = _MISSING_KEY.match(error.message)
        if missing:
            path += (missing.group(1),)
        best: Field | None = None
        for field in self.visible_fields():
            key = self.path(field)
            if path[: len(key)] == key and (best is None or len(key) > len(self.path(best))):
                best = field
        return best

    async def check(self) -> tuple[Changes, RaceSpec | None, dict[str, str]]:
        """The form's changes, the spec the file would read as (None when it would not), and the
        errors by field id ("form-error": one about no field of this form)."""
        changes, errors = self.changes()
        trying = {
            path: value
            for path, value in changes.items()
            if not any(self.path(field) == path and field.id in errors for field in self.fields)
        }
        spec: RaceSpec | None = None
        for _ in range(len(self.fields) + 1):
            text = self.document.text_with(trying)
            try:
                # the reader runs git to check the repository: off the event loop
                spec = await asyncio.to_thread(self.document.read, text)
                break
            except RaceFileError as error:
                field = self.field_for(error)
                if field is None:
                    errors["form-error"] = str(error)
                    break
                errors.setdefault(field.id, error.message)
                if trying.pop(self.path(field), _ABSENT) is _ABSENT:
                    break  # the error is in what the file already holds: nothing to set back
        return changes, (spec if not errors else None), errors

    # ------------------------------------------------------------------------------ events

    @on(Input.Changed)
    @on(TextArea.Changed)
    @on(Select.Changed)
    def _edited(self) -> None:
        if self.live:
            # annotated: mypy takes the worker's result type from here, not from the coroutine
            _check: Worker[None] = self.run_worker(self._live_check, exclusive=True, group="form-check")

    async def _live_check(self) -> None:
        _, _, errors = await self.check()
        self.show_errors(errors, focus=False)
        self.checked += 1

    def show_errors(self, errors: dict[str, str], focus: bool = True) -> None:
        self.errors = errors
        for line in self.query(".field-error").results(Static):
            field = (line.id or "").removesuffix("-error")
            message = errors.get(line.id or "", "") if line.id == "form-error" else errors.get(field, "")
            line.update(message)
            line.set_class(bool(message), "-shown")
        if focus:
            first = next((field for field in self.visible_fields() if field.id in errors), None)
            if first is not None:
                self.query_one(f"#{first.id}").focus()

    @on(Input.Submitted)
    async def _submitted(self, event: Input.Submitted) -> None:
        event.stop()
        await self.action_submit()

    async def action_submit(self) -> None:
        changes, spec, errors = await self.check()
        self.show_errors(errors)
        if spec is not None:
            self.dismiss((changes, spec))

    def action_cancel(self) -> None:
        self.dismiss(None)


_ABSENT = object()


class CandidateForm(SettingsForm):
    """One candidate's keys (a new one when index is the number of candidates): the options its
    agent uses show, and any other the file already gives it (so it can be removed)."""

    def __init__(self, document: RaceDocument, index: int) -> None:
        self.index = index
        new = index >= document.candidate_count()
        key = document.value(("candidates", index, "key"))
        title = "New candidate" if new else f"Candidate {key}"
        super().__init__(document, title, CANDIDATE_FIELDS, ("candidates", index))
        if new:
            agents = known_agents()
            self.initial["agent"] = ""
            self.default_agent = "claude" if "claude" in agents else agents[0]
        else:
            self.default_agent = ""

    def input_for(self, field: Field, text: str) -> Widget:
        if field.id == "agent":
            return Select(
                [(name, name) for name in known_agents()],
                value=text or self.default_agent,
                allow_blank=False,
                id="agent",
                compact=True,
            )
        return super().input_for(field, text)

    def on_mount(self) -> None:
        self._show_agent_fields()
        super().on_mount()

    @on(Select.Changed, "#agent")
    def _agent_changed(self) -> None:
        self._show_agent_fields()

    def _show_agent_fields(self) -> None:
        agent = self.text_of(next(field for field in self.fields if field.id == "agent"))
        used = agent_fields(agent)
        for field in self.fields:
            if field.id in AGENT_OPTIONS:
                shown = field.id in used or bool(self.initial[field.id])
                self.query_one(f"#{field.id}-row").set_class(not shown, "-hidden")

    def visible_fields(self) -> list[Field]:
        return [
            field
            for field in self.fields
            if field.id not in AGENT_OPTIONS or not self.query_one(f"#{field.id}-row").has_class("-hidden")
        ]
