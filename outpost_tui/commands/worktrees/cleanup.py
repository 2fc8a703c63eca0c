"""`outpost-tui worktrees --prune`, `--delete-branches RACE` and `--remove-containers`: what many
races left, removed once nothing is lost, after a confirmation (in a terminal; elsewhere --yes)."""

from __future__ import annotations

import json
import signal
import sys
import threading

from ... import exitcodes
from ...engine.errors import OutpostError
from ...exitcodes import REFUSED
from .listing import race_containers


def _confirm(question: str, args) -> bool:
    if args.yes:
        return True
    if not sys.stdin.isatty():
        print(
            f"outpost-tui: {question} needs confirmation: run it in a terminal or add --yes", file=sys.stderr
        )
        return False
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


class _Stop:
    """Ctrl-C during a prune: stop after the worktree in hand. A second one says so again; the
    worktree in hand is still finished (archived and verified before removal), never cut short."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self.presses = 0

    def __call__(self, signum, frame) -> None:
        self.presses += 1
        self.event.set()
        print(
            "outpost-tui: stopping after the worktree being archived (nothing is half-removed)"
            if self.presses == 1
            else "outpost-tui: still stopping: the worktree in hand is finished first, then prune stops",
            file=sys.stderr,
            flush=True,
        )


def prune(root, args) -> int:
    from ...engine.kept import cleanup
    from ...engine.kept.retained import human_bytes, retained

    containers, engine_error = race_containers(root, args.endpoint)  # a running one keeps its worktree
    races = retained(root, containers=containers)
    steps = cleanup.plan_prune(races, older_than_days=args.older_than)
    removing = [s for s in steps if s.action == cleanup.REMOVE]
    if args.dry_run or (args.json and not removing):
        if args.json:
            print(
                json.dumps(
                    {
                        "dry_run": args.dry_run,
                        "steps": [s.to_json() for s in steps],
                        "would_free_bytes": sum(s.attempt.size_bytes or 0 for s in removing),
                    },
                    indent=2,
                )
            )
        else:
            for step in steps:
                removing_it = step.action == cleanup.REMOVE
                print(
                    f"{'would remove' if removing_it else 'keep'} {step.attempt.id}: {step.why}"
                    + (f" ({human_bytes(step.attempt.size_bytes)})" if removing_it else "")
                )
            if not steps:
                print(f"nothing to prune in {root}")
        return 0
    if not removing:
        for step in steps:
            print(f"keep {step.attempt.id}: {step.why}")
        print(f"nothing to prune in {root}")
        return 0
    total = sum(s.attempt.size_bytes or 0 for s in removing)
    question = f"archive and remove {len(removing)} worktree(s), {human_bytes(total)}?"
    if not _confirm(question, args):
        if args.json:  # stdout stays JSON on this exit too
            refused = f"not confirmed ({question}): nothing was removed"
            print(json.dumps({"error": refused, "exit_code": REFUSED}, indent=2))
        return REFUSED
    stop = _Stop()
    previous = signal.signal(signal.SIGINT, stop)
    try:

        def said(phase, step, text):
            if phase == "start":
                print(f"archiving {step.attempt.id} ({text})", file=sys.stderr, flush=True)
            elif phase == "removed":
                print(f"removed {step.attempt.id}: archived at {text}", file=sys.stderr, flush=True)
            else:
                print(f"kept {step.attempt.id}: {text}", file=sys.stderr, flush=True)

        report = cleanup.prune(
            root, steps, include_ignored=args.include_ignored, should_stop=stop.event.is_set, on_step=said
        )
    finally:
        signal.signal(signal.SIGINT, previous)
    if engine_error:
        print(f"(containers not checked: {engine_error}; processes were)", file=sys.stderr)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(
            f"removed {len(report.removed)} worktree(s), freed {human_bytes(report.freed_bytes)} "
            f"({report.freed_bytes} bytes); kept {len(report.kept)}"
        )
        for ident, why in report.kept:
            print(f"  kept {ident}: {why}")
        for removal in report.removed:
            if removal.archive.ignored_files:
                print(
                    f"  {removal.directory}: {removal.archive.ignored_files} ignored files "
                    f"({human_bytes(removal.archive.ignored_bytes)}) were not archived"
                )
    if report.stopped:
        return exitcodes.INTERRUPTED
    return REFUSED if report.failed else 0


def remove_containers(root, args) -> int:
    from ...engine.records.history import recorded_races
    from ...engine.sandbox import SandboxError
    from ...engine.sandbox.container_engine import remove_race_containers

    containers, engine_error = race_containers(root, args.endpoint)
    if engine_error:
        raise OutpostError(f"cannot list containers: {engine_error}", exit_code=REFUSED)
    finished = {race.id for race in recorded_races(root) if race.finished}
    leftover = [c for c in containers if c.get("race") in finished]
    kept = [
        {
            "name": c["name"],
            "race": c.get("race"),
            "why": f"race {c.get('race')} has not finished here (it may be running; a durable run's "
            "replay removes what an interrupted one left)",
        }
        for c in containers
        if c.get("race") not in finished
    ]
    races = sorted({c["race"] for c in leftover})
    plan = {
        "containers": [{"name": c["name"], "race": c["race"], "status": c.get("status")} for c in leftover],
        "kept": kept,
    }
    if args.dry_run or not leftover:
        if args.json:
            print(json.dumps({"dry_run": args.dry_run, **plan, "removed": 0}, indent=2))
        else:
            for c in leftover:
                print(f"would remove {c['name']} ({c.get('status')}) of finished race {c['race']}")
            for c in kept:
                print(f"keep {c['name']}: {c['why']}")
            if not leftover:
                print(f"no containers of finished races of {root}")
        return 0
    if not _confirm(f"remove {len(leftover)} container(s) of {len(races)} finished race(s)?", args):
        return REFUSED
    removed = 0
    try:
        for race in races:
            removed += remove_race_containers(race, args.endpoint, repository=root)
    except SandboxError as error:
        raise OutpostError(f"removed {removed} container(s), then: {error}", exit_code=REFUSED) from None
    if args.json:
        print(json.dumps({"dry_run": False, **plan, "removed": removed}, indent=2))
    else:
        print(f"removed {removed} container(s) of finished race(s) {', '.join(races)}")
        for c in kept:
            print(f"kept {c['name']}: {c['why']}")
    return 0


def delete_branches(root, args) -> int:
    from ...engine.kept import archive, cleanup

    checks = cleanup.check_branches(root, args.delete_branches)
    if not checks:
        raise OutpostError(f"race {args.delete_branches} has no branches in {root}")
    if args.archive_unmerged and not args.dry_run:
        unmerged = [c for c in checks if not c.deletable and c.unmerged]
        if unmerged and not _confirm(
            f"archive {len(unmerged)} branch(es) with unmerged commits first?", args
        ):
            return REFUSED
        for check in unmerged:
            cleanup.archive_branch(root, check.branch)
        checks = cleanup.check_branches(root, args.delete_branches)
    deletable = [c for c in checks if c.deletable]
    if args.dry_run:
        if args.json:
            print(json.dumps({"dry_run": True, "branches": [c.to_json() for c in checks]}, indent=2))
        else:
            for check in checks:
                print(f"{'would delete' if check.deletable else 'keep'} {check.branch}: {check.why}")
        return 0
    deleted = []
    if deletable and _confirm(f"delete {len(deletable)} branch(es) of race {args.delete_branches}?", args):
        for check in deletable:
            try:
                cleanup.delete_branch(root, check)
                deleted.append(check.branch)
            except archive.ArchiveError as error:
                check.deletable, check.why = False, str(error)
    elif deletable:
        return REFUSED
    kept = [c for c in checks if c.branch not in deleted]
    if args.json:
        print(json.dumps({"deleted": deleted, "kept": [c.to_json() for c in kept]}, indent=2))
    else:
        for branch in deleted:
            print(f"deleted {branch}")
        for check in kept:
            print(f"kept {check.branch}: {check.why}", file=sys.stderr)
    return REFUSED if kept else 0
