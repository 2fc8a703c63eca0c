"""Argument parsing for `outpost-tui`; each subcommand lives in outpost_tui/commands/."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from . import __version__, exitcodes
from .commands import MODULES

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
  130 interrupted by Ctrl-C outside a race (during a race, Ctrl-C aborts the race cleanly)
  141 stdout was closed before everything was printed (e.g. piped into `head`); a race still ran
      to its end and a durable run is saved
"""

# The shell's code for a process killed by SIGPIPE (128 + 13): what `cmd | head` scripts expect.
CLOSED_OUTPUT = 141


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors and exit code 2 (never a traceback)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(exitcodes.BAD_INPUT, f"outpost-tui: error: {message} (see `{self.prog} --help`)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="outpost-tui", description=DESCRIPTION, epilog=EPILOG,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"outpost-tui {__version__}")
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
        return CLOSED_OUTPUT


def _say(text: str) -> None:
    try:
        print(f"outpost-tui: {text}", file=sys.stderr, flush=True)
    except OSError:
        pass  # stderr is gone too: the exit code says it


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
    app_args = _app_arguments(argv)
    if app_args is not None:
        race_file, start = app_args
        if race_file is not None:
            from .commands.run import load_spec

            if load_spec(race_file)[0] is None:
                return exitcodes.BAD_INPUT
        from .ui import open_app

        return open_app(race_file, start=start)
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 0
    return int(handler(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
