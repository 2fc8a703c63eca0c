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

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
from ...engine.kept import cleanup
from ...engine.kept.retained import RetainedAttempt, RetainedRace
from ...engine.kept.revalidation import NotRecorded, revalidate
from ..kept_words import (
    archive_question,
    attempt_details,
    branches_question,
    merge_question,
    no_branch_can_go,
    prune_question,
    race_details,
    wrapped,
)
from ..kept_work import (
    archive_worktree,
    comparison,
    delete_branches,
    integrate,
    list_kept,
    merge_check,
    prune,
    relative,
    restore_worktree,
    whole_work_diff,
)
from ..paths import shown_path
from ..shell import open_shell
from ..widgets.header import OutpostHeader
from ..widgets.kept_table import RACE_ROW, KeptTable
from .confirm import ConfirmScreen
from .work_diff import WorkDiffScreen


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
            yield KeptTable(id="worktrees")
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
        return self.query_one("#worktrees", KeptTable).selected_key()

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

        def answered(yes: bool | None) -> None:
            if yes:
                then()

        self.app.push_screen(ConfirmScreen(wrapped(lines)), answered)

    def _relative(self, path: str | None) -> str:
        return relative(self.root, path)

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
        self._deliver(self._listed, *list_kept(self.repository, self.clock()))

    def _listed(self, root: Path | None, races: list[RetainedRace], error: str, note: str) -> None:
        self.root = root
        self.races = races
        self._show_error(error)
        self.query_one("#containers", Static).update(note)
        table = self.query_one("#worktrees", KeptTable)
        table.show(races, self.marked)
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
                details.update(race_details(race))
            return
        details.update(
            attempt_details(
                row, path=self._relative(row.path), again=self.verdicts.get(row.id), marked=self.marked
            )
        )

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
        try:
            title, patch = whole_work_diff(root, row)
        except (git.GitError, OSError) as error:
            self._deliver(self._show_error, f"no diff for {row.id}: {error}")
            return
        self._deliver(self.app.push_screen, WorkDiffScreen(title, patch))

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
            title, patch, summary = comparison(root, left, right)
        except (git.GitError, OSError) as error:
            self._deliver(self._show_error, f"no comparison: {error}")
            return
        self._deliver(self.app.push_screen, WorkDiffScreen(title, patch, summary))

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
        self._start_merge(git.MERGE)

    def action_cherry_pick(self) -> None:
        self._start_merge(git.CHERRY_PICK)

    def _start_merge(self, how: str) -> None:
        row = self._needs(self.selected())
        if row is None or self.root is None:
            return
        if how == git.CHERRY_PICK and not row.baseline:
            self._show_error(f"{row.id}: its baseline is unknown, so its own commits cannot be told apart")
            return
        self._check_merge(self.root, row, how)

    @work(thread=True, exclusive=True, group="merge", exit_on_error=False)
    def _check_merge(self, root: Path, row: RetainedAttempt, how: str) -> None:
        self._deliver(self._confirm_merge, root, row, how, *merge_check(root, row))

    def _confirm_merge(
        self, root: Path, row: RetainedAttempt, how: str, check: git.Integration, host: str
    ) -> None:
        if check.status == "blocked":
            self._show_error(f"not merged: {check.reason}")
            return
        if check.status == "conflict":
            self._show_error(f"not merged: {row.id} would conflict in {', '.join(check.conflicts[:5])}")
            return
        lines = merge_question(row, how, host)
        self._ask(lines, lambda: self._merge(root, row, how))

    @work(thread=True, exclusive=True, group="merge", exit_on_error=False)
    def _merge(self, root: Path, row: RetainedAttempt, how: str) -> None:
        self._deliver(self._merged, integrate(root, row, how))

    def _merged(self, outcome: git.MergeOutcome) -> None:
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
        lines = archive_question(row, include_ignored)
        root = self.root
        self._ask(lines, lambda: self._archive(root, row, include_ignored))

    @work(thread=True, exclusive=True, group="cleanup", exit_on_error=False)
    def _archive(self, root: Path, row: RetainedAttempt, include_ignored: bool) -> None:
        self._deliver(self._after, *archive_worktree(root, row, include_ignored))

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
        self._deliver(self._after, *restore_worktree(root, row))

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
        lines = prune_question(steps)
        root = self.root
        self._ask(lines, lambda: self._prune(root, steps))

    @work(thread=True, exclusive=True, group="cleanup", exit_on_error=False)
    def _prune(self, root: Path, steps: list[cleanup.PruneStep]) -> None:
        self._deliver(self._after, *prune(root, steps))

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
            self._show_error(no_branch_can_go(race_id, refused))
            return
        lines = branches_question(root, race_id, deletable, unmerged, refused)
        self._ask(lines, lambda: self._delete(root, race_id, deletable, unmerged))

    @work(thread=True, exclusive=True, group="cleanup", exit_on_error=False)
    def _delete(
        self, root: Path, race_id: str, checks: list[cleanup.BranchCheck], unmerged: list[cleanup.BranchCheck]
    ) -> None:
        self._deliver(self._after, *delete_branches(root, race_id, checks, unmerged))
