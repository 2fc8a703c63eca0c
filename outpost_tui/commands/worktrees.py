"""`outpost-tui worktrees [REPO]`: review what races kept; archive, restore, prune, delete branches."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading

from .. import exitcodes
from ..engine.errors import OutpostError

EPILOG = """\
examples:
  outpost-tui worktrees                         the review screen (in a terminal), else a listing
  outpost-tui worktrees ../project --json       every kept attempt: outcome, what it holds, size, age
  outpost-tui worktrees --archive RACE/KEY/1    archive one worktree, then remove it (branch kept)
  outpost-tui worktrees --restore RACE/KEY/1    recreate it from its branch and archive, byte for byte
  outpost-tui worktrees --prune --dry-run       what a prune would remove and keep, and why
  outpost-tui worktrees --prune --older-than 7 --yes
  outpost-tui worktrees --delete-branches RACE  delete a race's branches that hold nothing unmerged
  outpost-tui worktrees --remove-containers --yes   remove containers left by finished races

An attempt is named RACE/KEY/ATTEMPT, by its branch (outpost/speculation/RACE/KEY/ATTEMPT) or by its
worktree's path. Before a worktree is removed, everything in it that its branch does not hold
(uncommitted and untracked files, modes, symlinks; ignored files with --include-ignored) is committed
to refs/outpost/archive/RACE/KEY/ATTEMPT and checked against the disk. A worktree a process still uses
(its working directory or an open file inside) is never removed; the process is named. A branch is
deleted only when its commits are on another branch, tag or archive, or its change is already on your
branches (by patch-id: squash-merged or cherry-picked counts); --archive-unmerged archives the others
first. Containers are removed (by their outpost.race label) only for races that finished: a
running race still uses its own, and a durable run's replay removes those of an interrupted one.
Prune, branch deletion and container removal ask for confirmation in a terminal; elsewhere they
need --yes.
During a prune, Ctrl-C stops after the worktree being archived; nothing is ever half-removed.

