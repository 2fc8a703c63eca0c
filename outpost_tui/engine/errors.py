"""The one root of the errors the engine raises for the operator.

Every engine error is an `OutpostError`: its `str()` is one line fit to print as it is, and its
`exit_code` is the command line's exit status for it (exitcodes.py). The specific subclasses
(RaceFileError, GitError, CheckpointError, ...) say what went wrong and where; the command line
catches the root once (cli.py) and prints `outpost-tui: <message>`, and the app shows the same
line. Anything else that escapes is a bug and is reported as one.
"""

from __future__ import annotations

from .. import exitcodes


class OutpostError(Exception):
    """An error for the operator: a one-line message and the exit status that goes with it."""

    exit_code: int = exitcodes.BAD_INPUT

    def __init__(self, *args: object, exit_code: int | None = None) -> None:
        # exit_code: where the same error means something else to the command that met it (a git
        # failure is bad input when locating the repository, a refusal when archiving in it).
        super().__init__(*args)
        if exit_code is not None:
            self.exit_code = exit_code

    def __str__(self) -> str:
        # Messages quote what they were given (git's stderr, a path, a file's text); a line break in
        # there would split one error over several lines of a terminal or a log.
        return " ".join(super().__str__().split())
