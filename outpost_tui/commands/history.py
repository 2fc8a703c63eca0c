"""`outpost-tui history [REPO]`: the races recorded in a repository, newest first."""

from __future__ import annotations

import argparse
import json
import time

from . import add_repository_argument

EPILOG = """\
examples:
  outpost-tui history                   races recorded in the repository here
  outpost-tui history ../project --json
  outpost-tui show RACE-ID --headless   print one of them again as its run printed it

Every race leaves its events under <repo>/.outpost/runs/<race-id>/. A race with no race-finished
event is "unfinished": its coordinator was killed, or it is still running. A race whose events
cannot be read is listed as "unreadable" with the reason. Each race's flight log is checked against
the seal the race made when it ended: one changed since is listed as "tampered" with what changed
and nothing it claims; a finished one with no seal (recorded before logs were sealed) is marked
"(unsealed)": nothing vouches for what it says.

exit codes: 0 listed, 2 not a git repository (or its runs directory cannot be listed)
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "history",
        help="list recorded races",
        epilog=EPILOG,
        description="List the races recorded under <repo>/.outpost/runs, "
        "newest first: id, start time, status, winner, candidates.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_repository_argument(parser)
    parser.add_argument("--json", action="store_true", help="print the races as JSON")
    parser.set_defaults(handler=_handle)


def when(at: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at)) if at else "?"


def race_line(race) -> str:
    """One recorded race on one line: id, start, status, winner ("-": none), candidates (and what
    is wrong with it, when it cannot be read)."""
    line = (
        f"{race.id}  {when(race.started_at)}  {race.status:16} {race.winner or '-':16} "
        f"{', '.join(race.candidates) or '-'}"
    )
    if race.problem:
        line += f"  ({race.problem})"
    elif race.seal == "unsealed" and race.finished:
        line += "  (unsealed)"
    return line


def _handle(args) -> int:
    from ..engine.records.history import recorded_races

    races = recorded_races(args.repository)
    if args.json:
        print(json.dumps([race.to_json() for race in races], indent=2))
        return 0
    if not races:
        print("no races recorded here")
        return 0
    for race in races:
        print(race_line(race))
    return 0
