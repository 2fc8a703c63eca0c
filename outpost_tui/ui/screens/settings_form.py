"""The configure screen's forms: one per race-file section, one per candidate.

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
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Input, Label, Select, Static, TextArea
from textual.worker import Worker

from ...engine.agents import adapter_for, known_agents
from ...engine.core.spec import CandidateSpec, RaceSpec
from ...engine.errors import OutpostError
from ...engine.racefile import RaceFileError, field_value, schema
from ..race_document import Changes, Key, RaceDocument, error_key

_MISSING_KEY = re.compile(r"^missing key '([A-Za-z0-9_]+)'")


@dataclass(frozen=True)
class Field:
    """One key of the race file as a form field. `key` is the path inside the form's table."""

    key: Key
    label: str
    # text | number | choice | bool | argv | words | long | env | prices (the last three: a TextArea)
    kind: str = "text"
    hint: str = ""  # what an empty field means
    choices: tuple[str, ...] = ()
    name: str = ""  # the widget id, when the key's last part is not unique in its form

    @property
    def id(self) -> str:
        return self.name or str(self.key[-1])


@dataclass(frozen=True)
class Section:
    name: str  # the table it edits ("" for fields in several tables)
    title: str
    fields: tuple[Field, ...]


# How each kind of race-file value is typed into a form (kinds: racefile/schema.py).
_FORM_KINDS = {
    "string": "text",
    "file": "text",
    "choice": "choice",
    "integer": "number",
    "number": "number",
    "boolean": "bool",
    "strings": "words",
    "argv": "argv",
    "env": "env",
}


def _option(path: tuple[str, ...]) -> schema.Option:
    """The schema's declaration of a key path (`budget.tokens.output`, a candidate's `model`)."""
    tables = {**schema.sections(), **schema.ARRAYS}
    cls, names = (tables[path[0]], path[1:]) if len(path) > 1 else (CandidateSpec, path)
    for name in names[:-1]:
        nested = schema.option(cls, name).nested
        assert nested is not None, f"{name} is a table"  # only tables lead further along a path
        cls = nested
    return schema.option(cls, names[-1])


def _f(path: str, label: str, hint: str = "", *, long: bool = False, name: str = "") -> Field:
    """A field for a key; its kind and choices are the schema's."""
    key = tuple(path.split("."))
    option = _option(key)
    kind = "long" if long else _FORM_KINDS[option.kind]
    return Field(key, label, kind, hint, option.choices, name)


SECTIONS: dict[str, Section] = {
    section.name: section
    for section in (
        Section(
            "race",
            "Race",
            (
                _f("race.name", "Name", "race"),
                _f("race.repository", "Repository", "required: the git repository, relative to this file"),
                _f("race.base", "Base revision", "HEAD"),
                _f("race.mode", "Mode", "race"),
                # select = "best" and [score] need each other: one form sets both
                _f("race.select", "Select", "first"),
                _f("score.command", "Score command", "none (select best needs one)", name="score_command"),
                _f("score.timeout", "Score timeout (s)", "600", name="score_timeout"),
                _f("race.concurrency", "Concurrency", "every candidate at once"),
                _f("race.cleanup_timeout", "Cleanup timeout (s)", "30"),
                _f("race.brief_file", "Brief file", "none: the brief below"),
                _f("race.brief", "Brief (every candidate without its own)", "none", long=True),
            ),
        ),
        Section(
            "validate",
            "Validate",
            (
                _f("validate.command", "Command", "none: the agent's success is accepted"),
                _f("validate.timeout", "Timeout (s)", "600"),
                _f("validate.gate", "Gate", "strict"),
                _f("validate.require_commits", "Require commits", "true"),
                _f("validate.allow_baseline_failures", "Allow baseline failures", "false"),
                _f("validate.repeat", "Reruns of a failure", "0"),
                _f("validate.junit", "JUnit report", "none (pytest and unittest get one)"),
                _f("validate.protect", "Protected paths", "the tests and runner configuration"),
                _f("validate.protect_mode", "Protected change", "restore"),
            ),
        ),
        Section(
            "budget",
            "Budget",
            (
                _f("budget.attempts", "Attempts", "no limit"),
                _f("budget.tokens.input", "Input tokens", "no limit"),
                _f("budget.tokens.cached", "Cached input tokens", "no limit"),
                _f("budget.tokens.cache_write", "Cache-write tokens", "no limit"),
                _f("budget.tokens.output", "Output tokens", "no limit"),
                _f("budget.cost_usd", "Cost (USD)", "no limit"),
                _f("budget.candidate_timeout", "Candidate timeout (s)", "none"),
                _f("budget.unreachable_timeout", "Unreachable API (s)", "120"),
            ),
        ),
        Section(
            "sandbox",
            "Sandbox",
            (
                _f("sandbox.provider", "Provider", "local"),
                _f("sandbox.image", "Image", "none (needed by docker and podman)"),
                _f("sandbox.network", "Network", "none"),
                _f(
                    "sandbox.endpoint",
                    "Engine endpoint",
                    "DOCKER_HOST, the Docker context, the usual sockets",
                ),
                _f("sandbox.memory", "Memory", "no limit (e.g. 2g)"),
                _f("sandbox.cpus", "CPUs", "no limit"),
                _f("sandbox.pids", "Processes", "no limit"),
            ),
        ),
        Section(
            "setup",
            "Setup",
            (
                _f("setup.command", "Command", "none"),
                _f("setup.timeout", "Timeout (s)", "600"),
                _f("setup.copy", "Copy from checkout", "none (.worktreeinclude still applies)"),
                _f("setup.cache", "Cache paths", "none"),
                _f("setup.cache_key", "Cache key files", "none"),
                _f("setup.ports", "Ports per attempt", "0"),
            ),
        ),
        Section(
            "prices",
            "Prices",
            (
                # [prices."model"] tables, one line per model: `model input=3 cached=0.3 output=15`
                Field(
                    ("prices",),
                    "Prices (USD per million tokens; a line per model: NAME input=3 output=15)",
                    "prices",
                    "the built-in price table",
                ),
            ),
        ),
        Section(
            "durability",
            "Durability",
            (
                _f("durability.enabled", "Durable", "false"),
                _f("race.run_id", "Run id", "none (needed by a durable race)"),
                _f("durability.version", "Version", "1"),
                _f("durability.resume", "Resume", "none"),
            ),
        ),
    )
}

