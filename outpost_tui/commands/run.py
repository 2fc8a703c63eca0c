"""`outpost-tui run RACE.toml --headless [--json]`: run a race without the app."""

from __future__ import annotations

import argparse
import json
import shlex
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from .. import exitcodes
from ..engine.errors import OutpostError

if TYPE_CHECKING:
    from ..engine.core.result import RaceResult
    from ..engine.racing.coordinator import Race
    from ..progress import ProgressPrinter

EPILOG = """\
examples:
  outpost-tui run race.toml --headless          progress on stderr, summary at the end
  outpost-tui run race.toml --json              the result as one JSON document on stdout
                                                (--json implies --headless)

exit codes: 0 a winner, 1 no winner, 2 bad race file or arguments (one line, no traceback);
durable runs: 3 owned by a coordinator, 4 revision changed (the run was released or taken over
while running), 5 identity mismatch, 6 corrupt checkpoint, 7 unknown run id, 8 storage failed or
not writable (the race is stopped), 10 interrupted run: replay it with --resume or
`outpost-tui recover RUN-ID --replay`. Ctrl-C aborts the race cleanly (status aborted).
SIGTERM (e.g. `recover --stop`) stops a durable run so that it can be replayed (exit 10); any other
race it aborts like Ctrl-C.
"""

USAGE_EVERY = 5.0


class _JsonImpliesHeadless(argparse.Action):
    """--json: only a headless run prints a result, so asking for it means running headless."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        namespace.json = True
        namespace.headless = True


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run a race (headless: for scripts and CI)",
        epilog=EPILOG,
        description="Run a race file. With --headless, progress goes to stderr and the result "
        "to stdout; without it, the app opens on the race and starts it.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("race_file", metavar="RACE.toml", help="the race file")
    parser.add_argument("--headless", action="store_true", help="run without the app")
    parser.add_argument(
        "--json",
        action=_JsonImpliesHeadless,
        nargs=0,
        default=False,
        help="print the result as JSON on stdout (implies --headless)",
    )
    parser.add_argument("--verbose", "-v", action="store_true", help="also print every tool call")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="authorise replaying an interrupted durable race (retry-incomplete)",
    )
    parser.set_defaults(handler=_handle)


def _handle(args) -> int:
    if not args.headless:
        from ..ui import open_app

        check_before_opening(args.race_file)
        return open_app(args.race_file, start=True, replay=args.resume)
    return run_headless(args.race_file, json_output=args.json, verbose=args.verbose, resume=args.resume)


def check_before_opening(path: str | Path) -> None:
    """Before the app opens on a race file: one the app can paint (its candidates named) is checked
    in the app, after its first frame; any other is refused here, in one line (RaceFileError), not
    an app that opens on it. Without a terminal no app opens: the file is checked here."""
    from ..ui.race_sketch import sketch_race

    if not (sys.stdin.isatty() and sys.stdout.isatty()) or sketch_race(Path(path)) is None:
        load_spec(path)


def load_spec(path: str | Path, *, resume: bool = False):
    """The race file's spec; RaceFileError (one line naming file, line and key) when it is bad."""
    from ..engine.racefile import load_race

    spec = load_race(path)
    return spec.replay_authorised() if resume else spec


def run_headless(
    path: str | Path, *, json_output: bool = False, verbose: bool = False, resume: bool = False, stream=None
) -> int:
    spec = load_spec(path, resume=resume)
    return run_spec_headless(spec, json_output=json_output, verbose=verbose, stream=stream)


def run_spec_headless(spec, *, json_output: bool = False, verbose: bool = False, stream=None) -> int:
    # The engine is imported when a race runs, not when the parser is built (`--help` stays instant).
    import anyio

    from ..engine.api import new_race
    from ..engine.core.events import EventBus
    from ..engine.core.statuses import RaceStatus
    from ..progress import ProgressPrinter

    bus = EventBus()
    race = new_race(spec, bus=bus)
    printer = ProgressPrinter(race.model, stream=stream, verbose=verbose)
    bus.subscribe(printer)

    async def main() -> RaceResult:
        outcome: dict = {}
        async with anyio.create_task_group() as group:
            group.start_soon(_abort_on_signal, race)
            group.start_soon(_usage_ticker, printer)
            try:
                outcome["result"] = await race.run()
            except Exception as error:  # re-raised below, outside the group, unwrapped
                outcome["error"] = error
            finally:
                group.cancel_scope.cancel()
        if "error" in outcome:
            raise outcome["error"]
        return outcome["result"]

    result = anyio.run(main)  # a race that cannot start raises its one-line error to the CLI
    for problem in bus.errors:
        print(f"outpost-tui: warning: an event consumer failed: {problem}", file=sys.stderr)
    durable = race.checkpointing
    for warning in durable.warnings if durable is not None else []:
        print(f"outpost-tui: warning: {warning}", file=sys.stderr)
    if json_output:
        json.dump(result.to_json(), sys.stdout, indent=2, allow_nan=False)  # strict JSON, always
        sys.stdout.write("\n")
        sys.stdout.flush()
    else:
        said = final_message_line(result)
        if said:
            out = stream or sys.stderr
            out.write(said + "\n")
            out.flush()
    failure = durable.failure if durable is not None else None
    if race.suspended and failure is None:
        run_id = spec.run_id
        print(
            f"outpost-tui: run {run_id} stopped; its candidates' work is kept: resume it with "
            f"`outpost-tui recover {run_id} --replay{_repo_option(spec)}`",
            file=sys.stderr,
        )
        return exitcodes.REPLAY_REQUIRED
    if failure is not None:
        # The checkpoint could not be written: whatever the race reached, the run is not recorded.
        raise OutpostError(result.error or str(failure), exit_code=failure.exit_code)
    return exitcodes.WINNER if result.status is RaceStatus.WINNER else exitcodes.NO_WINNER


def _repo_option(spec) -> str:
    """` --repo PATH` unless the current directory is the race's repository."""
    try:
        here = Path.cwd().resolve() == Path(spec.repository).resolve()
    except OSError:
        here = False
    return "" if here else f" --repo {shlex.quote(str(spec.repository))}"


def final_message_line(result: RaceResult, limit: int = 200) -> str | None:
    """The winner's own last words, on one line: what it says it did, beside the test verdict."""
    winner = result.winner
    if winner is None or not winner.result:
        return None
    text = " ".join(winner.result.split())
    return f"{winner.key} said: " + (text if len(text) <= limit else text[:limit] + "…")


async def _abort_on_signal(race: Race) -> None:
    import anyio

    # Ctrl-C is the operator's abort; SIGTERM is the coordinator being stopped (`recover --stop`,
    # kill, a CI timeout), which leaves a durable run to be replayed rather than finished.
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            if signum == signal.SIGTERM:
                race.stop_resumable()
            else:
                race.abort()


async def _usage_ticker(printer: ProgressPrinter) -> None:
    import anyio

    while True:
        await anyio.sleep(USAGE_EVERY)
        printer.tick()
