"""The race file: TOML in, an immutable RaceSpec out, and back again.

`locate` finds things (the file on disk, each key's line, the repository), `read` checks a file or
a text and builds the spec, `write` turns a spec back into a file, and `schema` derives all of
their keys and rules from the spec's own declarations. Every error is a RaceFileError naming the
file, the line and the dotted key, in one line.
"""

from .locate import RaceFileError
from .read import MAX_BRIEF_BYTES, check_budget, field_value, load_race, load_race_text
from .write import dump_race

__all__ = [
    "MAX_BRIEF_BYTES",
    "RaceFileError",
    "check_budget",
    "dump_race",
    "field_value",
    "load_race",
    "load_race_text",
]