# A candidate's keys; those named by an agent's `options` show only for that agent.
CANDIDATE_FIELDS = (
    _f("key", "Key", "letters, digits, _ and -"),
    _f("agent", "Agent"),
    _f("model", "Model", "the agent's default"),
    _f("command", "Command", "required: the program and its arguments"),
    _f("script", "Script", "required: the session to play, relative to this file"),
    _f("max_turns", "Max turns", "no limit"),
    _f("allowed_tools", "Allowed tools", "the agent's default"),
    _f("args", "Extra arguments", "none"),
    _f("timeout", "Timeout (s)", "the budget's candidate timeout"),
    _f("brief_file", "Brief file", "none"),
    _f("brief", "Brief", "the race's brief", long=True),
    _f("env", "Environment (NAME=value lines)", "none"),
)
AGENT_OPTIONS = ("model", "command", "script", "max_turns", "allowed_tools", "args")


class FieldTextError(OutpostError):
    """A field's text that cannot be turned into a TOML value at all (an unclosed quote)."""


def field_text(field: Field, value: Any) -> str:
    """What a field shows for the value the file holds (None: the key is absent)."""
    if value is None:
        return ""
    if field.kind in ("argv", "words"):
        return shlex.join(str(item) for item in value) if isinstance(value, list) else str(value)
    if field.kind == "prices" and isinstance(value, dict):
        return "\n".join(
            " ".join([_quoted(model), *(f"{name}={amount}" for name, amount in table.items())])
            if isinstance(table, dict)
            else f"{_quoted(model)} {table}"
            for model, table in value.items()
        )
    if field.kind == "env" and isinstance(value, dict):
        return "\n".join(f"{name}={item}" for name, item in value.items())
    if field.kind == "bool":
        return "true" if value is True else "false" if value is False else str(value)
    return str(value)


def field_value_of(field: Field, text: str) -> Any:
    """The TOML value a field's text stands for; None removes the key."""
    if not text.strip():
        return None
    if field.kind == "number":
        return field_value(text)
    if field.kind == "bool":
        return {"true": True, "false": False}.get(text, text)
    if field.kind in ("argv", "words"):
        try:
            return shlex.split(text)
        except ValueError as error:
            raise FieldTextError(f"cannot split it as a shell would: {error}") from None
    if field.kind == "prices":
        return _prices(text)
    if field.kind == "env":
        env: dict[str, str] = {}
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            name, equals, item = line.partition("=")
            if not equals:
                raise FieldTextError(f"line {number}: expected NAME=value, found {line.strip()!r}")
            env[name.strip()] = item
        return env
    if field.kind == "long":
        return text
    return text.strip()


def _quoted(name: str) -> str:
    return shlex.quote(name)


def _prices(text: str) -> dict[str, dict[str, Any]]:
    """`model input=3 output=15` lines as [prices] tables; the amounts are the reader's to judge."""
    prices: dict[str, dict[str, Any]] = {}
    for number, line in enumerate(text.splitlines(), 1):
        try:
            words = shlex.split(line)
        except ValueError as error:
            raise FieldTextError(f"line {number}: {error}") from None
        if not words:
            continue
        table: dict[str, Any] = {}
        for word in words[1:]:
            name, equals, amount = word.partition("=")
            if not equals:
                raise FieldTextError(f"line {number}: expected NAME=amount after the model, found {word!r}")
            table[name] = field_value(amount)
        prices[words[0]] = table
    return prices


def agent_fields(agent: str) -> set[str]:
    """The agent-specific candidate keys this agent uses (its adapter declares them)."""
    try:
        return set(adapter_for(agent).options)
    except ValueError:
        return set()


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
