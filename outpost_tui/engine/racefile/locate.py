"""Where things are: the race file on disk, each key's line in its text, the repository it races on.

Every error of the race file is a RaceFileError naming the file, the line and the dotted key, in
one line. tomllib gives no positions, so `Locator` rescans the text to map each key path to the line
it is on, and `syntax_error` places tomllib's own complaints.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path

from .. import git as git_runner
from ..errors import OutpostError

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")

KeyPath = tuple[str | int, ...]


class RaceFileError(OutpostError):
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


class Locator:
    """Line numbers of the key paths in a TOML text (tables, `[[arrays]]` by index, dotted keys).

    It assumes text tomllib accepted; keys inside inline tables and arrays resolve to the line of
    the nearest enclosing key, which is where they are written.
    """

    def __init__(self, text: str):
        self.lines: dict[KeyPath, int] = {}
        self.table: KeyPath = ()
        self._arrays: dict[KeyPath, int] = {}
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

    def header(self, parts: tuple[str, ...], double: bool, line: int) -> KeyPath:
        """Enter the table a header names (an `[[array]]` header adds an element); its path."""
        path: KeyPath = ()
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


def _unescape(match: re.Match[str]) -> str:
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
            parts.append(_ESCAPE.sub(_unescape, text[pos + 1 : end]))
            pos = end + 1
        elif char == "'":
            end = text.index("'", pos + 1)
            parts.append(text[pos + 1 : end])
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
        pos += 2 if quote == '"""' and text[pos] == "\\" and text[pos + 1 : pos + 2] != "\n" else 1
    pos += 3
    # A closing delimiter may be preceded by up to two quotes that belong to the string.
    for _ in range(2):
        if text.startswith(quote[0], pos):
            pos += 1
    return pos, line


# --- the file -------------------------------------------------------------------------------------


def read_text(path: str | Path, shown: str) -> str:
    """The race file's text; RaceFileError (naming `shown`) for anything that is not a readable,
    regular UTF-8 file."""
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
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise RaceFileError(shown, line, None, "not UTF-8 text") from None


_FILE_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a device"),
    (stat.S_ISBLK, "a device"),
)


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
        raise RaceFileError(shown, None, None, f"is {kind}, not a race file (it must be a regular file)")
    descriptor = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    with os.fdopen(descriptor, "rb") as handle:
        if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
            raise RaceFileError(
                shown, None, None, "changed while it was being read: not a regular file any more"
            )
        return handle.read()


def syntax_error(shown: str, text: str, message: str) -> RaceFileError:
    match = re.search(r"\s*\(at line (\d+), column (\d+)\)$", message)
    if match:
        line, column = int(match.group(1)), int(match.group(2))
        message = f"{message[: match.start()]} (column {column})"
        word = re.match(r"[A-Za-z_][A-Za-z0-9_.-]*", (text.split("\n")[line - 1 :] or [""])[0][column - 1 :])
        if message.startswith("Invalid value") and word:
            message += f': text needs quotes, e.g. "{word.group()}"'
    else:
        line = text.count("\n") + (0 if text.endswith("\n") else 1)
        message = re.sub(r"\s*\(at end of document\)$", " (at the end of the file)", message)
    message = message.replace("Cannot overwrite a value", "this key is already defined")
    message = re.sub(r"^Cannot declare \(.*\) twice", "this table is already declared", message)
    return RaceFileError(
        shown, max(line, 1), _key_on_line(text, line), f"invalid TOML: {message[:1].lower()}{message[1:]}"
    )


def _key_on_line(text: str, line: int) -> str | None:
    """Best effort: the key a syntax error is on, from the valid text before it."""
    lines = text.split("\n")
    try:
        locator = Locator("\n".join(lines[: line - 1]) + "\n")
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


# --- the repository -------------------------------------------------------------------------------


def repository_problem(directory: Path, base: str, *, explicit_base: bool) -> tuple[str, str] | None:
    """Why `directory` cannot be raced on from `base`, as (the [race] key to blame, the problem), or
    None: it must be a git work tree in which base names a commit."""
    try:
        status, _, err = _git(directory, "rev-parse", "--show-toplevel")
        if status != 0:
            detail = (err.strip().splitlines() or [""])[0]
            return "repository", f"not a git repository: {directory}" + (f" ({detail})" if detail else "")
        status, _, _ = _git(directory, "rev-parse", "--verify", "--quiet", f"{base}^{{commit}}")
    except git_runner.GitError as error:
        return "repository", str(error)
    if status != 0:
        if explicit_base:
            return "base", f"{json.dumps(base)} is not a commit in {directory}"
        return "repository", f"the repository has no commits yet: {directory} (the race starts from its HEAD)"
    return None


def _git(directory: Path, *args: str) -> tuple[int, str, str]:
    # the engine's runner: variables a git hook may have set would point git at another repository
    status, out, err = git_runner.run(directory, *args)
    if status == git_runner.GIT_TIMEOUT_STATUS:
        raise git_runner.GitError(f"cannot run git in {directory}: {err}")
    return status, out, err
