"""What the review screen (f3) says about kept work: a race's and an attempt's details, and the
questions it asks before a merge, an archive, a prune or a branch deletion, each a list of lines
(the screen wraps them to be read at 80 columns)."""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

from ..engine import git
from ..engine.core.result import Validation
from ..engine.kept import archive, cleanup
from ..engine.kept.retained import RetainedAttempt, RetainedRace, human_age, human_bytes

# A confirmation is read at 80 columns too: its lines are wrapped to fit the dialog there.
QUESTION_WIDTH = 68


def wrapped(lines: list[str]) -> str:
    return "\n".join(textwrap.fill(line, QUESTION_WIDTH, subsequent_indent="  ") for line in lines)


def race_details(race: RetainedRace) -> str:
    kept = sum(1 for r in race.attempts if r.present)
    return (
        f"race {race.id}{' (' + race.name + ')' if race.name else ''}: {race.status}\n"
        f"{len(race.attempts)} attempt(s), {kept} worktree(s) kept\n"
        "B deletes its branches that hold nothing unmerged; P prunes every finished race"
    )


def attempt_details(row: RetainedAttempt, *, path: str, again: Validation | None, marked: str | None) -> str:
    """`path`: its worktree's as shown; `again`: its validation run again from the screen, if it
    was; `marked`: the attempt marked for compare, if any."""
    lines = [f"branch {row.branch}", f"{row.outcome}" + (f": {row.reason}" if row.reason else "")]
    if row.verdict:
        lines[-1] += "  verdict " + ", ".join(f"{k} {v}" for k, v in row.verdict.items())
    if row.present:
        lines.append(f"worktree {path}, {human_bytes(row.size_bytes)}, {human_age(row.age_seconds)} old")
        if row.holds is not None:
            lines.append(f"holds {row.holds.describe()}")
    elif row.archive:
        lines.append(f"archived at {row.archive[:12]} (u restores the worktree)")
    elif not row.path:
        lines.append("only its branch is kept (no worktree, no archive)")
    if row.archive and row.present:
        lines.append(f"an earlier archive is at {row.archive[:12]}")
    if again is not None:
        lines.append(f"validated again: {again.status}" + (f" ({again.reason})" if again.reason else ""))
    if row.container:
        lines.append(f"container {row.container.get('name')} ({row.container.get('status')})")
    if row.occupants:
        lines.append("in use by " + "; ".join(o.describe() for o in row.occupants))
    if row.problem:
        lines.append(f"not inspected: {row.problem}")
    if marked and marked != row.id:
        lines.append(f"marked for compare: {marked} (c compares)")
    return "\n".join(lines)


def merge_question(row: RetainedAttempt, how: str, host: str) -> list[str]:
    verb = "Merge" if how == git.MERGE else "Cherry-pick the commits of"
    lines = [
        f"{verb} {row.id} ({str(row.head)[:12]}) into {host}?",
        "Integration check just now: clean. Your git hooks run; nothing is pushed.",
    ]
    if row.holds is not None and row.holds.anything:
        lines.append(
            f"Its worktree also holds {row.holds.describe()}: not part of the {how} "
            "(commit it in a shell first, s)."
        )
    return lines


def archive_question(row: RetainedAttempt, include_ignored: bool) -> list[str]:
    held = row.holds
    lines = [
        f"Archive {row.id} and remove its worktree?",
        f"Everything in it that its branch lacks goes to "
        f"{archive.Attempt(row.race_id, row.key, row.attempt).ref} first and is checked; "
        "the branch stays.",
    ]
    if held is not None and held.ignored:
        lines.append(
            f"Its {held.ignored} ignored file(s), {human_bytes(held.ignored_bytes)}, are archived too."
            if include_ignored
            else f"Its {held.ignored} ignored file(s), {human_bytes(held.ignored_bytes)}, are NOT kept "
            "(A archives them too)."
        )
    return lines


def prune_question(steps: list[cleanup.PruneStep]) -> list[str]:
    """The question for a prune that removes something (the plan has a REMOVE step)."""
    removing = [s for s in steps if s.action == cleanup.REMOVE]
    size = sum(s.attempt.size_bytes or 0 for s in removing)
    kept = [s for s in steps if s.action == cleanup.KEEP]
    lines = [
        f"Prune: archive and remove {len(removing)} worktree(s) of finished races, {human_bytes(size)}?",
        "Each is archived and checked before it goes; branches stay.",
    ]
    lines += [f"keep {s.attempt.id}: {s.why}" for s in kept[:4]]
    if len(kept) > 4:
        lines.append(f"and {len(kept) - 4} more kept")
    return lines


def branches_question(
    root: Path,
    race_id: str,
    deletable: list[cleanup.BranchCheck],
    unmerged: list[cleanup.BranchCheck],
    refused: list[cleanup.BranchCheck],
) -> list[str]:
    lines = [f"Delete {len(deletable) + len(unmerged)} branch(es) of race {race_id}?"]
    lines += [
        f"archive, then delete {c.branch}: {c.why.removesuffix(': archive it first')}" for c in unmerged[:4]
    ]
    lines += [f"delete {c.branch}: {c.why}" for c in deletable[:4]]
    lines += [f"keep {c.branch}: {c.why.replace(str(root) + os.sep, '')}" for c in refused[:3]]
    return lines


def no_branch_can_go(race_id: str, refused: list[cleanup.BranchCheck]) -> str:
    hint = "; D archives branches with unmerged commits first" if any(c.unmerged for c in refused) else ""
    return (
        f"no branch of race {race_id} can go: "
        + "; ".join(f"{c.branch.split('/', 3)[-1]}: {c.why}" for c in refused[:3])
        + hint
    )
