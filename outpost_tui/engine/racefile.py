"""The race file: TOML in, an immutable RaceSpec out, and back again.

Every error is a RaceFileError naming the file, the line and the dotted key, in one line. tomllib
gives no positions, so `_Locator` rescans the text to map each key path to the line it is on.
Candidate keys are checked before anything else: a key ends up in paths and git refs.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import stat
import tomllib
from dataclasses import fields
from pathlib import Path
from typing import Any, Callable, Iterable

import tomli_w

from . import agents
from . import git as git_runner
from . import gitenv
from .spec import (
    KEY_PATTERN,
    MAX_CANDIDATES,
    BudgetSpec,
    CandidateSpec,
    DurabilitySpec,
    Price,
    RaceSpec,
    SandboxSpec,
    ScoreSpec,
    SetupSpec,
    TokenLimits,
    ValidateSpec,
    frozen_map,
)

RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
MEMORY_PATTERN = re.compile(r"^[0-9]+(\.[0-9]+)?[bkmgBKMG]?$")
MAX_CONCURRENCY = 64
# The largest brief a race file may give (UTF-8 bytes). Agents receive briefs over
# agents.MAX_BRIEF_ENV by file, never on argv or in the environment (one argv or environment
# string is limited to 128 KiB on Linux), so this bound is about memory and checkpoints only.
MAX_BRIEF_BYTES = 1024 * 1024
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")

Path_ = tuple[str | int, ...]


class RaceFileError(Exception):
    """A race file that cannot be used: where (file, line, dotted key) and what is wrong."""

    def __init__(self, path: str | Path | None, line: int | None, key: str | None, message: str):
        self.path = str(path) if path is not None else None
        self.line = line
        self.key = key
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        where = ""
        if self.path is not None:
            where = self.path if self.line is None else f"{self.path}:{self.line}"
        parts = [part for part in (where, self.key, " ".join(self.message.split())) if part]
        return ": ".join(parts)


def dotted(path: Iterable[str | int]) -> str:
    text = ""
    for part in path:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            name = part if _BARE_KEY.fullmatch(part) else json.dumps(part)
            text += f".{name}" if text else name
    return text


# --- where keys are -------------------------------------------------------------------------------

class _Locator:
    """Line numbers of the key paths in a TOML text (tables, `[[arrays]]` by index, dotted keys).

    It assumes text tomllib accepted; keys inside inline tables and arrays resolve to the line of
    the nearest enclosing key, which is where they are written.
    """

    def __init__(self, text: str):
        self.lines: dict[Path_, int] = {}
        self.table: Path_ = ()
        self._arrays: dict[Path_, int] = {}
        self._scan(text)

    def line(self, path: Iterable[str | int]) -> int | None:
        path = tuple(path)
        while path:
            if path in self.lines:
                return self.lines[path]
            path = path[:-1]
        return None

    def _scan(self, text: str) -> None:
        pos, line = 0, 1
        while pos < len(text):
            pos = _skip_blanks(text, pos)
            char = text[pos] if pos < len(text) else "\n"
            if char == "[":
                double = text.startswith("[[", pos)
                parts, pos = _read_key(text, pos + (2 if double else 1))
                self.table = self.header(parts, double, line)
                pos, line = _skip_value(text, pos, line)
            elif char in "#\r\n":
                pos, line = _skip_value(text, pos, line)
            else:
                parts, pos = _read_key(text, pos)
                for size in range(1, len(parts) + 1):
                    self.lines.setdefault(self.table + parts[:size], line)
                pos, line = _skip_value(text, pos + 1, line)

    def header(self, parts: tuple[str, ...], double: bool, line: int) -> Path_:
        """Enter the table a header names (an `[[array]]` header adds an element); its path."""
        path: Path_ = ()
        for number, part in enumerate(parts):
            path += (part,)
            if double and number == len(parts) - 1:
                index = self._arrays.get(path, -1) + 1
                self._arrays[path] = index
                self.lines.setdefault(path, line)
                path += (index,)
            elif path in self._arrays:
                path += (self._arrays[path],)
            self.lines.setdefault(path, line)
        return path


def _skip_blanks(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t":
        pos += 1
    return pos


_ESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|.)")
_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", '"': '"', "\\": "\\"}


def _unescape(match: re.Match) -> str:
    code = match.group(1)
    return chr(int(code[1:], 16)) if len(code) > 1 else _ESCAPES.get(code, code)


def _read_key(text: str, pos: int) -> tuple[tuple[str, ...], int]:
    """A dotted key starting at pos; returns its parts and the position after it."""
    parts: list[str] = []
    while True:
        pos = _skip_blanks(text, pos)
        char = text[pos]
        if char == '"':
            end = pos + 1
            while text[end] != '"':
                end += 2 if text[end] == "\\" else 1
            parts.append(_ESCAPE.sub(_unescape, text[pos + 1:end]))
            pos = end + 1
        elif char == "'":
            end = text.index("'", pos + 1)
            parts.append(text[pos + 1:end])
            pos = end + 1
        else:
            match = re.compile(r"[A-Za-z0-9_-]+").match(text, pos)
            if match is None:
                raise ValueError(f"no key at offset {pos}")
            parts.append(match.group())
            pos = match.end()
        pos = _skip_blanks(text, pos)
        if pos < len(text) and text[pos] == ".":
            pos += 1
            continue
        return tuple(parts), pos


def _skip_value(text: str, pos: int, line: int) -> tuple[int, int]:
    """Skip to just past the newline that ends the statement at pos (strings, arrays and comments
    may span or contain anything); returns the new position and line number."""
    depth = 0
    while pos < len(text):
        char = text[pos]
        if char == "\n":
            line += 1
            pos += 1
            if depth <= 0:
                return pos, line
        elif char == "#":
            end = text.find("\n", pos)
            pos = len(text) if end < 0 else end
        elif char in "[{":
            depth += 1
            pos += 1
        elif char in "]}":
            depth -= 1
            pos += 1
        elif text.startswith('"""', pos) or text.startswith("'''", pos):
            pos, line = _skip_multiline_string(text, pos, line)
        elif char in "\"'":
            pos += 1
            while pos < len(text) and text[pos] != char:
                pos += 2 if char == '"' and text[pos] == "\\" else 1
            pos += 1
        else:
            pos += 1
    return pos, line


