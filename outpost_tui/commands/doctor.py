"""`outpost-tui doctor [RACE.toml]`: what this machine has for racing agents, and what a race lacks."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import exitcodes
from ..engine.errors import OutpostError

if TYPE_CHECKING:
    from ..engine.machine.check import Check

EPILOG = """\
examples:
  outpost-tui doctor                 agent CLIs, logins, model APIs, git, container engine, storage
  outpost-tui doctor race.toml       the same, and exit 9 if something this race needs is missing
  outpost-tui doctor race.toml --json

Nothing here spends tokens: logins are judged from credential files and environment variables
("?" when that cannot tell); a model API is reachable when its base URL answers a HEAD request.

exit codes: 0 nothing the race needs is missing, 2 bad race file, 9 something it needs is missing
"""


def mark(check: Check) -> str:
    if check.ok is None:
        return "?"
    if check.ok:
        return "ok"
    return "MISSING" if check.required else "no"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "doctor",
        help="check agent CLIs, logins, git, container engine and storage",
        description="Check which agent programs are installed (and their versions), whether each\n"
        "looks logged in, git and its merge-tree support, the container engine and the\n"
        "storage directory. With a race file, exit non-zero when it needs something missing.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("race", metavar="RACE.toml", nargs="?", help="the race whose needs to check")
    parser.add_argument("--json", action="store_true", help="print the checks as JSON on stdout")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    spec = None
    if args.race:
        from ..engine.racefile import RaceFileError, load_race

        try:
            spec = load_race(args.race)
        except RaceFileError:
            advice = sample_advice(args.race)
            if advice is None:
                raise
            raise OutpostError(advice) from None
    from ..engine.machine.check import missing
    from ..engine.machine.doctor import run_checks

    checks = run_checks(spec)
    lacking = missing(checks)
    if args.json:
        print(
            json.dumps(
                {
                    "ok": not lacking,
                    "race": args.race,
                    "checks": [check.to_json() for check in checks],
                    "missing": [check.name for check in lacking],
                },
                indent=2,
            )
        )
    else:
        print(render(checks, args.race))
    return exitcodes.MISSING_REQUIREMENT if lacking else 0


def sample_advice(race: str) -> str | None:
    """For a sample's race file read where it ships (its project is not beside it there): how to
    write it somewhere it can be checked and run."""
    from ..samples import RACE_FILE, SampleError, samples

    try:
        resolved = Path(race).resolve()
        known = samples()
    except (OSError, SampleError):
        return None
    for sample in known:
        if resolved == (sample.directory / RACE_FILE).resolve():
            return (
                f"{race} is the {sample.name!r} sample, which runs on a project written beside it: "
                f"write it with `outpost-tui sample {sample.name} DIR`, "
                f"then `outpost-tui doctor DIR/{RACE_FILE}`"
            )
    return None


def render(checks: list[Check], race: str | None) -> str:
    name_width = max(len(check.name) for check in checks)
    lines = []
    for check in checks:
        needed = "needed" if check.required else ""
        lines.append(f"{mark(check):<7}  {check.name:<{name_width}}  {needed:<6}  {check.detail}".rstrip())
    from ..engine.machine.check import missing

    lacking = missing(checks)
    if race is None:
        lines.append("(give a race file to check what it needs: outpost-tui doctor RACE.toml)")
    elif lacking:
        lines.append(f"{race}: missing {', '.join(check.name for check in lacking)}")
    else:
        lines.append(f"{race}: everything it needs is here")
    return "\n".join(lines)
