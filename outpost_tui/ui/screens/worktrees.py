"""Review what races kept (f3): every attempt's worktree or archive, grouped by race, newest first.

Each row says how the attempt ended and why, what its worktree holds beyond its last commit, its
size, age, whole-work diff stat against the baseline, and whether a process or container still runs
in it. From a row: the whole work as a diff (committed, uncommitted and untracked), a comparison
with a marked attempt, a shell in it, its merge or cherry-pick into the current branch (after a
fresh integration check and a confirmation), copying its branch or commit, archive-and-remove,
restore, and for the repository a prune and a race's branch deletion. Everything that removes
anything goes through the engine (engine/kept/: archive, removal, cleanup), which keeps the
work reachable first and refuses while a process uses the worktree.
"""

from __future__ import annotations

import os
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Static
from textual.worker import Worker, WorkerState, get_current_worker

from ...engine import git
from ...engine.core.result import Validation
from ...engine.errors import OutpostError
from ...engine.git import merge
from ...engine.kept import archive, cleanup
from ...engine.kept.comparison import touched, work_diff
from ...engine.kept.removal import archive_and_remove
from ...engine.kept.restore import restore
from ...engine.kept.retained import (
    RetainedAttempt,
    RetainedRace,
    human_age,
    human_bytes,
    retained,
    whole_work,
)
from ...engine.kept.revalidation import NotRecorded, revalidate
from ...engine.sandbox import SandboxError
from ...engine.sandbox.container_engine import list_containers
from ..paths import shown_path
from ..shell import open_shell
from ..widgets.header import OutpostHeader
from .confirm import ConfirmScreen
from .work_diff import WorkDiffScreen

RACE_ROW = "race:"
# A confirmation is read at 80 columns too: its lines are wrapped to fit the dialog there.
QUESTION_WIDTH = 68
OUTCOME_STYLE = {
    "winner": "bold green",
    "rejected": "red",
    "failed": "red",
    "quota": "yellow",
    "cancelled": "dim",
    "skipped": "dim",
    "interrupted": "yellow",
}


def holds_cell(row: RetainedAttempt) -> str:
    """What the worktree holds beyond its last commit, in a few characters (legend in the details)."""
    if not row.present:
        return "archived" if row.archive else "branch" if row.head and not row.path else "missing"
    if row.link_changed:
        return "link changed"
    if row.holds is None:
        return "?"
    held = row.holds
    parts = [
        f"{code}{n}"
        for code, n in (
            ("M", held.uncommitted),
            ("?", held.untracked),
            ("!", held.ignored),
            ("H", held.hidden),
        )
        if n
    ]
    return " ".join(parts) or "clean"


def diff_cell(row: RetainedAttempt) -> str:
    stat = row.diff_stat
    return f"{stat['files']}f +{stat['insertions']} -{stat['deletions']}" if stat else "—"


def live_cell(row: RetainedAttempt) -> str:
    marks = []
    if row.occupants:
        marks.append(f"{len(row.occupants)} proc")
    if row.container:
        marks.append("ctr " + str(row.container.get("status") or "?")[:4])
    return ", ".join(marks) or "—"