def _skip_multiline_string(text: str, pos: int, line: int) -> tuple[int, int]:
    quote = text[pos] * 3
    pos += 3
    while pos < len(text) and not text.startswith(quote, pos):
        if text[pos] == "\n":
            line += 1
        pos += 2 if quote == '"""' and text[pos] == "\\" and text[pos + 1:pos + 2] != "\n" else 1
    pos += 3
    # A closing delimiter may be preceded by up to two quotes that belong to the string.
    for _ in range(2):
        if text.startswith(quote[0], pos):
            pos += 1
    return pos, line


# --- reading values -------------------------------------------------------------------------------

_MISSING = object()


def _toml_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        text = json.dumps(value)
        return text if len(text) <= 40 else text[:37] + '..."'
    if isinstance(value, (int, float)):
        return repr(value)
    return ""


def _describe(value: Any) -> str:
    for kind, name in ((bool, "a boolean"), (int, "an integer"), (float, "a number"),
                       (str, "a string"), (list, "an array"), (dict, "a table")):
        if isinstance(value, kind):
            shown = _toml_text(value)
            return f"{name} ({shown})" if shown else name
    return "a date/time"


class _Reader:
    """Typed access to the parsed TOML, failing with a located RaceFileError."""

    def __init__(self, path: str | Path, locator: _Locator):
        self.path = path
        self.locator = locator

    def error(self, where: Path_, message: str) -> RaceFileError:
        return RaceFileError(self.path, self.locator.line(where), dotted(where), message)

    def expect(self, where: Path_, value: Any, expected: str) -> RaceFileError:
        return self.error(where, f"expected {expected}, found {_describe(value)}")

    def table(self, where: Path_, value: Any, allowed: Iterable[str], hint: str = "") -> dict:
        if not isinstance(value, dict):
            raise self.expect(where, value, f"a table{hint}")
        allowed = list(allowed)
        for name in value:
            if name not in allowed:
                raise self.error(where + (name,), _unknown_key(name, allowed))
        return value

    def integer(self, where: Path_, value: Any, minimum: int | None = None,
                maximum: int | None = None) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.expect(where, value, "an integer")
        if minimum is not None and maximum is not None and not minimum <= value <= maximum:
            raise self.error(where, f"must be between {minimum} and {maximum}, found {value}")
        if minimum is not None and value < minimum:
            raise self.error(where, f"must be {_at_least(minimum)}, found {value}")
        return value

    def number(self, where: Path_, value: Any, positive: bool = False) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.expect(where, value, "a number")
        if not math.isfinite(value):
            raise self.error(where, f"must be a finite number, found {value}")
        if positive and value <= 0:
            raise self.error(where, f"must be greater than 0, found {value}")
        if value < 0:
            raise self.error(where, f"must be 0 or more, found {value}")
        return float(value)

    def string(self, where: Path_, value: Any, choices: Iterable[str] | None = None) -> str:
        if not isinstance(value, str):
            raise self.expect(where, value, "a string")
        if not value.strip():
            raise self.error(where, "must not be empty")
        if "\0" in value:
            raise self.error(where, "must not contain a NUL character")
        if choices is not None:
            choices = list(choices)
            if value not in choices:
                raise self.error(where, _not_one_of(value, choices))
        return value

    def boolean(self, where: Path_, value: Any) -> bool:
        if not isinstance(value, bool):
            raise self.expect(where, value, "a boolean (true or false)")
        return value

    def strings(self, where: Path_, value: Any, expected: str = "a list of strings") -> tuple[str, ...]:
        if not isinstance(value, list):
            raise self.expect(where, value, expected)
        for index, item in enumerate(value):
            if not isinstance(item, str):
                raise self.expect(where + (index,), item, "a string")
            if "\0" in item:
                raise self.error(where + (index,), "must not contain a NUL character")
        return tuple(value)

    def argv(self, where: Path_, value: Any) -> tuple[str, ...]:
        argv = self.strings(where, value, 'a list of strings (argv), e.g. ["pytest", "-q"]')
        if not argv:
            raise self.error(where, 'must not be empty: give the program and its arguments, '
                                    'e.g. ["pytest", "-q"]')
        if not argv[0].strip():
            raise self.error(where + (0,), "the program name must not be empty")
        return argv

    def string_map(self, where: Path_, value: Any) -> dict[str, str]:
        if not isinstance(value, dict):
            raise self.expect(where, value, "a table of strings")
        for name, item in value.items():
            if not name or "=" in name or "\0" in name:
                raise self.error(where + (name,), "not a valid environment variable name")
            if not isinstance(item, str):
                raise self.expect(where + (name,), item, "a string")
            if "\0" in item:
                raise self.error(where + (name,), "must not contain a NUL character")
        return dict(value)

    def resolve_path(self, where: Path_, value: Any, base: Path) -> tuple[Path, str]:
        """A path relative to base, resolved, and what is there: file, directory, other or missing."""
        text = self.string(where, value)
        try:
            path = (base / Path(text).expanduser()).resolve()
            if path.is_dir():
                return path, "directory"
            if path.is_file():
                return path, "file"
            return path, "other" if path.exists() else "missing"
        except (OSError, RuntimeError) as error:  # RuntimeError: a symlink loop, or no home for ~
            raise self.error(where, f"cannot use {text}: {getattr(error, 'strerror', None) or error}") \
                from None

    def file(self, where: Path_, value: Any, base: Path) -> Path:
        path, kind = self.resolve_path(where, value, base)
        if kind == "missing":
            raise self.error(where, f"no such file: {path}")
        if kind != "file":
            raise self.error(where, f"not a regular file: {path}")
        return path


