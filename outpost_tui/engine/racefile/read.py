"""Reading a race file: TOML in, an immutable RaceSpec out, every error located.

Which keys each table takes, their kinds, bounds, rules and defaults come from the spec's own
declarations (schema.py); what is here is the typed access that names file, line and key, and the
rules that tie keys together (a [score] needs select = "best", a demo agent needs a script, ...).
Candidate keys are checked before anything else: a key ends up in paths and git refs.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from .. import agents
from ..core.declaration import Refused
from ..core.spec import (
    MAX_CANDIDATES,
    BudgetSpec,
    CandidateSpec,
    Price,
    RaceSpec,
    SandboxSpec,
    ScoreSpec,
    SetupSpec,
    frozen_map,
)
from . import schema
from .locate import KeyPath, Locator, read_text, repository_problem, syntax_error
from .values import MISSING as _MISSING
from .values import Reader as _Reader

# The largest brief a race file may give (UTF-8 bytes). Agents receive briefs over
# agents.MAX_BRIEF_ENV by file, never on argv or in the environment (one argv or environment
# string is limited to 128 KiB on Linux), so this bound is about memory and checkpoints only.
MAX_BRIEF_BYTES = 1024 * 1024

# --- the file -------------------------------------------------------------------------------------


def load_race(path: str | Path) -> RaceSpec:
    """Read and check a race file; raise RaceFileError (one line: file, line, key) if it is bad."""
    shown = str(path)
    text = read_text(path, shown)
    return load_race_text(text, Path(path).expanduser().resolve(), shown=shown)


def load_race_text(text: str, path: str | Path, *, shown: str | None = None) -> RaceSpec:
    """Check race-file text as if it were the file at path (which need not exist): relative paths
    resolve against path's directory, and errors name `shown` (default: path) with line and key.

    What the configure screen validates a form with before anything is written."""
    file = Path(path).expanduser().resolve()
    shown = str(path) if shown is None else shown
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise syntax_error(shown, text, str(error)) from None
    try:
        locator = Locator(text)
    except (ValueError, IndexError):
        # Line numbers are a courtesy: a text the scanner misreads still gets keyed errors.
        locator = Locator("")
    return _build(_Reader(shown, locator, file.parent), document, file)


def check_budget(table: dict[str, Any]) -> BudgetSpec:
    """A [budget] table as a race file holds it, checked by the rules `check` applies (the
    configure form uses them as the user types); RaceFileError keyed `budget.<name>`, no line."""
    reader = _Reader(None, Locator(""))
    return BudgetSpec(**reader.settings(("budget",), _section(reader, "budget", table), BudgetSpec))


def field_value(text: str) -> Any:
    """What a form field's text would be as a TOML value: an integer, a number, else a string
    (so a wrong kind is refused in `check`'s words: expected an integer, found a string)."""
    text = text.strip()
    try:
        return int(text.replace("_", ""))
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


# --- the tables -----------------------------------------------------------------------------------


def _build(reader: _Reader, document: dict[str, Any], file: Path) -> RaceSpec:
    reader.table((), document, schema.top_keys())
    # Misspelt keys first: a misplaced key otherwise shows up as a confusing "missing" error.
    for name in schema.sections():
        if name in document:
            _section(reader, name, document[name])
    raw_candidates = _candidate_tables(reader, document.get("candidates", _MISSING))

    race = _race(reader, document.get("race", _MISSING))
    if race.get("mode") == "fallback":
        # A chain tries one candidate at a time and stops at the first success: it cannot
        # compare candidates, nor run several at once.
        if race.get("select") == "best":
            raise reader.error(
                ("race", "select"),
                'select = "best" cannot be used with mode = '
                '"fallback" (a fallback chain stops at the first '
                'success; use mode = "race" to score every candidate)',
            )
        if race.get("concurrency", 1) > 1:
            raise reader.error(
                ("race", "concurrency"),
                f"concurrency = {race['concurrency']} cannot be "
                'used with mode = "fallback" (it runs one '
                "candidate at a time; remove it or set it to 1)",
            )
    score = _score(reader, document.get("score", _MISSING))
    best = race.get("select") == "best"
    if best and score is None:
        raise reader.error(("race", "select"), 'select = "best" needs a [score] table with a command')
    if not best and score is not None:
        raise reader.error(("score",), '[score] is only used with select = "best" in [race]')
    candidates = tuple(
        _candidate(reader, index, table, race.get("brief")) for index, table in enumerate(raw_candidates)
    )
    tables = {
        name: cls(**reader.settings((name,), _section(reader, name, document.get(name, _MISSING)), cls))
        for name, cls in schema.sections().items()
        if name not in ("race", "score")
    }
    _setup_rules(reader, tables["setup"])
    _sandbox_rules(reader, tables["sandbox"])
    return RaceSpec(
        candidates=candidates,
        score=score,
        prices=_prices(reader, document.get("prices", _MISSING)),
        path=file,
        **tables,
        **race,
    )


def _section(reader: _Reader, name: str, value: Any) -> dict[str, Any]:
    if value is _MISSING:
        return {}
    return reader.table((name,), value, schema.names(schema.sections()[name]))


def _race(reader: _Reader, value: Any) -> dict[str, Any]:
    if value is _MISSING:
        raise reader.error(("race",), "missing [race] table (it needs at least `repository`)")
    table = _section(reader, "race", value)
    if "repository" not in table:
        raise reader.error(
            ("race",), "missing key 'repository' (the git repository to race on, relative to the race file)"
        )
    race = reader.settings(
        ("race",),
        table,
        RaceSpec,
        {
            "repository": lambda: _MISSING,  # read last: it needs the base
            "brief": lambda: _brief(reader, ("race",), table),
        },
    )
    race["repository"] = _repository(reader, table["repository"], race.get("base", "HEAD"), "base" in table)
    return race


def _repository(reader: _Reader, value: Any, base: str, explicit_base: bool) -> Path:
    where = ("race", "repository")
    directory, kind = reader.resolve_path(where, value, reader.base_dir)
    if kind == "missing":
        raise reader.error(where, f"no such directory: {directory}")
    if kind != "directory":
        raise reader.error(where, f"not a directory: {directory}")
    problem = repository_problem(directory, base, explicit_base=explicit_base)
    if problem is not None:
        name, message = problem
        raise reader.error(("race", name), message)
    return directory


def _score(reader: _Reader, value: Any) -> ScoreSpec | None:
    if value is _MISSING:
        return None
    table = _section(reader, "score", value)
    if "command" not in table:
        raise reader.error(("score",), "missing key 'command' (the argv that prints a score)")
    return ScoreSpec(**reader.settings(("score",), table, ScoreSpec))


def _sandbox_rules(reader: _Reader, sandbox: SandboxSpec) -> None:
    if sandbox.provider != "local" and sandbox.image is None:
        raise reader.error(
            ("sandbox",),
            f"missing key 'image' (provider = {json.dumps(sandbox.provider)} needs a container image)",
        )


def _setup_rules(reader: _Reader, setup: SetupSpec) -> None:
    if setup.cache and not setup.cache_key:
        raise reader.error(
            ("setup", "cache"),
            "cache needs cache_key: the files whose content decides "
            'when to rebuild it, e.g. cache_key = ["requirements*.txt"]',
        )
    if setup.cache_key and not setup.cache:
        raise reader.error(
            ("setup", "cache_key"),
            'cache_key is only used with cache (the paths to keep, e.g. cache = [".venv"])',
        )
    if setup.cache and setup.command is None:
        raise reader.error(
            ("setup", "cache"), "cache needs a command: the cache holds what the setup command builds"
        )


def _prices(reader: _Reader, value: Any) -> Any:
    if value is _MISSING:
        return frozen_map({})
    if not isinstance(value, dict):
        raise reader.expect(("prices",), value, 'a table of models, e.g. [prices."model-name"]')
    prices = {}
    for model, price in value.items():
        where = ("prices", model)
        table = reader.table(where, price, schema.names(Price), " of USD per million tokens")
        prices[model] = Price(**reader.settings(where, table, Price))
    return frozen_map(prices)


# --- the candidates -------------------------------------------------------------------------------


def _candidate_tables(reader: _Reader, value: Any) -> list[dict[str, Any]]:
    """The [[candidates]] tables, with their keys checked (before any key reaches a path or ref)."""
    if value is _MISSING or value == []:
        raise reader.error(("candidates",), "no candidates: add at least one [[candidates]] table")
    if not isinstance(value, list):
        raise reader.expect(("candidates",), value, "an array of tables ([[candidates]])")
    if len(value) > MAX_CANDIDATES:
        raise reader.error(
            ("candidates", MAX_CANDIDATES), f"too many candidates ({len(value)}): at most {MAX_CANDIDATES}"
        )
    seen: dict[str, int] = {}
    key_rule = schema.option(CandidateSpec, "key").key.check
    for index, table in enumerate(value):
        where = ("candidates", index)
        reader.table(where, table, schema.names(CandidateSpec))
        if "key" not in table:
            raise reader.error(where, "missing key 'key' (the candidate's name, e.g. key = \"claude-1\")")
        key = table["key"]
        if not isinstance(key, str):
            raise reader.expect(where + ("key",), key, "a string")
        try:
            if key_rule is not None:
                key_rule(key)
        except Refused as refused:
            raise reader.error(where + ("key",), refused.message) from None
        if key in seen:
            raise reader.error(
                where + ("key",), f"duplicate key {json.dumps(key)} (already used by candidates[{seen[key]}])"
            )
        seen[key] = index
    return value


def _candidate(
    reader: _Reader, index: int, table: dict[str, Any], race_brief: str | None = None
) -> CandidateSpec:
    where = ("candidates", index)
    if "agent" not in table:
        raise reader.error(where, f"missing key 'agent' (one of: {', '.join(agents.known_agents())})")
    agent = reader.string(where + ("agent",), table["agent"], agents.known_agents())

    def brief() -> str:
        brief = _brief(reader, where, table)
        if isinstance(brief, str):  # else _MISSING
            return brief
        if race_brief is not None:
            return race_brief
        raise reader.error(
            where,
            "missing key 'brief' (the task, as text; or brief_file = a path; "
            "or brief / brief_file in [race] for every candidate)",
        )

    def command() -> Any:
        if agent == "command":
            if "command" not in table:
                raise reader.error(
                    where,
                    "missing key 'command' (agent = \"command\" needs the argv to "
                    'run, e.g. ["python", "agent.py"])',
                )
            return reader.argv(where + ("command",), table["command"])
        if "command" in table:
            raise reader.error(
                where + ("command",),
                f'command is only for agent = "command" (this candidate\'s agent is {json.dumps(agent)})',
            )
        return _MISSING

    def script() -> Any:
        if "script" in table:
            return reader.file(where + ("script",), table["script"], reader.base_dir)
        if agent == "demo":
            raise reader.error(where, "missing key 'script' (agent = \"demo\" plays a scripted session file)")
        return _MISSING

    candidate = CandidateSpec(
        **reader.settings(
            where,
            table,
            CandidateSpec,
            {
                "key": lambda: table["key"],
                "agent": lambda: agent,
                "brief": brief,
                "command": command,
                "script": script,
            },
        )
    )
    # The adapter refuses options its agent does not have (max_turns for codex, ...): say so now,
    # at the option's line, rather than when the race is already running.
    try:
        agents.adapter_for(agent).launch(
            candidate,
            candidate.brief,
            agents.LaunchContext(directory=reader.base_dir, git_common_dir=reader.base_dir),
        )
    except ValueError as error:
        option = next(
            (
                name
                for name in ("max_turns", "allowed_tools", "args", "model")
                if name in table and name in str(error)
            ),
            None,
        )
        message = str(error).split(": ", 1)[-1] if str(error).startswith("candidate ") else str(error)
        raise reader.error(where + (option,) if option else where, message) from None
    return candidate


def _brief(reader: _Reader, where: KeyPath, table: dict[str, Any]) -> Any:
    """`brief` or `brief_file` of a table ([race] or a candidate), _MISSING when it has neither."""
    if "brief" in table and "brief_file" in table:
        raise reader.error(where + ("brief_file",), "give either brief or brief_file, not both")
    if "brief" in table:
        at = where + ("brief",)
        brief = reader.string(at, table["brief"])
    elif "brief_file" in table:
        at = where + ("brief_file",)
        brief = _read_brief(reader, at, table["brief_file"])
    else:
        return _MISSING
    size = len(brief.encode())
    if size > MAX_BRIEF_BYTES:
        raise reader.error(
            at,
            f"the brief is {size:,} bytes: at most {MAX_BRIEF_BYTES // (1024 * 1024)} "
            f"MiB ({MAX_BRIEF_BYTES:,} bytes)",
        )
    return brief


def _read_brief(reader: _Reader, where: KeyPath, value: Any) -> str:
    path = reader.file(where, value, reader.base_dir)
    try:
        brief = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise reader.error(where, f"not UTF-8 text: {path}") from None
    except OSError as error:
        raise reader.error(where, f"cannot read {path}: {error.strerror or error}") from None
    if not brief.strip():
        raise reader.error(where, f"the brief file is empty: {path}")
    return brief
