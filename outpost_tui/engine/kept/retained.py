"""What races kept, for review: every attempt's worktree (or archive) with its outcome and what it holds.

One row per attempt, grouped by race (newest first): how the attempt ended and why (from the race's
recorded result), what its worktree holds beyond its last commit, its size and age, the diff stat of
its whole work (committed or not) against the race's baseline, its container and whoever still runs
in it. The whole work is a tree written from the files on disk (archive.snapshot), so a diff or a
comparison of two candidates sees exactly what the worktree holds, untracked files included.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import git
from ..core.events import RaceStarted
from ..errors import OutpostError
from ..paths import real_path
from ..records import history
from . import archive
from .comparison import diff_stat
from .processes import Occupant, occupants_of

INTERRUPTED = "interrupted"
UNKNOWN = "unknown"


class UnknownAttempt(OutpostError):
    """No kept attempt goes by that name; the message lists some that do."""


@dataclass
class Holds:
    """What a worktree holds beyond its last commit."""

    uncommitted: int = 0
    untracked: int = 0
    ignored: int = 0
    ignored_bytes: int = 0
    hidden: int = 0  # edits index flags (assume-unchanged, skip-worktree) hide from git status

    @property
    def anything(self) -> bool:
        return bool(self.uncommitted or self.untracked or self.ignored or self.hidden)

    def describe(self) -> str:
        parts = [
            f"{n} {what}"
            for n, what in (
                (self.uncommitted, "uncommitted"),
                (self.untracked, "untracked"),
                (self.hidden, "hidden by index flags"),
            )
            if n
        ]
        if self.ignored:
            parts.append(f"{self.ignored} ignored ({human_bytes(self.ignored_bytes)})")
        return ", ".join(parts) or "nothing beyond its last commit"

    def to_json(self) -> dict[str, Any]:
        return {
            "uncommitted": self.uncommitted,
            "untracked": self.untracked,
            "ignored": self.ignored,
            "ignored_bytes": self.ignored_bytes,
            "hidden": self.hidden,
        }


@dataclass
class RetainedAttempt:
    race_id: str
    key: str
    attempt: int
    branch: str
    path: str | None  # the worktree, when one is registered
    present: bool
    head: str | None
    baseline: str | None
    outcome: str  # a candidate status, "interrupted" or "unknown"
    reason: str | None
    verdict: dict[str, Any] | None = (
        None  # counts by verdict (issue 14's per-candidate verdict), when recorded
    )
    holds: Holds | None = None
    size_bytes: int | None = None
    age_seconds: float | None = None
    diff_stat: dict[str, Any] | None = None  # files, insertions, deletions (whole work against the baseline)
    container: dict[str, Any] | None = None
    occupants: list[Occupant] = field(default_factory=list)
    archive: str | None = None  # the archive commit, when one exists
    problem: str | None = None
    link_changed: bool = False
    locked: bool = False
    # what the race's setup put in the worktree (result JSON `setup.files`): never its work
    setup_files: list[str] = field(default_factory=list)

    @property
    def id(self) -> str:
        return f"{self.race_id}/{self.key}/{self.attempt}"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "race_id": self.race_id,
            "key": self.key,
            "attempt": self.attempt,
            "branch": self.branch,
            "path": self.path,
            "present": self.present,
            "head": self.head,
            "baseline": self.baseline,
            "outcome": self.outcome,
            "reason": self.reason,
            "verdict": self.verdict,
            "holds": self.holds.to_json() if self.holds else None,
            "size_bytes": self.size_bytes,
            "age_seconds": self.age_seconds,
            "diff_stat": self.diff_stat,
            "container": self.container,
            "occupants": [o.to_json() for o in self.occupants],
            "archive": self.archive,
            "problem": self.problem,
            "link_changed": self.link_changed,
            "locked": self.locked,
        }


@dataclass
class RetainedRace:
    id: str
    name: str | None
    status: str  # the race's status, or "unfinished" / "unknown"
    finished: bool
    started_at: float | None
    finished_at: float | None
    attempts: list[RetainedAttempt]

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "status": self.status,
            "finished": self.finished,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "attempts": [a.to_json() for a in self.attempts],
        }


def human_bytes(count: int | None) -> str:
    if count is None:
        return "?"
    value = float(count)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GB"


def human_age(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    for size, unit in ((86400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size:
            return f"{int(seconds // size)}{unit}"
    return f"{int(max(seconds, 0))}s"


# --- outcomes -----------------------------------------------------------------------------------


def _outcome(record: dict[str, Any]) -> tuple[str, str | None]:
    status = str(record.get("status") or UNKNOWN)
    validation = found if isinstance(found := record.get("validation"), dict) else {}
    if status == "rejected":
        reason = validation.get("reason") or (
            f"validation exited {validation.get('exit_code')}"
            if validation.get("exit_code") is not None
            else f"validation {validation.get('status', 'failed')}"
        )
        return status, str(reason)
    if status == "winner":
        return status, f"decided by {record.get('decided_by') or 'validation'}"
    if status == "quota":
        quota = found if isinstance(found := record.get("quota"), dict) else {}
        return status, str(
            quota.get("reason") or quota.get("message") or record.get("error") or "quota reached"
        )
    return status, (str(record["error"]) if record.get("error") else None)


def _verdict_counts(record: dict[str, Any]) -> dict[str, Any] | None:
    """The test counts of the candidate's verdict (the result JSON's `verdict`), when it was graded."""
    verdict = record.get("verdict")
    if not isinstance(verdict, dict):
        return None
    counts: dict[str, int] = {}
    tests = verdict.get("tests")
    if isinstance(tests, dict):
        counts.update({str(k): v for k, v in tests.items() if isinstance(v, int) and not isinstance(v, bool)})
    for name in ("new_failures", "missing", "flaky"):
        if isinstance(verdict.get(name), list) and verdict[name]:
            counts[name.replace("_", " ")] = len(verdict[name])
    return counts or None


def _setup_files(record: dict[str, Any] | None) -> list[str]:
    files = ((record or {}).get("setup") or {}).get("files") if isinstance(record, dict) else None
    return [path for path in files if isinstance(path, str) and path] if isinstance(files, list) else []


def _records(result: dict[str, Any] | None) -> dict[tuple[str, int], dict[str, Any]]:
    if not result:
        return {}
    found: dict[tuple[str, int], dict[str, Any]] = {}
    for group in ("previous_attempts", "candidates"):
        for record in result.get(group) or []:
            if isinstance(record, dict) and "key" in record and isinstance(record.get("attempt"), int):
                found[(str(record["key"]), record["attempt"])] = record
    return found


# --- the worktree's state -----------------------------------------------------------------------


def holds(directory: Path | str) -> Holds:
    """Count what the worktree holds beyond HEAD (git status, plus edits index flags hide)."""
    top = Path(directory)
    git.check_worktree_link(top)
    status, out, err = git.run(
        top,
        "--no-optional-locks",
        "status",
        "--porcelain=v1",
        "-z",
        "--untracked-files=all",
        "--ignored=matching",
        timeout=None,
    )
    if status != 0:
        raise git.GitError(f"git status failed in {top}: {git.error_line(str(err))}")
    found = Holds()
    entries = str(out).split("\0")
    index = 0
    while index < len(entries):
        entry = entries[index]
        index += 1
        if len(entry) < 4:
            continue
        code, path = entry[:2], entry[3:]
        if code[0] in "RC":
            index += 1
        if code == "??":
            found.untracked += 1
        elif code == "!!":
            found.ignored += 1
            found.ignored_bytes += (
                archive.disk_usage(top / path) if (top / path).is_dir() else _blocks(top / path)
            )
        else:
            found.uncommitted += 1
    found.hidden = len(git.hidden_edits(top))
    return found


def _blocks(path: Path) -> int:
    try:
        return os.lstat(path).st_blocks * 512
    except OSError:
        return 0


def whole_work(root: Path | str, attempt: RetainedAttempt) -> str:
    """The tree of an attempt's whole work: its worktree as on disk, else its archive, else its branch."""
    if attempt.present and attempt.path and not attempt.link_changed:
        return archive.snapshot(root, attempt.path, leave_out=attempt.setup_files)
    if attempt.archive:
        return git.output("reading the archive", root, "rev-parse", f"{attempt.archive}^{{tree}}")
    return str(
        git.output("reading the branch", root, "rev-parse", f"{attempt.head or attempt.branch}^{{tree}}")
    )