def _at_least(minimum: int) -> str:
    return "0 or more" if minimum == 0 else f"{minimum} or more"


def _not_one_of(value: str, choices: list[str]) -> str:
    message = f"{json.dumps(value)} is not one of: {', '.join(choices)}"
    close = difflib.get_close_matches(value, choices, n=1)
    return message + (f" (did you mean {json.dumps(close[0])}?)" if close else "")


def _unknown_key(name: str, allowed: list[str]) -> str:
    close = difflib.get_close_matches(name, allowed, n=1)
    if close:
        return f"unknown key {name!r} (did you mean {close[0]!r}?)"
    for section, keys in _SECTION_KEYS.items():
        if name in keys and name not in allowed:
            return f"unknown key {name!r} (it belongs in [{section}])"
    return f"unknown key {name!r} (expected one of: {', '.join(allowed)})"


# --- the schema -----------------------------------------------------------------------------------

_TOP_KEYS = ["race", "budget", "validate", "score", "sandbox", "setup", "durability", "prices",
             "candidates"]
_SECTION_KEYS = {
    "race": ["name", "repository", "base", "mode", "select", "concurrency", "run_id",
             "cleanup_timeout", "brief", "brief_file"],
    "budget": ["attempts", "tokens", "cost_usd", "candidate_timeout", "unreachable_timeout"],
    "validate": ["command", "timeout", "require_commits", "junit", "gate", "allow_baseline_failures",
                 "repeat", "protect", "protect_mode"],
    "score": ["command", "timeout"],
    "sandbox": ["provider", "image", "network", "endpoint", "memory", "cpus", "pids"],
    "setup": ["command", "timeout", "cache", "cache_key", "copy", "ports"],
    "durability": ["enabled", "version", "resume"],
}
_TOKEN_KEYS = ["input", "cached", "cache_write", "output"]
_PRICE_KEYS = ["input", "cached", "cache_write", "output"]
_CANDIDATE_KEYS = ["key", "agent", "brief", "brief_file", "model", "command", "script", "env",
                   "timeout", "max_turns", "allowed_tools", "args"]


def load_race(path: str | Path) -> RaceSpec:
    """Read and check a race file; raise RaceFileError (one line: file, line, key) if it is bad."""
    shown = str(path)
    file = Path(path).expanduser()
    try:
        data = _read_regular_file(file, shown)
    except FileNotFoundError:
        raise RaceFileError(shown, None, None, "no such file") from None
    except IsADirectoryError:
        raise RaceFileError(shown, None, None, "is a directory, not a race file") from None
    except OSError as error:
        raise RaceFileError(shown, None, None, f"cannot read: {error.strerror or error}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[:error.start].count(b"\n") + 1
        raise RaceFileError(shown, line, None, "not UTF-8 text") from None
    return load_race_text(text, file.resolve(), shown=shown)


def load_race_text(text: str, path: str | Path, *, shown: str | None = None) -> RaceSpec:
    """Check race-file text as if it were the file at path (which need not exist): relative paths
    resolve against path's directory, and errors name `shown` (default: path) with line and key.

    What the configure screen validates a form with before anything is written."""
    file = Path(path).expanduser().resolve()
    shown = str(path) if shown is None else shown
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise _syntax_error(shown, text, str(error)) from None
    try:
        locator = _Locator(text)
    except (ValueError, IndexError):
        # Line numbers are a courtesy: a text the scanner misreads still gets keyed errors.
        locator = _Locator("")
    reader = _Reader(shown, locator)
    return _build(reader, document, file)


_FILE_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"),
               (stat.S_ISBLK, "a device"))


