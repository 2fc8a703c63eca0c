"""`outpost-tui show RACE-ID`: look back at a recorded race, in the app or as its headless run
printed it."""

from __future__ import annotations

import argparse
import json
import sys

from .. import exitcodes

EPILOG = """\
examples:
  outpost-tui show 20260101-120000-abcdef             the race in the app, as it ended (read-only)
  outpost-tui show 20260101-120000-abcdef --headless  its progress lines again, with their times
  outpost-tui show 20260101-120000-abcdef --json      its result, as `run --json` printed it
  outpost-tui history                                 the ids of the races recorded here

--headless prints on stdout the lines the live run printed on stderr (without the periodic usage
lines), from the events recorded under <repo>/.outpost/runs/<race-id>/. In the app, panels, zoom,
log search and diffs work; cancel, accept, abort and start do not: the race is over.

The flight log is checked against the seal the race made when it ended: a log changed since is
not shown; one with no seal (recorded before logs were sealed) is shown with a warning.

exit codes: 0 shown, 1 the race never finished (its coordinator was killed, or it still runs):
--json has no result to print and --headless says so after what was recorded, 2 unknown race id,
not a git repository, bad arguments, or the app without a terminal, 6 the flight log does not
match its seal
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "show",
        help="look back at a recorded race",
        epilog=EPILOG,
        description="Show a race recorded in a repository: in the app (read-only), or headless.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("race_id", metavar="RACE-ID", help="the race's id (see `outpost-tui history`)")
    parser.add_argument(
        "--repo",
        default=".",
        metavar="R",
        help="the repository the race ran in (default: the current directory)",
    )
    parser.add_argument(
        "--headless", action="store_true", help="print the race's progress lines instead of opening the app"
    )
    parser.add_argument(
        "--json", action="store_true", help="print the race's result as JSON on stdout (implies --headless)"
    )
    parser.set_defaults(handler=_handle)


def _handle(args) -> int:
    if args.json:
        return _print_result(args.repo, args.race_id)
    if args.headless:
        return _print_progress(args.repo, args.race_id)
    return _open_app(args.repo, args.race_id)


def _never_finished(race_id: str) -> str:
    return (
        f"outpost-tui: race {race_id} never finished: no race-finished event was recorded (its "
        f"coordinator was killed, or it is still running)"
    )


def _unsealed(race_id: str) -> str:
    return (
        f"outpost-tui: warning: race {race_id}'s flight log has no seal (recorded before logs were "
        f"sealed, or its coordinator was killed): nothing vouches for what it says"
    )


def _print_result(repository: str, race_id: str) -> int:
    from ..engine.records.history import recorded_result, recorded_seal

    result = recorded_result(repository, race_id)
    if recorded_seal(repository, race_id).state == "unsealed" and result is not None:
        print(_unsealed(race_id), file=sys.stderr)
    if result is None:
        print(_never_finished(race_id), file=sys.stderr)
        return exitcodes.NO_WINNER
    json.dump(result, sys.stdout, indent=2, allow_nan=False)
    sys.stdout.write("\n")
    return 0


def _print_progress(repository: str, race_id: str) -> int:
    from ..engine.core.model import RaceModel
    from ..engine.records.history import load_recording
    from ..progress import ProgressPrinter
    from .run import final_message_line

    # The printer keeps its own model: load_recording builds the screen's once the candidates
    # are known, and the printer only reads one for its usage lines, which a replay omits.
    printer = ProgressPrinter(RaceModel([]), stream=sys.stdout)
    recording = load_recording(repository, race_id, consumers=[printer])
    if recording.race.seal == "unsealed" and recording.result is not None:
        sys.stdout.flush()
        print(_unsealed(race_id), file=sys.stderr)
    if recording.skipped:
        sys.stdout.flush()
        print(
            f"outpost-tui: warning: {recording.skipped} recorded event(s) could not be replayed "
            "and are left out",
            file=sys.stderr,
        )
    if recording.result is None:
        sys.stdout.flush()
        print(_never_finished(race_id), file=sys.stderr)
        return exitcodes.NO_WINNER
    said = final_message_line(recording.result)
    if said:
        print(said)
    return 0


def _open_app(repository: str, race_id: str) -> int:
    from ..engine.records.history import race_directory

    race_directory(repository, race_id)  # an unknown id is one line here, not an empty app
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        print(
            "outpost-tui: the app needs a terminal; for scripts use `outpost-tui show RACE-ID "
            "--headless` or `--json`",
            file=sys.stderr,
        )
        return exitcodes.BAD_INPUT
    from ..ui.app import OutpostApp

    OutpostApp(recorded=race_id, repository=repository).run()
    return 0
