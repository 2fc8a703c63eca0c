"""Argument parsing for `outpost-tui`; each subcommand lives in outpost_tui/commands/."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import shlex
import sys
import time
import traceback
from pathlib import Path

from . import __version__, exitcodes
from .commands import MODULES
from .engine.errors import OutpostError
from .engine.statedir import state_directory

DESCRIPTION = """\
Race coding agents against each other on one task and keep the one whose work passes your tests.

Each candidate (Claude Code, Codex, or any command) gets the same brief on its own git branch and
worktree; the first result your validation accepts wins and the rest are cancelled.
"""

EPILOG = """\
examples:
  outpost-tui                                  open the app
  outpost-tui race.toml [--start]              open the app on a race (and start it)
  outpost-tui sample race /tmp/demo            materialise a sample race to try
  outpost-tui run /tmp/demo/race.toml --headless --json
  outpost-tui check race.toml                  validate a race file without running it

exit codes:
  0 a winner   1 no winner   2 bad race file or arguments
  3 run owned by a coordinator   4 revision changed   5 identity mismatch
  6 corrupt checkpoint   7 unknown run id   8 storage not writable   9 requirement missing
  10 interrupted durable run: replay it with `outpost-tui recover RUN-ID --replay`
  70 an error outpost-tui did not expect: one line, the traceback in the bug log (see the message)
  130 interrupted by Ctrl-C outside a race (during a race, Ctrl-C aborts the race cleanly)
  141 stdout was closed before everything was printed (e.g. piped into `head`); a race still ran
      to its end and a durable run is saved
"""


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors and exit code 2 (never a traceback)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(exitcodes.BAD_INPUT, f"outpost-tui: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="outpost-tui",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"outpost-tui {__version__}")
    # What errors are prefixed with; a command may name itself (`outpost-tui sample: ...`).
    parser.set_defaults(error_prefix="outpost-tui")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND", parser_class=Parser)
    for name in MODULES:
        try:
            module = importlib.import_module(f".commands.{name}", __package__)
        except ModuleNotFoundError as error:
            if error.name and error.name.endswith(f"commands.{name}"):
                continue  # a command not built yet
            raise
        module.register(subparsers)
    return parser


APP_USAGE = "usage: outpost-tui [RACE.toml [--start]] | outpost-tui COMMAND ... (see --help)"


def _app_arguments(argv: list[str]) -> tuple[str | None, bool] | None:
    """`outpost-tui [RACE.toml] [--start]` (no subcommand) opens the app: its race file and flag."""
    words = [word for word in argv if word != "--start"]
    if len(words) > 1 or (words and (words[0].startswith("-") or words[0] in MODULES)):
        return None
    return (words[0] if words else None), "--start" in argv


def main(argv: list[str] | None = None) -> int:
    # Everything, imports of the subcommands included, runs inside these handlers: a Ctrl-C or a
    # closed pipe at any moment ends with an exit code, never a traceback.
    try:
        try:
            return _main(sys.argv[1:] if argv is None else argv)
        finally:
            # A reader that went away is found here (also after --help's SystemExit), not in the
            # interpreter's final flush.
            sys.stdout.flush()
    except KeyboardInterrupt:
        _say("interrupted")
        return exitcodes.INTERRUPTED
    except BrokenPipeError:
        _drop_stdout()
        return exitcodes.CLOSED_OUTPUT
    except Exception as error:  # a bug: one line here, the traceback in the log it names
        return _report_bug(error)


def _say(text: str, prefix: str = "outpost-tui") -> None:
    with contextlib.suppress(OSError):  # stderr is gone too: the exit code says it
        print(f"{prefix}: {text}", file=sys.stderr, flush=True)


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split())[:500] or type(error).__name__


def bug_log() -> Path:
    """Where the tracebacks of unexpected errors go (the XDG state directory)."""
    return state_directory() / "bugs.log"


def _report_bug(error: Exception) -> int:
    log = bug_log()
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a", encoding="utf-8") as out:
            out.write(
                f"--- {time.strftime('%Y-%m-%d %H:%M:%S %z')} outpost-tui {__version__}: "
                f"{shlex.join(sys.argv)}\n"
            )
            traceback.print_exception(error, file=out)
        where = f"the traceback is in {log}"
    except OSError as problem:
        where = f"its traceback could not be written to {log}: {problem.strerror or problem}"
    _say(f"internal error: {type(error).__name__}: {_one_line(error)} ({where})")
    return exitcodes.BUG


def _drop_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush of what is still buffered does
    not raise BrokenPipeError again (the recipe in Python's signal module documentation)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass  # stdout has no descriptor (replaced in-process): nothing will flush to a pipe


def _main(argv: list[str]) -> int:
    """Run the command; an OutpostError it raises is its one line and its exit code."""
    prefix = "outpost-tui"
    try:
        app_args = _app_arguments(argv)
        if app_args is not None:
            race_file, start = app_args
            if race_file is not None:
                from .commands.run import check_before_opening

                check_before_opening(race_file)
            from .ui import open_app

            return open_app(race_file, start=start)
        parser = build_parser()
        args = parser.parse_args(argv)
        prefix = args.error_prefix
        handler = getattr(args, "handler", None)
        if handler is None:
            parser.print_help()
            return 0
        return int(handler(args) or 0)
    except OutpostError as error:  # anything else is a bug, which main reports
        _say(str(error), prefix)
        return error.exit_code


if __name__ == "__main__":
    sys.exit(main())