# --- the listing --------------------------------------------------------------------------------


def _baseline(root: Path, race_id: str, result: dict[str, Any] | None, head: str | None) -> str | None:
    if result and isinstance(recorded := result.get("baseline"), str):
        return recorded
    try:
        for event in history.iter_events(root, race_id):
            if isinstance(event, RaceStarted) and isinstance(event.baseline, str):
                return event.baseline
    except (history.UnknownRace, history.UnreadableRace, OSError, git.GitError):
        pass
    if head:
        status, out, _ = git.run(root, "merge-base", "HEAD", head, timeout=None, strip=True)
        return str(out) if status == 0 and out else None
    return None


def _attempt_branches(root: Path) -> list[tuple[archive.Attempt, str]]:
    out = str(
        git.output(
            "listing branches",
            root,
            "for-each-ref",
            "--format=%(refname:short) %(objectname)",
            f"refs/heads/{git.BRANCH_PREFIX}/",
        )
    )
    found = []
    for line in out.splitlines():
        branch, _, oid = line.partition(" ")
        attempt = archive.attempt_of(branch)
        if attempt is not None:
            found.append((attempt, oid))
    return found


def retained(
    repository: Path | str,
    *,
    now: float | None = None,
    detail: bool = True,
    containers: list[dict[str, Any]] | None = None,
    processes: bool = True,
) -> list[RetainedRace]:
    """Every race with a kept worktree or an archive, newest first, one row per attempt.

    `detail` False skips the costly columns (size, diff stat, holds); `processes` False skips the
    process scan."""
    root = git.repository_root(repository)
    now = time.time() if now is None else now
    worktrees = {a.label: (a, w) for a, w in archive.iter_attempt_worktrees(root)}
    archived = {a.label: (a, commit) for a, commit in archive.archives(root)}
    # an attempt whose worktree and archive are both gone still has its branch: listed, so that it
    # can be looked at, merged or deleted
    branches = {a.label: (a, commit) for a, commit in _attempt_branches(root)}
    recorded = {race.id: race for race in history.recorded_races(root)}
    race_ids = {a.race_id for kept in (worktrees, archived, branches) for a, _ in kept.values()}
    busy = occupants_of([w["path"] for _, w in worktrees.values() if not w["missing"]]) if processes else {}
    by_container = {
        (str(c.get("race")), str(c.get("key")), str(c.get("attempt"))): c for c in containers or []
    }
    races = []
    for race_id in race_ids:
        race = recorded.get(race_id)
        try:
            result = history.recorded_result(root, race_id) if race else None
        except (history.UnknownRace, history.UnreadableRace):
            result = None
        records = _records(result)
        rows = []
        labels = sorted(
            {label for label in [*worktrees, *archived, *branches] if label.startswith(race_id + "/")}
        )
        for label in labels:
            attempt = next(kept[label][0] for kept in (worktrees, archived, branches) if label in kept)
            worktree = worktrees.get(label, (None, None))[1]
            record = records.get((attempt.key, attempt.attempt))
            if record is not None:
                outcome, reason = _outcome(record)
            elif race is not None and not race.finished:
                outcome, reason = INTERRUPTED, "the race did not finish"
            else:
                outcome, reason = UNKNOWN, "no recorded result for this attempt"
            head = (worktree or {}).get("head") or git.branch_tip(root, f"refs/heads/{attempt.branch}")
            row = RetainedAttempt(
                attempt.race_id,
                attempt.key,
                attempt.attempt,
                attempt.branch,
                worktree["path"] if worktree else None,
                bool(worktree and not worktree["missing"]),
                head,
                _baseline(root, race_id, result, head),
                outcome,
                reason,
                verdict=_verdict_counts(record) if record else None,
                container=by_container.get((attempt.race_id, attempt.key, str(attempt.attempt))),
                occupants=busy.get(worktree["path"], []) if worktree else [],
                archive=archived[label][1] if label in archived else None,
                problem=(worktree or {}).get("problem"),
                link_changed=bool((worktree or {}).get("link_changed")),
                locked=bool((worktree or {}).get("locked")),
                setup_files=_setup_files(record),
            )
            started = race.started_at if race and race.started_at else None
            if row.present and row.path is not None:
                created: float | None
                try:
                    created = os.lstat(Path(row.path) / ".git").st_mtime
                except OSError:
                    created = started
                row.age_seconds = now - (created or now)
            elif started:
                row.age_seconds = now - started
            if detail:
                _detail(root, row)
            rows.append(row)
        races.append(
            RetainedRace(
                race_id,
                race.name if race else None,
                race.status if race else UNKNOWN,
                bool(race and race.finished),
                race.started_at if race else None,
                race.finished_at if race else None,
                rows,
            )
        )

    def newest(race: RetainedRace) -> tuple[float, str]:
        return race.started_at or 0.0, race.id

    return sorted(races, key=newest, reverse=True)


