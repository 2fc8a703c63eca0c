"""`outpost-tui worktrees [REPO]`: review what races kept; archive, restore, prune, delete branches.

Here the command line and its dispatch; `listing.py` (the review screen or a listing), `attempts.py`
(one attempt archived or restored), `cleanup.py` (prune, branch deletion, leftover containers).
"""

from __future__ import annotations

import argparse
import json
import math

from ... import exitcodes
from ...engine.errors import OutpostError
from .. import add_repository_argument
from .attempts import archive_attempt, restore_attempt
from .cleanup import delete_branches, prune, remove_containers
from .listing import list_kept

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

With --json, stdout is JSON on every exit; an error is {"error": LINE, "exit_code": N}.

exit codes: 0 done, 1 something was refused or kept (said on stderr), 2 bad input (not a git
repository, no such attempt or race, --older-than not a finite number of days, 0 or more),
130 stopped by Ctrl-C (what was done is reported)
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
    add_repository_argument(parser)
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
        metavar="DAYS",  # read by _days, so that --json also hears a bad value as JSON
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


def _days(text: str) -> float:
    try:
        days = float(text)
    except ValueError:
        days = math.nan
    # nan compares false with every age (nothing would ever be old enough), inf likewise
    if not math.isfinite(days) or days < 0:
        raise OutpostError(f"--older-than must be a finite number of days, 0 or more: not {text!r}")
    return days


def _handle(args) -> int:
    if not args.json:
        return _dispatch(args)
    # --json: stdout is JSON on every exit, an error included (its line also goes to stderr)
    try:
        return _dispatch(args)
    except OutpostError as error:
        _print_error(str(error), error.exit_code)
        raise
    except KeyboardInterrupt:
        _print_error("interrupted", exitcodes.INTERRUPTED)
        raise
    except Exception as error:  # a bug: cli.py reports it and logs its traceback
        _print_error(f"internal error: {type(error).__name__}: {error}", exitcodes.BUG)
        raise


def _print_error(message: str, exit_code: int) -> None:
    print(json.dumps({"error": " ".join(message.split()), "exit_code": exit_code}, indent=2), flush=True)


def _dispatch(args) -> int:
    from ...engine import git

    if args.older_than is not None and not args.prune:
        raise OutpostError("--older-than goes with --prune")
    if args.older_than is not None:
        args.older_than = _days(args.older_than)
    if args.archive_unmerged and not args.delete_branches:
        raise OutpostError("--archive-unmerged goes with --delete-branches")
    root = git.repository_root(args.repository)  # not a repository: bad input
    try:
        if args.archive:
            return archive_attempt(root, args)
        if args.restore:
            return restore_attempt(root, args)
        if args.prune:
            return prune(root, args)
        if args.delete_branches:
            return delete_branches(root, args)
        if args.remove_containers:
            return remove_containers(root, args)
        return list_kept(root, args)
    except git.GitError as error:  # git refused or failed in the repository: nothing was lost
        raise OutpostError(str(error), exit_code=REFUSED) from None