exit codes: 0 done, 1 something was refused or kept (said on stderr), 2 bad input (not a git
repository, no such attempt or race), 130 stopped by Ctrl-C (what was done is reported)
"""

REFUSED = exitcodes.REFUSED


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "worktrees",
        help="review, archive, restore and prune retained worktrees",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Review the candidate worktrees races kept, and clean them up without losing anything.",
    )
    parser.add_argument(
        "repository",
        nargs="?",
        default=".",
        metavar="REPO",
        help="the repository (default: the current directory)",
    )
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--archive", metavar="ID", help="archive the attempt's worktree, then remove it")
    action.add_argument("--restore", metavar="ID", help="recreate the attempt's worktree from its archive")
    action.add_argument(
        "--prune",
        action="store_true",
        help="archive and remove every worktree of finished races (see --older-than)",
    )
    action.add_argument(
        "--delete-branches", metavar="RACE", help="delete the race's branches that hold nothing unmerged"
    )
    action.add_argument(
        "--remove-containers",
        action="store_true",
        help="remove the containers left by finished races of this repository "
        "(e.g. after the container engine went away mid-race)",
    )
    parser.add_argument(
        "--older-than",
        type=float,
        metavar="DAYS",
        help="with --prune: only worktrees at least DAYS old (unfinished races included)",
    )
    parser.add_argument(
        "--include-ignored",
        action="store_true",
        help="archive ignored files too (otherwise they are removed; their size is shown)",
    )
    parser.add_argument(
        "--archive-unmerged",
        action="store_true",
        help="with --delete-branches: archive a branch with unmerged commits, then delete it",
    )
    parser.add_argument("--dry-run", action="store_true", help="say what would be done; change nothing")
    parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument(
        "--endpoint",
        metavar="URL",
        help="the container engine to list candidate containers from (default: "
        "DOCKER_HOST, then the usual Docker and Podman sockets)",
    )
    parser.set_defaults(handler=_handle)


def _handle(args) -> int:
    from ..engine import git

    if args.older_than is not None and not args.prune:
        raise OutpostError("--older-than goes with --prune")
    if args.older_than is not None and args.older_than < 0:
        raise OutpostError(f"--older-than must be 0 or more days, not {args.older_than:g}")
    if args.archive_unmerged and not args.delete_branches:
        raise OutpostError("--archive-unmerged goes with --delete-branches")
    root = git.repository_root(args.repository)  # not a repository: bad input
    try:
        if args.archive:
            return _archive(root, args)
        if args.restore:
            return _restore(root, args)
        if args.prune:
            return _prune(root, args)
        if args.delete_branches:
            return _delete_branches(root, args)
        if args.remove_containers:
            return _remove_containers(root, args)
        return _list(root, args)
    except git.GitError as error:  # git refused or failed in the repository: nothing was lost
        raise OutpostError(str(error), exit_code=REFUSED) from None


# --- listing ---------------------------------------------------------------------------------------


def _list(root, args) -> int:
    from ..engine import git
    from ..engine.kept.retained import human_age, human_bytes, retained

    if not args.json and sys.stdin.isatty() and sys.stdout.isatty():
        from ..ui import launch

        return launch(screen="worktrees", repository=root)
    containers, engine_error = _containers(root, args.endpoint)
    races = retained(root, containers=containers)
    worktrees = git.list_worktrees(root)
    unlisted = [w for w in worktrees if not w.get("race_id")]
    if args.json:
        print(
            json.dumps(
                {
                    "repository": str(root),
                    "worktrees": worktrees,
                    "races": [r.to_json() for r in races],
                    "containers": containers,
                    "container_engine_error": engine_error,
                },
                indent=2,
            )
        )
        return 0
    if not races and not unlisted:
        print(f"no retained worktrees or archives in {root}")
    for race in races:
        print(f"race {race.id}{' (' + race.name + ')' if race.name else ''}: {race.status}")
        for row in race.attempts:
            where = (
                row.path
                if row.present
                else (
                    f"archived at {row.archive[:12]}"
                    if row.archive
                    else "only its branch is kept"
                    if not row.path
                    else "missing"
                )
            )
            stat = row.diff_stat
            changes = (
                f"{stat['files']} files +{stat['insertions']} -{stat['deletions']}" if stat else "no diff"
            )
            print(f"  {row.key}#{row.attempt} {row.outcome}{': ' + row.reason if row.reason else ''}")
            print(f"      {where}")
            details = [
                changes,
                f"size {human_bytes(row.size_bytes)}" if row.size_bytes is not None else "",
                f"age {human_age(row.age_seconds)}",
                row.holds.describe() if row.holds else "",
            ]
            if row.verdict:
                details.append("verdict " + ", ".join(f"{k} {v}" for k, v in row.verdict.items()))
            if row.container:
                details.append(f"container {row.container.get('name')} ({row.container.get('status')})")
            if row.occupants:
                details.append("in use by " + "; ".join(o.describe() for o in row.occupants))
            if row.problem:
                details.append(f"not inspected: {row.problem}")
            print("      " + ", ".join(d for d in details if d))
    for w in unlisted:
        print(f"{w['path']}\n    {w['branch'] or 'detached'}: not a race's worktree")
    if engine_error:
        print(f"(containers not listed: {engine_error})", file=sys.stderr)
    return 0


def _containers(root, endpoint: str | None) -> tuple[list[dict], str | None]:
    from ..engine.sandbox import SandboxError
    from ..engine.sandbox.container_engine import list_containers

    try:
        return list_containers(repository=str(root), endpoint=endpoint), None
    except SandboxError as error:
        return [], str(error)


def _attempt(root, ident: str):
    from ..engine.kept.retained import find, retained

    return find(retained(root, detail=False, processes=False), ident)


# --- archive and restore -------------------------------------------------------------------------


def _archive(root, args) -> int:
    from ..engine.kept import archive
    from ..engine.kept.processes import occupants
    from ..engine.kept.removal import Occupied, archive_and_remove
    from ..engine.kept.retained import human_bytes

    row = _attempt(root, args.archive)
    if not row.present:
        raise OutpostError(
            f"{row.id} has no worktree to archive"
            + (f" (archived at {row.archive[:12]})" if row.archive else ""),
            exit_code=REFUSED,
        )
    attempt = archive.Attempt(row.race_id, row.key, row.attempt)
    if args.dry_run:
        entries, _, left = archive.scan(row.path, args.include_ignored)
        busy = occupants(row.path)
        plan = {
            "id": row.id,
            "path": row.path,
            "ref": attempt.ref,
            "files": len(entries),
            "ignored_left_out": {"files": len(left), "bytes": sum(e.size for e in left)},
            "occupants": [o.to_json() for o in busy],
            "dry_run": True,
        }
        if args.json:
            print(json.dumps(plan, indent=2))
        else:
            print(f"would archive {len(entries)} files of {row.path} to {attempt.ref}, then remove it")
            if left:
                print(
                    f"ignored files not archived (removed with it): {len(left)}, "
                    f"{human_bytes(plan['ignored_left_out']['bytes'])} (--include-ignored keeps them)"
                )
            if busy:
                print("refused now: in use by " + "; ".join(o.describe() for o in busy))
        return REFUSED if busy else 0
    try:
        removal = archive_and_remove(root, row.path, attempt, include_ignored=args.include_ignored)
    except Occupied as error:
        if args.json:
            print(
                json.dumps(
                    {
                        "id": row.id,
                        "done": False,
                        "reason": str(error),
                        "occupants": [o.to_json() for o in error.occupants],
                    },
                    indent=2,
                )
            )
        raise
    if args.json:
        print(json.dumps({"id": row.id, "done": True, **removal.to_json()}, indent=2))
    else:
        done = removal.archive
        print(
            f"archived {done.files} files of {row.path} to {done.ref} ({done.commit[:12]}) and removed it; "
            f"{human_bytes(removal.freed_bytes)} freed; its branch {row.branch} is kept"
        )
        if done.ignored_files:
            print(f"ignored files not archived: {done.ignored_files}, {human_bytes(done.ignored_bytes)}")
        print(f"restore with: outpost-tui worktrees --restore {row.id}")
    return 0


def _restore(root, args) -> int:
    from ..engine.kept import archive
    from ..engine.kept.restore import restore

    attempt = _parse_attempt(args.restore)
    if attempt is None:
        row = _attempt(root, args.restore)
        attempt = archive.Attempt(row.race_id, row.key, row.attempt)
    commit = archive.archived_commit(root, attempt)
    if commit is None:
        raise OutpostError(f"no archive of {attempt.label} ({attempt.ref} does not exist)")
    if args.dry_run:
        manifest = archive.manifest_of(root, commit)
        plan = {
            "id": attempt.label,
            "archive": commit,
            "directory": manifest.get("directory"),
            "head": manifest.get("head"),
            "dry_run": True,
        }
        print(
            json.dumps(plan, indent=2)
            if args.json
            else f"would restore {attempt.label} from {commit[:12]} into {manifest.get('directory')}"
        )
        return 0
    target = restore(root, attempt)
    if args.json:
        print(
            json.dumps(
                {"id": attempt.label, "done": True, "archive": commit, "directory": str(target)}, indent=2
            )
        )
    else:
        print(f"restored {attempt.label} from {commit[:12]} into {target}")
    return 0


def _parse_attempt(ident: str):
    from ..engine import git
    from ..engine.kept import archive

    parts = ident.removeprefix(git.BRANCH_PREFIX + "/").split("/")
    if len(parts) == 3 and parts[2].isdigit():
        try:
            git.branch_name(parts[0], parts[1], int(parts[2]))
        except ValueError:
            return None
        return archive.Attempt(parts[0], parts[1], int(parts[2]))
    return None


# --- containers left behind -----------------------------------------------------------------------


def _remove_containers(root, args) -> int:
    from ..engine.records.history import recorded_races
    from ..engine.sandbox import SandboxError
    from ..engine.sandbox.container_engine import remove_race_containers

    containers, engine_error = _containers(root, args.endpoint)
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


# --- prune -----------------------------------------------------------------------------------------


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


def _prune(root, args) -> int:
    from ..engine.kept import cleanup
    from ..engine.kept.retained import human_bytes, retained

    containers, engine_error = _containers(root, args.endpoint)  # a running one keeps its worktree
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
    if not _confirm(f"archive and remove {len(removing)} worktree(s), {human_bytes(total)}?", args):
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


# --- branches ----------------------------------------------------------------------------------------


def _delete_branches(root, args) -> int:
    from ..engine.kept import archive, cleanup

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
