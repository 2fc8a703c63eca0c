"""`outpost-tui sample`: list the sample races, or write one to a directory (and run it)."""

from __future__ import annotations

import argparse
import shlex
import sys

from .. import exitcodes
from ..engine.errors import OutpostError

EPILOG = """\
examples:
  outpost-tui sample                         list the samples
  outpost-tui sample race /tmp/demo          write the 'race' sample to /tmp/demo
  outpost-tui sample race /tmp/demo --run     write it and run it: in the app when in a terminal
  outpost-tui sample fallback /tmp/fb --run --headless   run it headless, even in a terminal

exit codes: 0 listed or written (with --run: 0 a winner, 1 no winner), 2 unknown sample, DIR not
new or empty, or not writable (one line naming the path and the reason)
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "sample",
        help="list the sample races, or write one to a directory to try it",
        description="Sample races run offline with scripted demo agents on a small repository.\n"
        "Writing one creates DIR/race.toml, its scripts, and DIR/project (a fresh git\n"
        "repository with one commit), so trying a sample never touches your own code.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("name", nargs="?", metavar="NAME", help="the sample to write")
    parser.add_argument(
        "directory", nargs="?", metavar="DIR", help="where to write it (must be new or empty)"
    )
    parser.add_argument(
        "--run",
        action="store_true",
        help="run the race right after writing it: in the app, started, when run "
        "in a terminal; headless otherwise",
    )
    parser.add_argument(
        "--headless", action="store_true", help="with --run: headless even in a terminal (progress on stderr)"
    )
    parser.set_defaults(handler=handle, sample_parser=parser, error_prefix="outpost-tui sample")


def handle(args: argparse.Namespace) -> int:
    from ..samples import materialise  # tomllib and git: not for `--help`

    if args.name is None:
        if args.run:
            return _usage_error(args, "--run needs a sample NAME and a DIR")
        return _list()
    if args.directory is None:
        return _usage_error(args, f"sample {args.name!r} needs a DIR to write it to")
    path = materialise(args.name, args.directory)
    print(f"Wrote sample {args.name!r}: {path}")
    command = f"outpost-tui run {shlex.quote(str(path))} --headless"
    if not args.run:
        print(f"Run it with:\n  {command}")
        return exitcodes.WINNER
    if not args.headless and sys.stdin.isatty() and sys.stdout.isatty():
        # A newcomer at a terminal sees the product itself: the app on the race, already started.
        from ..ui import open_app

        return open_app(str(path), start=True)
    print(f"Running it now, as:\n  {command}")
    sys.stdout.flush()
    from .run import run_headless  # the run machinery is only needed when asked to run

    return run_headless(path, json_output=False)


def _list() -> int:
    from ..samples import samples

    known = samples()
    width = max((len(sample.name) for sample in known), default=0)
    for sample in known:
        print(f"{sample.name:<{width}}  {sample.description}".rstrip())
    print("\nWrite one with: outpost-tui sample NAME DIR  (add --run to run it at once)")
    return exitcodes.WINNER


def _usage_error(args: argparse.Namespace, message: str) -> int:
    raise OutpostError(f"error: {message} (see `{args.sample_parser.prog} --help`)")
