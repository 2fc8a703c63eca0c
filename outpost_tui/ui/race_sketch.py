"""The least of a race file that names the race screen's panels: the race's name and each
candidate's key and agent (and the repository it names, for the screens opened from it), read with
nothing but tomllib.

Checking a race file loads every agent's adapter and runs git, which costs more than the race
screen's whole first frame: the screen paints from a sketch, and the file's text the sketch was
read from is checked after that, off the screen's loop (RaceSession.prepare). A file the sketch
cannot make sense of gets no sketch: it is checked at once, and its error said as `check` says it.
"""

from __future__ import annotations

import os
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..engine.core.spec import RaceSpec


@dataclass(frozen=True)
class RaceSketch:
    name: str
    candidates: tuple[tuple[str, str], ...]  # (key, agent), in the file's order
    path: Path | None = None  # the race file, as it was given
    repository: Path | None = None  # what [race] repository names, resolved as the check does
    # The file's bytes the sketch was read from: the check reads these, not the file again, so the
    # panels painted and the race checked come from one version of it. None: sketched from a spec.
    source: bytes | None = None

    @classmethod
    def of(cls, spec: RaceSpec) -> RaceSketch:
        """A checked race's own sketch."""
        return cls(spec.name, tuple((c.key, c.agent) for c in spec.candidates), spec.path, spec.repository)


def sketch_race(path: Path) -> RaceSketch | None:
    """The race file's sketch, or None when it is not a readable regular file of TOML whose
    candidates each have a string key and agent (the check then says what is wrong)."""
    try:
        # Only a regular file: opening a FIFO would block the screen's loop until a writer came.
        if not stat.S_ISREG(os.stat(path.expanduser()).st_mode):
            return None
        source = path.expanduser().read_bytes()
        document = tomllib.loads(source.decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    race, tables = document.get("race"), document.get("candidates")
    if not isinstance(race, dict) or not isinstance(tables, list) or not tables:
        return None
    candidates = tuple(_key_and_agent(table) for table in tables)
    keys = [key for key, _ in candidates]
    if "" in keys or len(set(keys)) != len(keys):
        return None
    name = race.get("name", "race")
    return RaceSketch(
        name if isinstance(name, str) else "race", candidates, path, _repository(path, race), source
    )


def _repository(path: Path, race: dict[str, Any]) -> Path | None:
    """[race] repository, relative to the race file (the check then says whether it is one)."""
    named = race.get("repository")
    if not isinstance(named, str):
        return None
    try:
        return (path.expanduser().resolve().parent / Path(named).expanduser()).resolve()
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop, or no home for ~
        return None


def _key_and_agent(table: Any) -> tuple[str, str]:
    key = table.get("key") if isinstance(table, dict) else None
    agent = table.get("agent") if isinstance(table, dict) else None
    if not isinstance(key, str) or not isinstance(agent, str):
        return "", ""
    return key, agent
