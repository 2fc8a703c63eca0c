"""`outpost-tui recover RUN-ID --inspect | --stop | --release --revision R | --replay`."""

from __future__ import annotations

import argparse
import json
import sys

from .. import exitcodes
from ..engine.errors import OutpostError

EPILOG = """\
examples, the four steps in order:
  outpost-tui recover parser-race --stop                 stop the old coordinator, confirm it is gone
  outpost-tui recover parser-race --inspect              show the saved state and its revision
  outpost-tui recover parser-race --release --revision R clear ownership if R is still current
  outpost-tui recover parser-race --replay               run again: stop leftovers, restart interrupted
                                                         candidates as new attempts

exit codes: 0 done (--release on a run nobody owns changes nothing and says so), 2 bad arguments
or race file, 3 owned by a live coordinator, 4 revision changed, 5 identity mismatch,
6 corrupt checkpoint (left untouched), 7 unknown run id, 8 storage not writable.
--replay ends like `run --headless`: 0 a winner, 1 no winner, and 8 (storage failed) or 4 (the run
was released or taken over) when the checkpoint could not be saved while racing.
"""


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "recover",
        help="recover a durable race whose coordinator crashed",
        epilog=EPILOG,
        description="Recover a durable race: stop, inspect, release, replay.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("run_id", nargs="?", metavar="RUN-ID", help="the run to recover")
    parser.add_argument("--repo", default=".", help="the repository (default: current directory)")
    step = parser.add_mutually_exclusive_group()
    step.add_argument("--stop", action="store_true", help="stop the recorded coordinator")
    step.add_argument("--inspect", action="store_true", help="show the saved state")
    step.add_argument("--release", action="store_true", help="clear ownership (needs --revision)")
    step.add_argument("--replay", action="store_true", help="run the race again, resuming")
    parser.add_argument("--revision", help="the revision read by --inspect (only with --release)")
    parser.add_argument(
        "--race-file", help="the race file to replay (only with --replay; default: the one on record)"
    )
    parser.add_argument(
        "--timeout",
        type=_seconds,
        default=10.0,
        help="seconds to wait for the coordinator to exit in --stop, after TERM and "
        "again after KILL (default 10)",
    )
    parser.add_argument("--json", action="store_true", help="JSON output")
    parser.set_defaults(handler=_handle)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value >= 0 or value == float("inf"):  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds, found {text}")
    return value


def _misused_option(args) -> str | None:
    """An option given with a step that does not use it: said, not silently ignored."""
    step = (
        "--stop" if args.stop else "--release" if args.release else "--replay" if args.replay else "--inspect"
    )
    if args.revision is not None and not args.release:
        return f"--revision is only for --release, not {step}"
    if args.race_file is not None and not args.replay:
        return f"--race-file is only for --replay, not {step}"
    return None


def _handle(args) -> int:
    from ..engine.durable import recovery

    if args.run_id is None:
        if sys.stdin.isatty() and sys.stdout.isatty():
            from ..ui import launch

            return launch(screen="recover", repository=args.repo)
        from .runs import _handle as list_runs

        print(
            "recover which run? (without a terminal the wizard cannot open) the durable runs here:",
            file=sys.stderr,
        )
        list_runs(argparse.Namespace(repository=args.repo, json=False))
        return exitcodes.BAD_INPUT
    misused = _misused_option(args)
    if misused:
        raise OutpostError(f"{misused} (see `outpost-tui recover --help`)")
    if args.release and not args.revision:
        raise OutpostError("--release needs --revision R (read it with --inspect)")
    if args.stop:
        gone, reason = recovery.stop(args.repo, args.run_id, timeout=args.timeout)
        print(json.dumps({"stopped": gone, "reason": reason}) if args.json else reason)
        return 0 if gone else exitcodes.OWNED
    if args.release:
        revision = recovery.release(args.repo, args.run_id, args.revision)
        if revision is None:
            print(
                json.dumps({"released": False, "reason": "not owned"})
                if args.json
                else f"run {args.run_id} is not owned: nothing to release (replay it with --replay)"
            )
            return 0
        print(
            json.dumps({"released": True, "revision": revision})
            if args.json
            else f"run {args.run_id} released (revision {revision}); replay it with --replay"
        )
        return 0
    if args.replay:
        from .run import run_spec_headless

        spec = recovery.replay_spec(args.repo, args.run_id, args.race_file)
        return run_spec_headless(spec, json_output=args.json)
    view = recovery.inspect(args.repo, args.run_id)
    if args.json:
        print(json.dumps(view.to_json(), indent=2))
    else:
        _print_view(view)
    return 0


def _print_view(view) -> None:
    data = view.to_json()
    print(f"run {data['run_id']}: {data['status']} (revision {data['revision']})")
    print(f"  race {data['race_id']} from {str(data['baseline'])[:12]}, race file {data['race_file']}")
    if view.owner:
        print(f"  owner: pid {view.owner['pid']} on {view.owner['host']}: {view.coordinator.reason}")
    for attempt in data["attempts"]:
        resources = ", ".join(attempt["resources"]) or "none"
        print(
            f"  {attempt['key']}#{attempt['attempt']}: {attempt['phase']}, {attempt['status']}, "
            f"cleanup {attempt['cleanup']}, resources {resources}"
        )
        if attempt["directory"]:
            print(f"      worktree {attempt['directory']}")
    if view.owner:
        print(
            f"next: stop the coordinator, then `outpost-tui recover {data['run_id']} --release "
            f"--revision {data['revision']}`"
        )