def _detail(root: Path, row: RetainedAttempt) -> None:
    if row.present and not row.link_changed and row.path is not None:
        try:
            row.holds = holds(row.path)
            row.size_bytes = archive.disk_usage(row.path)
        except (git.GitError, OSError) as error:
            row.problem = row.problem or str(error)
    if row.baseline and not row.link_changed:
        try:
            row.diff_stat = diff_stat(root, row.baseline, whole_work(root, row))
        except (git.GitError, OSError) as error:
            row.problem = row.problem or str(error)


def find(races: list[RetainedRace], ident: str) -> RetainedAttempt:
    """The attempt `ident` names: RACE/KEY/ATTEMPT, its branch, or its worktree's path."""
    wanted = ident.removeprefix(git.BRANCH_PREFIX + "/").rstrip("/")
    real = real_path(ident) if os.path.sep in ident or os.path.exists(ident) else None
    for race in races:
        for row in race.attempts:
            if row.id == wanted or (real and row.path and real_path(row.path) == real):
                return row
    known = [row.id for race in races for row in race.attempts][:5]
    raise UnknownAttempt(
        f"no retained attempt {ident!r} (use RACE/KEY/ATTEMPT, its branch or its worktree path"
        + (f"; known: {', '.join(known)}" if known else "; nothing is retained")
        + ")"
    )