class WorktreesScreen(Screen):
    """The attempts races kept in one repository, with details and actions on the highlighted one."""

    CSS_PATH = "worktrees.tcss"
    BINDINGS = [
        Binding("r", "refresh", "Refresh", id="worktrees.refresh", show=False),
        Binding("d,enter", "diff", "Diff", id="worktrees.diff"),
        Binding("space", "mark", "Mark", id="worktrees.mark"),
        Binding("c", "compare", "Compare", id="worktrees.compare"),
        Binding("s", "shell", "Shell", id="worktrees.shell"),
        Binding("v", "revalidate", "Revalidate", id="worktrees.revalidate", show=False),
        Binding("m", "merge", "Merge", id="worktrees.merge"),
        Binding("M", "cherry_pick", "Cherry-pick", id="worktrees.cherry_pick", show=False),
        Binding("y", "copy('branch')", "Copy branch", id="worktrees.copy_branch", show=False),
        Binding("Y", "copy('commit')", "Copy commit", id="worktrees.copy_commit", show=False),
        Binding("a", "archive(False)", "Archive", id="worktrees.archive"),
        Binding("A", "archive(True)", "Archive +ignored", id="worktrees.archive_ignored", show=False),
        Binding("delete", "archive(False)", "Archive + remove", id="worktrees.remove", show=False),
        Binding("u", "restore", "Restore", id="worktrees.restore", show=False),
        Binding("P", "prune", "Prune", id="worktrees.prune"),
        Binding("B", "delete_branches", "Delete branches", id="worktrees.delete_branches", show=False),
        Binding(
            "D",
            "delete_branches(True)",
            "Archive unmerged + delete branches",
            id="worktrees.delete_branches_archived",
            show=False,
        ),
        Binding("escape", "dismiss", "Back", id="worktrees.back"),
    ]

    def __init__(self, repository: Path, *, clock: Callable[[], float] = time.time) -> None:
        super().__init__()
        self.repository = Path(repository)
        self.clock = clock
        self.root: Path | None = None
        self.races: list[RetainedRace] = []
        self.marked: str | None = None
        self.verdicts: dict[str, Validation] = {}  # validations run again from this screen
        self.busy_with: str | None = None

    def compose(self) -> ComposeResult:
        yield OutpostHeader()
        with Vertical():
            yield Static(f"Work kept in {shown_path(self.repository)}", id="title", markup=False)
            table: DataTable[str | Text] = DataTable(id="worktrees", cursor_type="row", zebra_stripes=True)
            table.add_columns("attempt", "outcome", "holds", "diff", "size", "age", "live")
            yield table
            yield Static(id="error", classes="error", markup=False)
            yield Static(id="containers", markup=False)
            with VerticalScroll(id="details-box"):
                yield Static("reading…", id="details", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.action_refresh()

    # ------------------------------------------------------------------------------ helpers

    def attempts(self) -> list[RetainedAttempt]:
        return [row for race in self.races for row in race.attempts]

    def selected_key(self) -> str | None:
        table = self.query_one("#worktrees", DataTable)
        if table.row_count == 0:
            return None
        return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value

    def selected(self) -> RetainedAttempt | None:
        key = self.selected_key()
        return next((row for row in self.attempts() if row.id == key), None)

    def selected_race(self) -> RetainedRace | None:
        key = self.selected_key() or ""
        race_id = key.removeprefix(RACE_ROW) if key.startswith(RACE_ROW) else key.split("/")[0]
        return next((race for race in self.races if race.id == race_id), None)

    def _deliver(self, callback: Callable[..., object], *args: Any) -> None:
        if not get_current_worker().is_cancelled:
            self.app.call_from_thread(self._landed, callback, *args)

    def _landed(self, callback: Callable[..., object], *args: Any) -> None:
        if self.is_attached:
            callback(*args)

    def _show_error(self, message: str) -> None:
        self.query_one("#error", Static).update(message)
        if message:
            self.notify(message, severity="error")

    def _say(self, message: str) -> None:
        self._show_error("")
        self.notify(message, timeout=8)

    @on(Worker.StateChanged)
    def _worker_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR:
            error = event.worker.error
            first = str(error).splitlines()[0] if str(error) else ""
            self._show_error(f"unexpected error: {type(error).__name__}: {first}")

    def _ask(self, lines: list[str], then: Callable[[], object]) -> None:
        """A confirmation of `lines` (plain text, wrapped to fit 80 columns); `then` runs on yes."""
        wrapped = "\n".join(textwrap.fill(line, QUESTION_WIDTH, subsequent_indent="  ") for line in lines)

        def answered(yes: bool | None) -> None:
            if yes:
                then()

        self.app.push_screen(ConfirmScreen(wrapped), answered)

    def _relative(self, path: str | None) -> str:
        if not path:
            return "—"
        if self.root is not None:
            try:
                return str(Path(path).relative_to(self.root))
            except ValueError:
                pass
        return path

    def _needs(self, row: RetainedAttempt | None, *, worktree: bool = False) -> RetainedAttempt | None:
        if row is None:
            self._show_error("select an attempt first (the rows under a race)")
            return None
        if worktree and not row.present:
            self._show_error(f"{row.id} has no worktree" + (" (u restores it)" if row.archive else ""))
            return None
        if worktree and row.link_changed:
            self._show_error(f"{row.id}: its git link was changed; look at it by hand, outpost-tui will not")
            return None
        return row

    # ------------------------------------------------------------------------------ listing

    def action_refresh(self) -> None:
        self._show_error("")
        self._list()

    @work(thread=True, exclusive=True, group="list", exit_on_error=False)
    def _list(self) -> None:
        try:
            root = git.repository_root(self.repository)
        except git.GitError as error:
            self._deliver(self._listed, None, [], str(error), "")
            return
        note = ""
        try:
            containers = list_containers(repository=str(root))
        except SandboxError as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else "unreachable"
            containers, note = [], f"Containers not listed: {first}"
        try:
            races = retained(root, now=self.clock(), containers=containers)
        except git.GitError as error:
            self._deliver(self._listed, root, [], str(error), note)
            return
        self._deliver(self._listed, root, races, "", note)

    def _listed(self, root: Path | None, races: list[RetainedRace], error: str, note: str) -> None:
        self.root = root
        self.races = races
        self._show_error(error)
        self.query_one("#containers", Static).update(note)
        table = self.query_one("#worktrees", DataTable)
        keep = self.selected_key()
        table.clear()
        for race in races:
            table.add_row(
                Text(f"▾ {race.id}", style="bold"),
                Text(race.status, style="bold"),
                "",
                "",
                "",
                "",
                "",
                key=RACE_ROW + race.id,
            )
            for row in race.attempts:
                mark = "● " if row.id == self.marked else "  "
                table.add_row(
                    f"{mark}{row.key}#{row.attempt}",
                    Text(row.outcome, style=OUTCOME_STYLE.get(row.outcome, "")),
                    holds_cell(row),
                    diff_cell(row),
                    human_bytes(row.size_bytes) if row.size_bytes is not None else "—",
                    human_age(row.age_seconds),
                    live_cell(row),
                    key=row.id,
                )
        keys = [RACE_ROW + r.id for r in races] + [row.id for row in self.attempts()]
        if keep in keys:
            table.move_cursor(row=table.get_row_index(keep))
        elif races and races[0].attempts:
            table.move_cursor(row=1)
        if not races:
            self.query_one("#details", Static).update(
                "" if error else f"Nothing kept in {root}: no worktree or archive of a race."
            )
        else:
            table.focus()
            self._show_details()

    # ------------------------------------------------------------------------------ details

    @on(DataTable.RowHighlighted, "#worktrees")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_details()

    def _show_details(self) -> None:
        details = self.query_one("#details", Static)
        row = self.selected()
        if row is None:
            race = self.selected_race()
            if race is not None:
                kept = sum(1 for r in race.attempts if r.present)
                details.update(
                    f"race {race.id}{' (' + race.name + ')' if race.name else ''}: {race.status}\n"
                    f"{len(race.attempts)} attempt(s), {kept} worktree(s) kept\n"
                    "B deletes its branches that hold nothing unmerged; P prunes every finished race"
                )
            return
        lines = [f"branch {row.branch}", f"{row.outcome}" + (f": {row.reason}" if row.reason else "")]
        if row.verdict:
            lines[-1] += "  verdict " + ", ".join(f"{k} {v}" for k, v in row.verdict.items())
        if row.present:
            lines.append(
                f"worktree {self._relative(row.path)}, {human_bytes(row.size_bytes)}, "
                f"{human_age(row.age_seconds)} old"
            )
            if row.holds is not None:
                lines.append(f"holds {row.holds.describe()}")
        elif row.archive:
            lines.append(f"archived at {row.archive[:12]} (u restores the worktree)")
        elif not row.path:
            lines.append("only its branch is kept (no worktree, no archive)")
        if row.archive and row.present:
            lines.append(f"an earlier archive is at {row.archive[:12]}")
        if row.id in self.verdicts:
            again = self.verdicts[row.id]
            lines.append(f"validated again: {again.status}" + (f" ({again.reason})" if again.reason else ""))
        if row.container:
            lines.append(f"container {row.container.get('name')} ({row.container.get('status')})")
        if row.occupants:
            lines.append("in use by " + "; ".join(o.describe() for o in row.occupants))
        if row.problem:
            lines.append(f"not inspected: {row.problem}")
        if self.marked and self.marked != row.id:
            lines.append(f"marked for compare: {self.marked} (c compares)")
        details.update("\n".join(lines))

    # ------------------------------------------------------------------------------ diff and compare

    def action_diff(self) -> None:
        row = self._needs(self.selected())
        if row is None or self.root is None:
            return
        if not row.baseline:
            self._show_error(f"{row.id}: its race's baseline is unknown, so there is nothing to diff against")
            return
        self._diff(self.root, row)

    @work(thread=True, exclusive=True, group="diff", exit_on_error=False)
    def _diff(self, root: Path, row: RetainedAttempt) -> None:
        assert row.baseline is not None, "action_diff lets only an attempt with a baseline through"
        try:
            patch = work_diff(root, row.baseline, whole_work(root, row))
        except (git.GitError, OSError) as error:
            self._deliver(self._show_error, f"no diff for {row.id}: {error}")
            return
        where = "worktree as it is" if row.present else "archive" if row.archive else "branch"
        self._deliver(
            self.app.push_screen,
            WorkDiffScreen(f"{row.id}: whole work ({where}) against baseline {row.baseline[:12]}", patch),
        )

    def action_mark(self) -> None:
        row = self._needs(self.selected())
        if row is None:
            return
        self.marked = None if self.marked == row.id else row.id
        self._listed(self.root, self.races, "", str(self.query_one("#containers", Static).content))

    def action_compare(self) -> None:
        row = self._needs(self.selected())
        if row is None or self.root is None:
            return
        other = next((r for r in self.attempts() if r.id == self.marked), None)
        if other is None or other.id == row.id:
            self._show_error("mark one attempt with space, then press c on another to compare them")
            return
        self._compare(self.root, other, row)

    @work(thread=True, exclusive=True, group="diff", exit_on_error=False)
    def _compare(self, root: Path, left: RetainedAttempt, right: RetainedAttempt) -> None:
        try:
            trees = whole_work(root, left), whole_work(root, right)
            mine = set(touched(root, left.baseline, trees[0])) if left.baseline else set()
            theirs = set(touched(root, right.baseline, trees[1])) if right.baseline else set()
            patch = work_diff(root, *trees)
        except (git.GitError, OSError) as error:
            self._deliver(self._show_error, f"no comparison: {error}")
            return

        def listed(paths: set[str]) -> str:
            return (
                ", ".join(sorted(paths)[:8]) + (f" and {len(paths) - 8} more" if len(paths) > 8 else "")
                or "none"
            )

        summary = (
            f"only {left.key}#{left.attempt}: {listed(mine - theirs)}\n"
            f"only {right.key}#{right.attempt}: {listed(theirs - mine)}\n"
            f"both: {listed(mine & theirs)}"
        )
        self._deliver(
            self.app.push_screen,
            WorkDiffScreen(f"{left.id} → {right.id}: the difference between their results", patch, summary),
        )

    # ------------------------------------------------------------------------------ shell, copy

    def action_shell(self) -> None:
        row = self._needs(self.selected(), worktree=True)
        if row is None:
            return
        assert row.path is not None, "_needs(worktree=True) lets only a present worktree through"
        self._say(open_shell(self.app, row.path))
        self.action_refresh()

    def action_copy(self, what: str) -> None:
        row = self._needs(self.selected())
        if row is None:
            return
        value = row.branch if what == "branch" else row.head
        if not value:
            self._show_error(f"{row.id} has no {what} to copy")
            return
        self.app.copy_to_clipboard(value)
        self._say(f"copied {what} {value}")

    # ------------------------------------------------------------------------------ revalidate

    def action_revalidate(self) -> None:
        row = self._needs(self.selected(), worktree=True)
        if row is None or self.root is None:
            return
        if row.occupants:
            self._show_error(
                f"{row.id} is in use by "
                + "; ".join(o.describe() for o in row.occupants)
                + ": validate it when that is done"
            )
            return
        self.notify(f"validating {row.id} again…")
        self._revalidate(self.root, row)

    @work(thread=True, exclusive=True, group="revalidate", exit_on_error=False)
    def _revalidate(self, root: Path, row: RetainedAttempt) -> None:
        assert row.path is not None, "_needs(worktree=True) lets only a present worktree through"
        try:
            verdict = revalidate(root, row.race_id, row.key, row.attempt, row.path)
        except (NotRecorded, git.GitError) as error:
            self._deliver(self._show_error, str(error))
            return
        self._deliver(self._revalidated, row.id, verdict)

    def _revalidated(self, ident: str, verdict: Validation) -> None:
        self.verdicts[ident] = verdict
        said = f"{ident} validated again: {verdict.status}" + (
            f" ({verdict.reason})" if verdict.reason else ""
        )
        if verdict.status == "passed":
            self._say(said)
        else:
            tail = verdict.output.strip().splitlines()[-3:]
            self._show_error(said + ("\n" + "\n".join(tail) if tail else ""))
        self._show_details()

    # ------------------------------------------------------------------------------ merge

    def action_merge(self) -> None:
        self._start_merge(merge.MERGE)

    def action_cherry_pick(self) -> None:
        self._start_merge(merge.CHERRY_PICK)

    def _start_merge(self, how: str) -> None:
        row = self._needs(self.selected())
        if row is None or self.root is None:
            return
        if how == merge.CHERRY_PICK and not row.baseline:
            self._show_error(f"{row.id}: its baseline is unknown, so its own commits cannot be told apart")
            return
        self._check_merge(self.root, row, how)

    @work(thread=True, exclusive=True, group="merge", exit_on_error=False)
    def _check_merge(self, root: Path, row: RetainedAttempt, how: str) -> None:
        check = git.integration_check(root, row.branch, row.head)
        host = git.host_snapshot(root).branch if check.status != "blocked" else ""
        self._deliver(self._confirm_merge, root, row, how, check, host)

    def _confirm_merge(
        self, root: Path, row: RetainedAttempt, how: str, check: git.Integration, host: str
    ) -> None:
        if check.status == "blocked":
            self._show_error(f"not merged: {check.reason}")
            return
        if check.status == "conflict":
            self._show_error(f"not merged: {row.id} would conflict in {', '.join(check.conflicts[:5])}")
            return
        verb = "Merge" if how == merge.MERGE else "Cherry-pick the commits of"
        lines = [
            f"{verb} {row.id} ({str(row.head)[:12]}) into {host}?",
            "Integration check just now: clean. Your git hooks run; nothing is pushed.",
        ]
        if row.holds is not None and row.holds.anything:
            lines.append(
                f"Its worktree also holds {row.holds.describe()}: not part of the {how} "
                "(commit it in a shell first, s)."
            )
        self._ask(lines, lambda: self._merge(root, row, how))

    @work(thread=True, exclusive=True, group="merge", exit_on_error=False)
    def _merge(self, root: Path, row: RetainedAttempt, how: str) -> None:
        if how == merge.MERGE:
            outcome = merge.merge(
                root, row.branch, expected_commit=row.head, message=f"Merge outpost candidate {row.id}"
            )
        else:
            assert row.baseline is not None, "_start_merge refuses a cherry-pick without a baseline"
            outcome = merge.cherry_pick(root, row.branch, row.baseline, expected_commit=row.head)
        self._deliver(self._merged, outcome)

    def _merged(self, outcome: merge.MergeOutcome) -> None:
        if outcome.done:
            self._say(outcome.message)
        else:
            self._show_error(outcome.message)

    # ------------------------------------------------------------------------------ archive, restore

    def action_archive(self, include_ignored: bool) -> None:
        row = self._needs(self.selected(), worktree=True)
        if row is None or self.root is None:
            return
        if row.occupants:
            self._show_error(
                f"not removed: {row.id} is in use by " + "; ".join(o.describe() for o in row.occupants)
            )
            return
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
        root = self.root
        self._ask(lines, lambda: self._archive(root, row, include_ignored))

    @work(thread=True, exclusive=True, group="cleanup", exit_on_error=False)
    def _archive(self, root: Path, row: RetainedAttempt, include_ignored: bool) -> None:
        assert row.path is not None, "_needs(worktree=True) lets only a present worktree through"
        try:
            removal = archive_and_remove(
                root,
                row.path,
                archive.Attempt(row.race_id, row.key, row.attempt),
                include_ignored=include_ignored,
            )
        except (git.GitError, OSError) as error:
            self._deliver(self._after, "", str(error))
            return
        self._deliver(
            self._after,
            f"archived {row.id} at {removal.archive.commit[:12]} and removed its worktree; "
            f"{human_bytes(removal.freed_bytes)} freed",
            "",
        )

    def _after(self, said: str, error: str) -> None:
        if error:
            self._show_error(error)
        else:
            self._say(said)
        self.action_refresh()

    def action_restore(self) -> None:
        row = self._needs(self.selected())
        if row is None or self.root is None:
            return
        if row.present or not row.archive:
            self._show_error(
                f"{row.id}: " + ("its worktree is here already" if row.present else "it has no archive")
            )
            return
        self._restore(self.root, row)

    @work(thread=True, exclusive=True, group="cleanup", exit_on_error=False)
    def _restore(self, root: Path, row: RetainedAttempt) -> None:
        try:
            target = restore(root, archive.Attempt(row.race_id, row.key, row.attempt))
        except (git.GitError, OSError) as error:
            self._deliver(self._after, "", str(error))
            return
        self._deliver(self._after, f"restored {row.id} into {self._relative(str(target))}", "")

    # ------------------------------------------------------------------------------ prune, branches

    def action_prune(self) -> None:
        if self.root is None:
            return
        steps = cleanup.plan_prune(self.races)
        removing = [s for s in steps if s.action == cleanup.REMOVE]
        if not removing:
            reasons = "; ".join(f"{s.attempt.id}: {s.why}" for s in steps[:3])
            self._show_error("nothing to prune" + (f" (kept {reasons})" if reasons else ""))
            return
        size = sum(s.attempt.size_bytes or 0 for s in removing)
        kept = [s for s in steps if s.action == cleanup.KEEP]
        lines = [
            f"Prune: archive and remove {len(removing)} worktree(s) of finished races, {human_bytes(size)}?",
            "Each is archived and checked before it goes; branches stay.",
        ]
        lines += [f"keep {s.attempt.id}: {s.why}" for s in kept[:4]]
        if len(kept) > 4:
            lines.append(f"and {len(kept) - 4} more kept")
        root = self.root
        self._ask(lines, lambda: self._prune(root, steps))

    @work(thread=True, exclusive=True, group="cleanup", exit_on_error=False)
    def _prune(self, root: Path, steps: list[cleanup.PruneStep]) -> None:
        report = cleanup.prune(root, steps)
        said = f"pruned {len(report.removed)} worktree(s), freed {human_bytes(report.freed_bytes)}"
        error = "; ".join(f"kept {ident}: {why}" for ident, why in report.failed)
        self._deliver(self._after, said, error)

    def action_delete_branches(self, archive_unmerged: bool = False) -> None:
        race = self.selected_race()
        if race is None or self.root is None:
            self._show_error("select a race (or one of its attempts) first")
            return
        self._check_branches(self.root, race.id, archive_unmerged)

    @work(thread=True, exclusive=True, group="cleanup", exit_on_error=False)
    def _check_branches(self, root: Path, race_id: str, archive_unmerged: bool) -> None:
        try:
            checks = cleanup.check_branches(root, race_id)
        except OutpostError as error:
            self._deliver(self._show_error, str(error))
            return
        self._deliver(self._confirm_branches, root, race_id, checks, archive_unmerged)

    def _confirm_branches(
        self, root: Path, race_id: str, checks: list[cleanup.BranchCheck], archive_unmerged: bool
    ) -> None:
        # only a branch without a worktree is archived here: one with a worktree goes with `a`
        unmerged = [c for c in checks if not c.deletable and c.unmerged] if archive_unmerged else []
        deletable = [c for c in checks if c.deletable]
        refused = [c for c in checks if not c.deletable and c not in unmerged]
        if not deletable and not unmerged:
            hint = (
                "; D archives branches with unmerged commits first"
                if any(c.unmerged for c in refused)
                else ""
            )
            self._show_error(
                f"no branch of race {race_id} can go: "
                + "; ".join(f"{c.branch.split('/', 3)[-1]}: {c.why}" for c in refused[:3])
                + hint
            )
            return
        lines = [f"Delete {len(deletable) + len(unmerged)} branch(es) of race {race_id}?"]
        lines += [
            f"archive, then delete {c.branch}: {c.why.removesuffix(': archive it first')}"
            for c in unmerged[:4]
        ]
        lines += [f"delete {c.branch}: {c.why}" for c in deletable[:4]]
        lines += [f"keep {c.branch}: {c.why.replace(str(root) + os.sep, '')}" for c in refused[:3]]
        self._ask(lines, lambda: self._delete(root, race_id, deletable, unmerged))

    @work(thread=True, exclusive=True, group="cleanup", exit_on_error=False)
    def _delete(
        self, root: Path, race_id: str, checks: list[cleanup.BranchCheck], unmerged: list[cleanup.BranchCheck]
    ) -> None:
        deleted, errors = 0, []
        if unmerged:
            try:
                for check in unmerged:
                    cleanup.archive_branch(root, check.branch)
                # checked again: now their commits are reachable from their archives
                again = {c.branch: c for c in cleanup.check_branches(root, race_id)}
            except git.GitError as error:
                self._deliver(self._after, "", str(error))
                return
            checks = checks + [again[c.branch] for c in unmerged if c.branch in again]
        for check in checks:
            try:
                cleanup.delete_branch(root, check)
                deleted += 1
            except git.GitError as error:
                errors.append(str(error))
        self._deliver(self._after, f"deleted {deleted} branch(es)", "; ".join(errors))
