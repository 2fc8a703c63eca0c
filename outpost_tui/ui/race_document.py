"""The race file as the configure screen edits it: a round-trip TOML document (tomlkit) changed in
place, key by key, so the user's comments, order and formatting survive a save.

Nothing here judges a value: every check hands the would-be text to the race-file reader
(`load_race_text`), the code `outpost-tui check` runs, and its error names the key to show it by.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.container import Container
from tomlkit.exceptions import ParseError
from tomlkit.items import AoT, InlineTable, Table

from ..engine.core.spec import RaceSpec
from ..engine.errors import OutpostError
from ..engine.files import write_atomically
from ..engine.racefile import RaceFileError, load_race, load_race_text

Key = tuple[str | int, ...]
# A path to a key and its new value; None removes the key (its default applies).
Changes = dict[Key, Any]

# Where a new top-level table goes: in this order, before the candidates.
_SECTION_ORDER = ("race", "budget", "validate", "score", "sandbox", "setup", "durability", "prices")
# Tables that must not be left empty: an empty [score] is an error, not "no score".
_DROPPED_WHEN_EMPTY = ("score",)
_PART = re.compile(r'\[(\d+)\]|\.?("(?:[^"\\]|\\.)*"|[A-Za-z0-9_-]+)')


class RaceFileChanged(OutpostError):
    """The race file on disk is no longer what the configure screen opened."""


def backup_path(race_file: Path) -> Path:
    """Where a save keeps the file's previous content: beside it, with `.bak` added."""
    return race_file.with_name(race_file.name + ".bak")


def error_key(error: RaceFileError) -> Key:
    """The key path a reader error names (`candidates[2].env.FOO` -> ("candidates", 2, "env",
    "FOO")); () when it names none."""
    parts: list[str | int] = []
    for match in _PART.finditer(error.key or ""):
        index, name = match.groups()
        parts.append(int(index) if index is not None else json.loads(name) if name.startswith('"') else name)
    return tuple(parts)


def plain(value: Any) -> Any:
    """A tomlkit value as plain Python (tables as dicts, arrays as lists)."""
    return value.unwrap() if hasattr(value, "unwrap") else value


class RaceDocument:
    """One race file, opened for editing. `text` is what a save would write."""

    def __init__(self, path: str | Path) -> None:
        """Open the race file; RaceFileError (one line) when it cannot be read as TOML now."""
        self.path = Path(path).absolute()
        try:
            self.loaded = self.path.read_bytes()
            self.document = tomlkit.parse(self.loaded.decode("utf-8"))
        except OSError as error:
            raise RaceFileError(
                str(self.path), None, None, f"cannot read: {error.strerror or error}"
            ) from None
        except UnicodeDecodeError:
            raise RaceFileError(str(self.path), None, None, "not UTF-8 text") from None
        except ParseError as error:
            raise RaceFileError(str(self.path), error.line, None, f"invalid TOML: {error}") from None
        self.saved_text = self.document.as_string()

    @property
    def text(self) -> str:
        return self.document.as_string()

    @property
    def dirty(self) -> bool:
        return self.text != self.saved_text

    @property
    def backup(self) -> Path:
        return backup_path(self.path)

    # ----------------------------------------------------------------------------- reading

    def value(self, path: Key) -> Any:
        """The value at path as the file holds it (plain Python), None when it is not there."""
        return _get(self.document, path)

    def candidate_count(self) -> int:
        candidates = self.document.get("candidates")
        return len(candidates) if isinstance(candidates, (AoT, list)) else 0

    def read(self, text: str | None = None) -> RaceSpec:
        """The spec text (default: the document as edited) reads as, by `check`'s rules;
        RaceFileError when it does not."""
        return load_race_text(self.text if text is None else text, self.path)

    # ----------------------------------------------------------------------------- editing

    def text_with(self, changes: Changes) -> str:
        """What the file would say with changes made (the document itself is not changed)."""
        copy = tomlkit.parse(self.text)
        _apply(copy, changes)
        return copy.as_string()

    def apply(self, changes: Changes) -> None:
        _apply(self.document, changes)
        self._reparse()

    def _reparse(self) -> None:
        # Parsed again, the blank lines tomlkit adds belong to the keys before them, as in a file
        # read from disk: later keys then go before a table's trailing blank line, not after it.
        self.document = tomlkit.parse(self.document.as_string())

    def remove_candidate(self, index: int) -> None:
        del self.document["candidates"][index]
        self._reparse()

    def move_candidate(self, index: int, to: int) -> None:
        """Move a candidate to another place in the declared order (admission order, tie-breaks)."""
        candidates = self.document["candidates"]
        count = len(candidates)
        if not (0 <= index < count and 0 <= to < count) or index == to:
            return
        # AoT elements cannot be reordered in place: each is rebuilt from its own text (comments
        # and all), in the new order, one blank line apart.
        texts = [candidates[position].as_string().rstrip("\n") + "\n" for position in range(count)]
        texts.insert(to, texts.pop(index))
        rebuilt = tomlkit.parse("\n".join(f"[[candidates]]\n{text}" for text in texts))["candidates"]
        ending = candidates[count - 1].as_string()
        trailing = ending[len(ending.rstrip("\n")) + 1 :]
        for position in range(count):
            candidates[position] = rebuilt[position]
        if trailing:
            candidates[count - 1].add(tomlkit.nl())
        self._reparse()

    # ------------------------------------------------------------------------------ saving

    def save(self, overwrite: bool = False) -> RaceSpec:
        """Write the document to the race file and return the spec it reads back as.

        Refused (RaceFileError, nothing written) when the text would not read; RaceFileChanged
        when the file changed on disk since it was opened, unless overwrite. The previous content
        is kept in `backup`; the write is atomic, and a file that does not read back once written
        gets its previous content again."""
        text = self.text
        self.read(text)
        try:
            current: bytes | None = self.path.read_bytes()
        except FileNotFoundError:
            current = None
        if current != self.loaded and not overwrite:
            raise RaceFileChanged(f"{self.path.name} changed on disk since it was opened")
        if current is not None:
            write_atomically(self.backup, current)
        write_atomically(self.path, text.encode("utf-8"))
        try:
            spec = load_race(self.path)
        except RaceFileError:
            if current is None:
                self.path.unlink(missing_ok=True)
            else:
                write_atomically(self.path, current)
            raise
        self.loaded = text.encode("utf-8")
        self.saved_text = text
        return spec


