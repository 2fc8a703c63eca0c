"""Argument parsing for `outpost-tui`; each subcommand lives in outpost_tui/commands/."""

from __future__ import annotations

import argparse
import importlib
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
"""


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


def open_app(race_file: str | None = None, *, start: bool = False, screen: str | None = None) -> int:
    """Open the Textual app; it needs a terminal on both ends."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        print("outpost-tui: the app needs a terminal; for scripts use `outpost-tui run RACE.toml "
              "--headless`", file=sys.stderr)
        return exitcodes.BAD_INPUT
    from .ui import launch

    return launch(race_file, start=start, screen=screen)


def _app_arguments(argv: list[str]) -> tuple[str | None, bool] | None:
    """`outpost-tui [RACE.toml] [--start]` (no subcommand) opens the app: its race file and flag."""
    words = [word for word in argv if word != "--start"]
    if len(words) > 1 or (words and (words[0].startswith("-") or words[0] in MODULES)):
        return None
    return (words[0] if words else None), "--start" in argv


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    app_args = _app_arguments(argv)
    if app_args is not None:
        race_file, start = app_args
        if race_file is not None:
            from .commands.run import load_spec

            if load_spec(race_file)[0] is None:
                return exitcodes.BAD_INPUT
        return open_app(race_file, start=start)
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 0
    try:
        return int(handler(args) or 0)
    except KeyboardInterrupt:
        print("outpost-tui: interrupted", file=sys.stderr)
        return exitcodes.INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