def _read_regular_file(file: Path, shown: str) -> bytes:
    """The file's bytes, refusing anything but a regular file before opening it.

    Opening a FIFO blocks until a writer comes, and reading a device may never end: `check` and
    `run` would hang on a mistyped path. The mode is checked again on the opened descriptor (opened
    without blocking) in case the path was swapped between the two looks."""
    mode = os.stat(file).st_mode
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(shown)
    if not stat.S_ISREG(mode):
        kind = next((name for test, name in _FILE_KINDS if test(mode)), "a special file")
        raise RaceFileError(shown, None, None, f"is {kind}, not a race file (it must be a regular "
                                               "file)")
    descriptor = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    with os.fdopen(descriptor, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise RaceFileError(shown, None, None, "changed while it was being read: not a "
                                                   "regular file any more")
        return handle.read()


def _syntax_error(shown: str, text: str, message: str) -> RaceFileError:
    match = re.search(r"\s*\(at line (\d+), column (\d+)\)$", message)
    if match:
        line, column = int(match.group(1)), int(match.group(2))
        message = f"{message[:match.start()]} (column {column})"
        word = re.match(r"[A-Za-z_][A-Za-z0-9_.-]*", (text.split("\n")[line - 1:] or [""])[0][column - 1:])
        if message.startswith("Invalid value") and word:
            message += f': text needs quotes, e.g. "{word.group()}"'
    else:
        line = text.count("\n") + (0 if text.endswith("\n") else 1)
        message = re.sub(r"\s*\(at end of document\)$", " (at the end of the file)", message)
    message = message.replace("Cannot overwrite a value", "this key is already defined")
    message = re.sub(r"^Cannot declare \(.*\) twice", "this table is already declared", message)
    return RaceFileError(shown, max(line, 1), _key_on_line(text, line),
                         f"invalid TOML: {message[:1].lower()}{message[1:]}")


def _key_on_line(text: str, line: int) -> str | None:
    """Best effort: the key a syntax error is on, from the valid text before it."""
    lines = text.split("\n")
    try:
        locator = _Locator("\n".join(lines[:line - 1]) + "\n")
        current = lines[line - 1] if line - 1 < len(lines) else ""
        stripped = current.lstrip(" \t")
        if stripped.startswith("["):
            double = stripped.startswith("[[")
            parts, _ = _read_key(stripped, 2 if double else 1)
            return dotted(locator.header(parts, double, line))
        if stripped and stripped[0] not in "#":
            parts, _ = _read_key(stripped, 0)
            return dotted(locator.table + parts)
        return dotted(locator.table) or None
    except (ValueError, IndexError):
        return None


def _build(reader: _Reader, document: dict, file: Path) -> RaceSpec:
    reader.table((), document, _TOP_KEYS)
    # Misspelt keys first: a misplaced key otherwise shows up as a confusing "missing" error.
    for name in _SECTION_KEYS:
        if name in document:
            _section(reader, name, document[name])
    base_dir = file.parent
    raw_candidates = _candidate_tables(reader, document.get("candidates", _MISSING))

    race = _race(reader, document.get("race", _MISSING), base_dir)
    if race.get("mode") == "fallback":
        # A chain tries one candidate at a time and stops at the first success: it cannot
        # compare candidates, nor run several at once.
        if race["select"] == "best":
            raise reader.error(("race", "select"), 'select = "best" cannot be used with mode = '
                                                   '"fallback" (a fallback chain stops at the first '
                                                   'success; use mode = "race" to score every candidate)')
        if race.get("concurrency", 1) > 1:
            raise reader.error(("race", "concurrency"), f"concurrency = {race['concurrency']} cannot be "
                                                        'used with mode = "fallback" (it runs one '
                                                        "candidate at a time; remove it or set it to 1)")
    score = _score(reader, document.get("score", _MISSING))
    if race["select"] == "best" and score is None:
        raise reader.error(("race", "select"), 'select = "best" needs a [score] table with a command')
    if race["select"] != "best" and score is not None:
        raise reader.error(("score",), '[score] is only used with select = "best" in [race]')
    return RaceSpec(
        candidates=tuple(_candidate(reader, index, table, base_dir, race.get("brief"))
                         for index, table in enumerate(raw_candidates)),
        budget=_budget(reader, document.get("budget", _MISSING)),
        validate=_validate(reader, document.get("validate", _MISSING)),
        score=score,
        sandbox=_sandbox(reader, document.get("sandbox", _MISSING)),
        setup=_setup(reader, document.get("setup", _MISSING)),
        durability=_durability(reader, document.get("durability", _MISSING)),
        prices=_prices(reader, document.get("prices", _MISSING)),
        path=file,
        **race,
    )


def _section(reader: _Reader, name: str, value: Any) -> dict:
    if value is _MISSING:
        return {}
    return reader.table((name,), value, _SECTION_KEYS[name])


def _race(reader: _Reader, value: Any, base_dir: Path) -> dict:
    if value is _MISSING:
        raise reader.error(("race",), "missing [race] table (it needs at least `repository`)")
    table = _section(reader, "race", value)
    def at(name: str) -> Path_:
        return ("race", name)

    out: dict[str, Any] = {}
    if "name" in table:
        out["name"] = reader.string(at("name"), table["name"])
    if "repository" not in table:
        raise reader.error(("race",), "missing key 'repository' (the git repository to race on, "
                                      "relative to the race file)")
    if "mode" in table:
        out["mode"] = reader.string(at("mode"), table["mode"], ["race", "fallback"])
    out["select"] = reader.string(at("select"), table["select"], ["first", "best"]) \
        if "select" in table else "first"
    if "concurrency" in table:
        out["concurrency"] = reader.integer(at("concurrency"), table["concurrency"], 1, MAX_CONCURRENCY)
    if "run_id" in table:
        run_id = reader.string(at("run_id"), table["run_id"])
        if not RUN_ID_PATTERN.fullmatch(run_id):
            raise reader.error(at("run_id"), f"invalid run id {json.dumps(run_id)}: use letters, digits, "
                                             "'.', '_' and '-', starting with a letter or digit "
                                             "(at most 128 characters)")
        out["run_id"] = run_id
    if "cleanup_timeout" in table:
        out["cleanup_timeout"] = reader.number(at("cleanup_timeout"), table["cleanup_timeout"], True)
    brief = _brief(reader, table, at, base_dir)
    if brief is not None:
        out["brief"] = brief
    base = reader.string(at("base"), table["base"]) if "base" in table else "HEAD"
    if base.startswith("-"):
        raise reader.error(at("base"), f"invalid base {json.dumps(base)}: must not start with '-'")
    if base != "HEAD":
        out["base"] = base
    out["repository"] = _repository(reader, table["repository"], base_dir, base, "base" in table)
    return out


def _git(reader: _Reader, where: Path_, directory: Path, *args: str) -> tuple[int, str, str]:
    # the engine's runner: variables a git hook may have set would point git at another repository
    try:
        status, out, err = git_runner.run(directory, *args)
    except git_runner.GitError as error:
        raise reader.error(where, str(error)) from None
    if status == git_runner.GIT_TIMEOUT_STATUS:
        raise reader.error(where, f"cannot run git in {directory}: {err}")
    return status, out, err


def _repository(reader: _Reader, value: Any, base_dir: Path, base: str,
                explicit_base: bool) -> Path:
    where = ("race", "repository")
    directory, kind = reader.resolve_path(where, value, base_dir)
    if kind == "missing":
        raise reader.error(where, f"no such directory: {directory}")
    if kind != "directory":
        raise reader.error(where, f"not a directory: {directory}")
    status, _, err = _git(reader, where, directory, "rev-parse", "--show-toplevel")
    if status != 0:
        detail = (err.strip().splitlines() or [""])[0]
        raise reader.error(where, f"not a git repository: {directory}"
                                  + (f" ({detail})" if detail else ""))
    status, _, _ = _git(reader, where, directory, "rev-parse", "--verify", "--quiet", f"{base}^{{commit}}")
    if status != 0:
        if explicit_base:
            raise reader.error(("race", "base"), f"{json.dumps(base)} is not a commit in {directory}")
        raise reader.error(where, f"the repository has no commits yet: {directory} "
                                  "(the race starts from its HEAD)")
    return directory


def _budget(reader: _Reader, value: Any) -> BudgetSpec:
    table = _section(reader, "budget", value)
    def at(*names: str) -> Path_:
        return ("budget", *names)

    out: dict[str, Any] = {}
    if "attempts" in table:
        # 0 attempts is allowed by the API (a race that starts nothing) but useless in a file.
        out["attempts"] = reader.integer(at("attempts"), table["attempts"])
        if out["attempts"] < 1:
            raise reader.error(at("attempts"), f"must be at least 1, found {out['attempts']}"
                                               + (": no candidate would ever start"
                                                  if out["attempts"] == 0 else ""))
    if "tokens" in table:
        tokens = reader.table(at("tokens"), table["tokens"], _TOKEN_KEYS,
                              " like { input = 100000, output = 20000 }")
        out["tokens"] = TokenLimits(**{name: reader.integer(at("tokens", name), limit, 0)
                                       for name, limit in tokens.items()})
    if "cost_usd" in table:
        out["cost_usd"] = reader.number(at("cost_usd"), table["cost_usd"])
    if "candidate_timeout" in table:
        out["candidate_timeout"] = reader.number(at("candidate_timeout"), table["candidate_timeout"], True)
    if "unreachable_timeout" in table:
        out["unreachable_timeout"] = reader.number(at("unreachable_timeout"), table["unreachable_timeout"],
                                                   True)
    return BudgetSpec(**out)


def check_budget(table: dict) -> BudgetSpec:
    """A [budget] table as a race file holds it, checked by the rules `check` applies (the
    configure form uses them as the user types); RaceFileError keyed `budget.<name>`, no line."""
    return _budget(_Reader(None, _Locator("")), table)


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


def _validate(reader: _Reader, value: Any) -> ValidateSpec:
    table = _section(reader, "validate", value)
    out: dict[str, Any] = {}
    if "command" in table:
        out["command"] = reader.argv(("validate", "command"), table["command"])
    if "timeout" in table:
        out["timeout"] = reader.number(("validate", "timeout"), table["timeout"], True)
    if "require_commits" in table:
        out["require_commits"] = reader.boolean(("validate", "require_commits"), table["require_commits"])
    if "junit" in table:
        junit = reader.string(("validate", "junit"), table["junit"])
        if Path(junit).is_absolute() or ".." in Path(junit).parts:
            raise reader.error(("validate", "junit"), f"{json.dumps(junit)} must be a path inside the "
                                                      'checkout, e.g. "reports/junit.xml"')
        out["junit"] = junit
    if "gate" in table:
        out["gate"] = reader.string(("validate", "gate"), table["gate"], ["strict", "exit-code"])
    if "allow_baseline_failures" in table:
        out["allow_baseline_failures"] = reader.boolean(("validate", "allow_baseline_failures"),
                                                        table["allow_baseline_failures"])
    if "repeat" in table:
        out["repeat"] = reader.integer(("validate", "repeat"), table["repeat"], 0, 20)
    if "protect" in table:
        globs = reader.strings(("validate", "protect"), table["protect"],
                               'a list of globs, e.g. ["tests/**", "pytest.ini"]')
        for index, glob in enumerate(globs):
            if not glob.strip() or glob.startswith("/") or ".." in glob.split("/"):
                raise reader.error(("validate", "protect", index),
                                   f"{json.dumps(glob)} must be a glob relative to the repository")
        out["protect"] = globs
    if "protect_mode" in table:
        out["protect_mode"] = reader.string(("validate", "protect_mode"), table["protect_mode"],
                                            ["restore", "reject", "flag"])
    return ValidateSpec(**out)


def _score(reader: _Reader, value: Any) -> ScoreSpec | None:
    if value is _MISSING:
        return None
    table = _section(reader, "score", value)
    if "command" not in table:
        raise reader.error(("score",), "missing key 'command' (the argv that prints a score)")
    out: dict[str, Any] = {"command": reader.argv(("score", "command"), table["command"])}
    if "timeout" in table:
        out["timeout"] = reader.number(("score", "timeout"), table["timeout"], True)
    return ScoreSpec(**out)


def _sandbox(reader: _Reader, value: Any) -> SandboxSpec:
    table = _section(reader, "sandbox", value)
    def at(name: str) -> Path_:
        return ("sandbox", name)

    out: dict[str, Any] = {}
    for name in ("image", "network", "endpoint"):
        if name in table:
            out[name] = reader.string(at(name), table[name])
    if "provider" in table:
        out["provider"] = reader.string(at("provider"), table["provider"], ["local", "docker", "podman"])
        if out["provider"] != "local" and "image" not in out:
            raise reader.error(("sandbox",), f"missing key 'image' (provider = "
                                             f"{json.dumps(out['provider'])} needs a container image)")
    if "memory" in table:
        memory = reader.string(at("memory"), table["memory"])
        if not MEMORY_PATTERN.fullmatch(memory):
            raise reader.error(at("memory"), f"invalid memory size {json.dumps(memory)}: "
                                             'use a number with an optional unit b, k, m or g, e.g. "2g"')
        out["memory"] = memory
    if "cpus" in table:
        out["cpus"] = reader.number(at("cpus"), table["cpus"], True)
    if "pids" in table:
        out["pids"] = reader.integer(at("pids"), table["pids"], 1)
    return SandboxSpec(**out)


MAX_PORTS = 16


def _setup(reader: _Reader, value: Any) -> SetupSpec:
    table = _section(reader, "setup", value)
    def at(*names: str | int) -> Path_:
        return ("setup", *names)

    out: dict[str, Any] = {}
    if "command" in table:
        out["command"] = reader.argv(at("command"), table["command"])
    if "timeout" in table:
        out["timeout"] = reader.number(at("timeout"), table["timeout"], True)
    for name, example in (("cache", '[".venv"]'), ("cache_key", '["requirements*.txt"]'),
                          ("copy", '[".env"]')):
        if name in table:
            paths = reader.strings(at(name), table[name], f"a list of paths or globs, e.g. {example}")
            for index, path in enumerate(paths):
                problem = setup_path_problem(path, glob=name != "cache")
                if problem:
                    raise reader.error(at(name, index), problem)
            out[name] = paths
    if "ports" in table:
        out["ports"] = reader.integer(at("ports"), table["ports"], 0, MAX_PORTS)
    if out.get("cache") and not out.get("cache_key"):
        raise reader.error(at("cache"), "cache needs cache_key: the files whose content decides "
                                        'when to rebuild it, e.g. cache_key = ["requirements*.txt"]')
    if out.get("cache_key") and not out.get("cache"):
        raise reader.error(at("cache_key"), 'cache_key is only used with cache (the paths to keep, '
                                            'e.g. cache = [".venv"])')
    if out.get("cache") and "command" not in out:
        raise reader.error(at("cache"), "cache needs a command: the cache holds what the setup "
                                        "command builds")
    return SetupSpec(**out)


def setup_path_problem(path: str, *, glob: bool) -> str | None:
    """Why a [setup] path cannot be used, or None: it must stay inside the repository."""
    if not path.strip():
        return "must not be empty"
    parts = path.replace("\\", "/").split("/")
    if path.startswith("/") or path.startswith("~"):
        return f"{json.dumps(path)} must be relative to the repository root"
    if ".." in parts:
        return f"{json.dumps(path)} must not leave the repository (no '..')"
    if parts[0] in (".git", ".outpost") or ".git" in parts:
        return f"{json.dumps(path)} names git's or outpost-tui's own files"
    if not glob and any(char in path for char in "*?["):
        return f"{json.dumps(path)} must be a path, not a glob (it names what the setup builds)"
    return None


def _durability(reader: _Reader, value: Any) -> DurabilitySpec:
    table = _section(reader, "durability", value)
    out: dict[str, Any] = {}
    if "enabled" in table:
        out["enabled"] = reader.boolean(("durability", "enabled"), table["enabled"])
    if "version" in table:
        out["version"] = reader.string(("durability", "version"), table["version"])
    if "resume" in table:
        out["resume"] = reader.string(("durability", "resume"), table["resume"], ["retry-incomplete"])
    return DurabilitySpec(**out)


def _prices(reader: _Reader, value: Any) -> Any:
    if value is _MISSING:
        return frozen_map({})
    if not isinstance(value, dict):
        raise reader.expect(("prices",), value, 'a table of models, e.g. [prices."model-name"]')
    prices = {}
    for model, price in value.items():
        where = ("prices", model)
        table = reader.table(where, price, _PRICE_KEYS, " of USD per million tokens")
        prices[model] = Price(**{name: reader.number(where + (name,), amount)
                                 for name, amount in table.items()})
    return frozen_map(prices)


def _candidate_tables(reader: _Reader, value: Any) -> list[dict]:
    """The [[candidates]] tables, with their keys checked (before any key reaches a path or ref)."""
    if value is _MISSING or value == []:
        raise reader.error(("candidates",), "no candidates: add at least one [[candidates]] table")
    if not isinstance(value, list):
        raise reader.expect(("candidates",), value, "an array of tables ([[candidates]])")
    if len(value) > MAX_CANDIDATES:
        raise reader.error(("candidates", MAX_CANDIDATES),
                           f"too many candidates ({len(value)}): at most {MAX_CANDIDATES}")
    seen: dict[str, int] = {}
    for index, table in enumerate(value):
        where = ("candidates", index)
        reader.table(where, table, _CANDIDATE_KEYS)
        if "key" not in table:
            raise reader.error(where, "missing key 'key' (the candidate's name, e.g. key = \"claude-1\")")
        key = table["key"]
        if not isinstance(key, str):
            raise reader.expect(where + ("key",), key, "a string")
        if not KEY_PATTERN.fullmatch(key):
            raise reader.error(where + ("key",), f"invalid key {json.dumps(key)}: use letters, digits, "
                                                 "'_' and '-', starting with a letter or digit "
                                                 "(at most 64 characters)")
        if key in seen:
            raise reader.error(where + ("key",), f"duplicate key {json.dumps(key)} "
                                                 f"(already used by candidates[{seen[key]}])")
        seen[key] = index
    return value


def _candidate(reader: _Reader, index: int, table: dict, base_dir: Path,
               race_brief: str | None = None) -> CandidateSpec:
    def at(name: str) -> Path_:
        return ("candidates", index, name)

    where = ("candidates", index)
    if "agent" not in table:
        raise reader.error(where, f"missing key 'agent' (one of: {', '.join(agents.known_agents())})")
    agent = reader.string(at("agent"), table["agent"], agents.known_agents())
    out: dict[str, Any] = {"key": table["key"], "agent": agent, "env": frozen_map({})}

    brief = _brief(reader, table, at, base_dir)
    if brief is not None:
        out["brief"] = brief
    elif race_brief is not None:
        out["brief"] = race_brief
    else:
        raise reader.error(where, "missing key 'brief' (the task, as text; or brief_file = a path; "
                                  "or brief / brief_file in [race] for every candidate)")

    if "model" in table:
        out["model"] = reader.string(at("model"), table["model"])
    if agent == "command":
        if "command" not in table:
            raise reader.error(where, "missing key 'command' (agent = \"command\" needs the argv to run, "
                                      'e.g. ["python", "agent.py"])')
        out["command"] = reader.argv(at("command"), table["command"])
    elif "command" in table:
        raise reader.error(at("command"), f'command is only for agent = "command" '
                                          f"(this candidate's agent is {json.dumps(agent)})")
    if "script" in table:
        out["script"] = reader.file(at("script"), table["script"], base_dir)
    elif agent == "demo":
        raise reader.error(where, "missing key 'script' (agent = \"demo\" plays a scripted session file)")
    if "env" in table:
        env = reader.string_map(at("env"), table["env"])
        for name in env:
            if gitenv.is_scrubbed(name):
                # removed from every environment a candidate gets: saying so beats a silent drop
                raise reader.error(at("env") + (name,), "git's own variables are not passed to candidates "
                                   "(they would point its git at another repository or configuration); "
                                   "only GIT_AUTHOR_NAME, GIT_AUTHOR_EMAIL, GIT_COMMITTER_NAME and "
                                   "GIT_COMMITTER_EMAIL are")
        out["env"] = frozen_map(env)
    if "timeout" in table:
        out["timeout"] = reader.number(at("timeout"), table["timeout"], True)
    if "max_turns" in table:
        out["max_turns"] = reader.integer(at("max_turns"), table["max_turns"], 1)
    if "allowed_tools" in table:
        out["allowed_tools"] = reader.strings(at("allowed_tools"), table["allowed_tools"])
    if "args" in table:
        out["args"] = reader.strings(at("args"), table["args"])
    candidate = CandidateSpec(**out)
    # The adapter refuses options its agent does not have (max_turns for codex, ...): say so now,
    # at the option's line, rather than when the race is already running.
    try:
        agents.adapter_for(agent).launch(candidate, candidate.brief,
                                         agents.LaunchContext(directory=base_dir, git_common_dir=base_dir))
    except ValueError as error:
        option = next((name for name in ("max_turns", "allowed_tools", "args", "model")
                       if name in table and name in str(error)), None)
        message = str(error).split(": ", 1)[-1] if str(error).startswith("candidate ") else str(error)
        raise reader.error(at(option) if option else where, message) from None
    return CandidateSpec(**out)


def _brief(reader: _Reader, table: dict, at: Callable[[str], Path_], base_dir: Path) -> str | None:
    """`brief` or `brief_file` of a table ([race] or a candidate), None when it has neither."""
    if "brief" in table and "brief_file" in table:
        raise reader.error(at("brief_file"), "give either brief or brief_file, not both")
    if "brief" in table:
        brief, where = reader.string(at("brief"), table["brief"]), at("brief")
    elif "brief_file" in table:
        brief, where = _read_brief(reader, at("brief_file"), table["brief_file"], base_dir), at("brief_file")
    else:
        return None
    size = len(brief.encode())
    if size > MAX_BRIEF_BYTES:
        raise reader.error(where, f"the brief is {size:,} bytes: at most {MAX_BRIEF_BYTES // (1024 * 1024)} "
                                  f"MiB ({MAX_BRIEF_BYTES:,} bytes)")
    return brief


def _read_brief(reader: _Reader, where: Path_, value: Any, base_dir: Path) -> str:
    path = reader.file(where, value, base_dir)
    try:
        brief = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise reader.error(where, f"not UTF-8 text: {path}") from None
    except OSError as error:
        raise reader.error(where, f"cannot read {path}: {error.strerror or error}") from None
    if not brief.strip():
        raise reader.error(where, f"the brief file is empty: {path}")
    return brief


# --- writing --------------------------------------------------------------------------------------

def dump_race(spec: RaceSpec, relative_to: Path | None = None) -> str:
    """The race file for spec, which load_race reads back to an equal spec (Python-only callables
    are left out). Paths inside relative_to (default: the race file's directory) are written
    relative to it."""
    if relative_to is None and spec.path is not None:
        relative_to = spec.path.parent
    where = Path(relative_to).resolve() if relative_to is not None else None

    def path_text(path: Path) -> str:
        path = Path(path).resolve()
        if where is not None and path.is_relative_to(where):
            return path.relative_to(where).as_posix() or "."
        return str(path)

    race: dict[str, Any] = {"name": spec.name, "repository": path_text(spec.repository)}
    race.update(_changed(spec, ("base", "mode", "select", "concurrency", "run_id", "cleanup_timeout")))
    if spec.brief is not None:
        race["brief"] = spec.brief
    sections: list[tuple[str, dict]] = [("race", race)]

    budget = _changed(spec.budget, ("attempts", "cost_usd", "candidate_timeout", "unreachable_timeout"))
    tokens = dict(spec.budget.tokens.items())
    if tokens:
        budget["tokens"] = tokens
    sections.append(("budget", budget))
    _no_none(spec.validate, "validate", "timeout")
    validate = _changed(spec.validate, ("timeout", "require_commits", "junit", "gate",
                                        "allow_baseline_failures", "repeat", "protect_mode"))
    if spec.validate.protect is not None:
        validate["protect"] = list(spec.validate.protect)
    if spec.validate.command is not None:
        validate = {"command": list(spec.validate.command), **validate}
    sections.append(("validate", validate))
    if spec.score is not None and spec.score.command is not None:
        _no_none(spec.score, "score", "timeout")
        sections.append(("score", {"command": list(spec.score.command),
                                   **_changed(spec.score, ("timeout",))}))
    sections.append(("sandbox", _changed(spec.sandbox, ("provider", "image", "network", "endpoint",
                                                        "memory", "cpus", "pids"))))
    setup = _changed(spec.setup, ("timeout", "ports"))
    for name in ("command", "cache", "cache_key", "copy"):
        if getattr(spec.setup, name):
            setup[name] = list(getattr(spec.setup, name))
    if spec.setup.timeout is None and spec.setup.command:
        _no_none(spec.setup, "setup", "timeout")
    sections.append(("setup", setup))
    sections.append(("durability", _changed(spec.durability, ("enabled", "version", "resume"))))
    prices = {model: _changed(price, _PRICE_KEYS) for model, price in spec.prices.items()}
    if prices:
        sections.append(("prices", prices))

    chunks = [_toml({name: table}) for name, table in sections if table]
    for candidate in spec.candidates:
        chunks.append("[[candidates]]\n" + _dump_candidate(candidate, path_text, spec.brief))
    return "\n".join(chunk.strip("\n") + "\n" for chunk in chunks)


def _dump_candidate(candidate: CandidateSpec, path_text: Any, race_brief: str | None) -> str:
    table: dict[str, Any] = {"key": candidate.key, "agent": candidate.agent}
    if candidate.model is not None:
        table["model"] = candidate.model
    if candidate.command is not None:
        table["command"] = list(candidate.command)
    if candidate.script is not None:
        table["script"] = path_text(candidate.script)
    for name in ("timeout", "max_turns"):
        if getattr(candidate, name) is not None:
            table[name] = getattr(candidate, name)
    if candidate.allowed_tools is not None:
        table["allowed_tools"] = list(candidate.allowed_tools)
    if candidate.args:
        table["args"] = list(candidate.args)
    if candidate.brief != race_brief:  # the shared brief is written once, in [race]
        table["brief"] = candidate.brief
    text = _toml(table)
    if candidate.env:
        # A sub-table header after [[candidates]] belongs to that candidate.
        text += "\n[candidates.env]\n" + _toml(dict(candidate.env))
    return text


def _toml(table: dict[str, Any]) -> str:
    # Multi-line strings keep briefs readable, but TOML normalises their line endings: a string
    # with a carriage return must be written escaped to come back the same.
    return tomli_w.dumps(table, multiline_strings=not _has_carriage_return(table))


def _has_carriage_return(value: Any) -> bool:
    if isinstance(value, str):
        return "\r" in value
    if isinstance(value, dict):
        return any(_has_carriage_return(key) or _has_carriage_return(item) for key, item in value.items())
    if isinstance(value, (list, tuple)):
        return any(_has_carriage_return(item) for item in value)
    return False


def _changed(obj: Any, names: Iterable[str]) -> dict[str, Any]:
    """The named fields of a dataclass that differ from their defaults (None is never written)."""
    defaults = {field.name: field.default for field in fields(obj)}
    out = {}
    for name in names:
        value = getattr(obj, name)
        if value is not None and value != defaults.get(name):
            out[name] = value
    return out


def _no_none(obj: Any, section: str, name: str) -> None:
    if getattr(obj, name) is None:
        raise ValueError(f"{section}.{name} = None (no limit) cannot be written in a race file")
