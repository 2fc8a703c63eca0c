"""Which keys each of the configure screen's forms edits, built from the race-file schema.

Everything the schema declares about a key (engine/racefile/schema.py, from the spec's fields) is
read from it: the value's kind and choices, and what an empty field means when the key's default is
a value. A form only adds what the schema cannot say: the order its keys are shown in, a label for
each, and the words for an empty field whose default is no value (or a default the reader resolves).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..engine.agents import adapter_for
from ..engine.core.spec import CandidateSpec
from ..engine.racefile import schema
from .race_document import Key


@dataclass(frozen=True)
class Field:
    """One key of the race file as a form field. `key` is the path inside the form's table."""

    key: Key
    label: str
    # text | number | choice | bool | argv | words | long | env | prices (the last three: a TextArea)
    kind: str = "text"
    hint: str = ""  # what an empty field means
    choices: tuple[str, ...] = ()
    name: str = ""  # the widget id, when the key's last part is not the one to use

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
# Keys typed in a text area: they hold paragraphs.
_LONG = {"brief"}

# Each form's keys in the order it shows them: key -> its label, or (its label, what an empty field
# means). A key is inside the form's table, unless it starts with another table's name.
_FORMS: dict[str, dict[str, str | tuple[str, str]]] = {
    "race": {
        "name": "Name",
        "repository": ("Repository", "required: the git repository, relative to this file"),
        "base": "Base revision",
        "mode": "Mode",
        # select = "best" and [score] need each other: one form sets both
        "select": "Select",
        "score.command": ("Score command", "none (select best needs one)"),
        "score.timeout": "Score timeout (s)",
        "concurrency": ("Concurrency", "every candidate at once"),
        "cleanup_timeout": "Cleanup timeout (s)",
        "brief_file": ("Brief file", "none: the brief below"),
        "brief": "Brief (every candidate without its own)",
    },
    "validate": {
        "command": ("Command", "none: the agent's success is accepted"),
        "timeout": "Timeout (s)",
        "gate": "Gate",
        "require_commits": "Require commits",
        "allow_baseline_failures": "Allow baseline failures",
        "repeat": "Reruns of a failure",
        "junit": ("JUnit report", "none (pytest and unittest get one)"),
        "protect": ("Protected paths", "the tests and runner configuration"),
        "protect_mode": "Protected change",
    },
    "budget": {
        "attempts": ("Attempts", "no limit"),
        "tokens.input": ("Input tokens", "no limit"),
        "tokens.cached": ("Cached input tokens", "no limit"),
        "tokens.cache_write": ("Cache-write tokens", "no limit"),
        "tokens.output": ("Output tokens", "no limit"),
        "cost_usd": ("Cost (USD)", "no limit"),
        "candidate_timeout": "Candidate timeout (s)",
        "unreachable_timeout": "Unreachable API (s)",
    },
    "sandbox": {
        "provider": "Provider",
        "isolation": "Isolation (local)",
        "writable": ("Writable paths", "none: a candidate writes its worktree alone"),
        "image": ("Image", "none (needed by docker and podman)"),
        "network": "Network",
        "endpoint": ("Engine endpoint", "DOCKER_HOST, the Docker context, the usual sockets"),
        "memory": ("Memory", "no limit (e.g. 2g)"),
        "cpus": ("CPUs", "no limit"),
        "pids": ("Processes", "no limit"),
    },
    "setup": {
        "command": "Command",
        "timeout": "Timeout (s)",
        "copy": ("Copy from checkout", "none (.worktreeinclude still applies)"),
        "cache": "Cache paths",
        "cache_key": "Cache key files",
        "ports": "Ports per attempt",
    },
    "prices": {},  # one field of its own: see _PRICES
    "durability": {
        "enabled": "Durable",
        "race.run_id": ("Run id", "none (needed by a durable race)"),
        "version": "Version",
        "resume": "Resume",
    },
}
# [prices."model"] tables, one line per model: `model input=3 cached=0.3 output=15`
_PRICES = Field(
    ("prices",),
    "Prices (USD per million tokens; a line per model: NAME input=3 output=15)",
    "prices",
    "the built-in price table",
)
# A candidate's keys; those named by an agent's `options` show only for that agent.
_CANDIDATE: dict[str, str | tuple[str, str]] = {
    "key": ("Key", "letters, digits, _ and -"),
    "agent": "Agent",
    "model": ("Model", "the agent's default"),
    "command": ("Command", "required: the program and its arguments"),
    "script": ("Script", "required: the session to play, relative to this file"),
    "max_turns": ("Max turns", "no limit"),
    "allowed_tools": ("Allowed tools", "the agent's default"),
    "args": "Extra arguments",
    "timeout": ("Timeout (s)", "the budget's candidate timeout"),
    "brief_file": "Brief file",
    "brief": ("Brief", "the race's brief"),
    "env": "Environment (NAME=value lines)",
}
AGENT_OPTIONS = ("model", "command", "script", "max_turns", "allowed_tools", "args")


def declaration(path: Key) -> schema.Option:
    """The schema's declaration of a key path (`budget.tokens.output`, a candidate's `model`)."""
    tables = {**schema.sections(), **schema.ARRAYS}
    cls, names = (tables[str(path[0])], path[1:]) if len(path) > 1 else (CandidateSpec, path)
    for name in names[:-1]:
        nested = schema.option(cls, str(name)).nested
        assert nested is not None, f"{name} is a table"  # only tables lead further along a path
        cls = nested
    return schema.option(cls, str(names[-1]))


def _default_text(default: Any) -> str:
    """What an empty field means, as the key's default says it: "" for none (a required key)."""
    if default is schema.REQUIRED:
        return ""
    if default is None or (not isinstance(default, (bool, int, float, str)) and not default):
        return "none"  # no value, an empty list or table
    if isinstance(default, bool):
        return "true" if default else "false"
    return f"{default:g}" if isinstance(default, float) else str(default)


def _field(path: Key, words: str | tuple[str, str], *, own: bool) -> Field:
    label, hint = (words, None) if isinstance(words, str) else words
    option = declaration(path)
    kind = "long" if path[-1] in _LONG else _FORM_KINDS[option.kind]
    hint = _default_text(option.default) if hint is None else hint
    # a key of another table than the form's is named by both (score_command beside command)
    name = "" if own else "_".join(str(part) for part in path)
    return Field(path, label, kind, hint, option.choices, name)


def _section(name: str) -> Section:
    fields = []
    for key, words in _FORMS[name].items():
        path = tuple(key.split("."))
        other = path[0] in schema.sections() and len(path) > 1
        fields.append(_field(path if other else (name, *path), words, own=not other or path[0] == "race"))
    return Section(name, name.capitalize(), (_PRICES,) if name == schema.PRICES else tuple(fields))


SECTIONS: dict[str, Section] = {name: _section(name) for name in _FORMS}
CANDIDATE_FIELDS = tuple(_field((key,), words, own=True) for key, words in _CANDIDATE.items())


def agent_fields(agent: str) -> set[str]:
    """The agent-specific candidate keys this agent uses (its adapter declares them)."""
    try:
        return set(adapter_for(agent).options)
    except ValueError:
        return set()