def _get(container: Any, path: Key) -> Any:
    for part in path:
        try:
            container = container[part]
        except (KeyError, IndexError, TypeError):
            return None
    return plain(container)


def _apply(document: tomlkit.TOMLDocument, changes: Changes) -> None:
    # A new section is made whole, then placed before the candidates with a blank line after it.
    new: dict[str, Table] = {}
    for path, value in changes.items():
        section = path[0]
        if len(path) > 1 and not isinstance(path[1], int) and (section in new or section not in document):
            _set_in(new.setdefault(str(section), tomlkit.table()), path[1:], value)
            continue
        if len(path) == 1 and isinstance(value, dict) and value and section not in document:
            # a whole new table ([prices]): a section too, never a key after the candidates
            table = new.setdefault(str(section), tomlkit.table())
            for name, item in value.items():
                table[name] = _item(item)
            continue
        _set_in(document, path, value)
        if value is None or value == {} or value == []:
            _drop_emptied(document, path)
    for section, table in new.items():
        if plain(table):
            table.add(tomlkit.nl())
            _add_section(document, section, table)


def _set_in(container: Any, path: Key, value: Any) -> None:
    for depth, part in enumerate(path[:-1]):
        following = path[depth + 1]
        if isinstance(part, int):
            if part == len(container):
                if value is None:
                    return
                _append_table(container)
            container = container[part]
            continue
        if part not in container:
            if value is None:
                return  # nothing there to remove
            if isinstance(following, int):
                container[part] = tomlkit.aot()
            else:
                container[part] = tomlkit.inline_table()
        container = container[part]
    name = path[-1]
    if value is None or value == {} or value == []:
        if name in container:
            del container[name]
    elif isinstance(value, dict) and isinstance(container.get(name), (Table, InlineTable)):
        _merge(container[name], value)
    elif plain(container.get(name)) != value or type(plain(container.get(name))) is not type(value):
        container[name] = _item(value)


def _merge(table: Table | InlineTable, value: dict) -> None:
    """Make table hold value, key by key: what did not change keeps its place and comments."""
    for key in [key for key in table if key not in value]:
        del table[key]
    for key, item in value.items():
        if isinstance(item, dict) and isinstance(table.get(key), (Table, InlineTable)):
            _merge(table[key], item)
        elif plain(table.get(key)) != item or type(plain(table.get(key))) is not type(item):
            table[key] = _item(item)


def _item(value: Any) -> Any:
    if isinstance(value, str) and "\n" in value and "\r" not in value:
        return tomlkit.string(value, multiline=True)
    if isinstance(value, dict):
        table = tomlkit.inline_table()
        table.update(value)
        return table
    return tomlkit.item(value)


def _append_table(candidates: AoT) -> None:
    # a blank line between one [[candidates]] table and the next, as the rest of the file has
    if len(candidates) and not candidates[-1].as_string().endswith("\n\n"):
        candidates[-1].add(tomlkit.nl())
    candidates.append(tomlkit.table())


def _add_section(document: tomlkit.TOMLDocument, name: str, table: Table) -> None:
    order = _SECTION_ORDER.index(name) if name in _SECTION_ORDER else len(_SECTION_ORDER)
    before = [key for key in document if key in _SECTION_ORDER[:order]]
    if before:
        previous = document[before[-1]]
        if isinstance(previous, Table) and not previous.as_string().endswith("\n\n"):
            previous.add(tomlkit.nl())
        _insert_after(document, before[-1], name, table)
    else:
        document[name] = table


def _insert_after(document: Container, key: str, name: str, table: Table) -> None:
    # tomlkit appends new tables at the end, after the [[candidates]]; a section belongs before
    # them, where a reader of the file looks for it.
    document._insert_after(key, name, table)


def _drop_emptied(document: tomlkit.TOMLDocument, path: Key) -> None:
    section = path[0]
    if (
        section in _DROPPED_WHEN_EMPTY
        and isinstance(document.get(section), Table)
        and not plain(document[section])
    ):
        del document[section]
    # an inline table left with no keys says nothing: `tokens = {}` goes
    if len(path) >= 3:
        parent = _container(document, path[:-1])
        if isinstance(parent, InlineTable) and not parent:
            del _container(document, path[:-2])[path[-2]]


def _container(document: Any, path: Iterable[str | int]) -> Any:
    for part in path:
        document = document[part]
    return document
