"""`outpost-tui serve`: the same app in a web browser (textual-serve), on this machine by default."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from ..engine.errors import OutpostError

EPILOG = """\
examples:
  outpost-tui serve                          the app at http://127.0.0.1:8000
  outpost-tui serve race.toml --port 8080    the app on a race, at http://127.0.0.1:8080
  outpost-tui serve --host 0.0.0.0           reachable from other machines: anyone who can reach
                                             the port drives the app (and its races)

Each browser tab gets its own app process, run as you, in this directory. Ctrl-C stops serving.

exit codes: 0 stopped with Ctrl-C, 2 bad race file or arguments
"""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="run the app in a web browser",
        epilog=EPILOG,
        description="Serve the outpost-tui app over HTTP with textual-serve: every browser tab runs\n"
        "the app as a process of its own.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("race_file", nargs="?", metavar="RACE.toml", help="open the app on this race")
    parser.add_argument("--start", action="store_true", help="start the race at once")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port to listen on (default 8000)")
    parser.set_defaults(handler=handle, error_prefix="outpost-tui serve")


def handle(args: argparse.Namespace) -> int:
    if not 0 < args.port < 65536:
        raise OutpostError(f"--port: must be between 1 and 65535, found {args.port}")
    app_argv = [sys.executable, "-m", "outpost_tui.ui.served"]
    if args.race_file is not None:
        from .run import load_spec

        load_spec(args.race_file)
        app_argv.append(str(Path(args.race_file).resolve()))
        if args.start:
            app_argv.append("--start")
    from textual_serve.server import Server

    Server(shlex.join(app_argv), host=args.host, port=args.port, title="outpost-tui").serve()
    return 0
