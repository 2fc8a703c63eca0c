"""How a race ended, and the way to its merge: the leaderboard (one row per attempt), the winner's
merge after a fresh integration check, copying a branch or commit, a shell in a worktree, the
race again, and the report exported as Markdown and JSON.

The screen reads the result document only (a live race's or a recorded one's): what it shows is
what `run --json` said. Merging is the engine's (engine/git/merge.py): never a push, refused when the
check says blocked or conflict, the user's own hooks run.
"""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Footer, Static

from ...engine import git
from ...engine.core.text import visible
from ...engine.records import report
from ..footer_order import FooterOrder
from ..outcome_style import OUTCOME_STYLE
from ..shell import open_shell
from ..widgets.header import OutpostHeader
from .confirm import ConfirmScreen


class ResultScreen(FooterOrder):
    CSS_PATH = "result.tcss"
    BINDINGS = [
        Binding("m", "merge", "Merge", id="result.merge", tooltip="Merge the winner into your branch"),
        Binding("b", "copy('branch')", "Branch", id="result.copy_branch", tooltip="Copy the branch"),
        Binding("y", "copy('commit')", "Commit", id="result.copy_commit", tooltip="Copy the commit"),
        Binding("o", "shell", "Shell", id="result.shell", tooltip="A shell in the worktree"),
        Binding("e", "export", "Export", id="result.export", tooltip="Report as Markdown and JSON"),
        Binding("r", "rerun", "Rerun", id="result.rerun", tooltip="Run the race file again"),
        Binding("d", "diff", "Diff", id="result.diff"),
        Binding("escape", "back", "Back", id="result.back"),
    ]
    FOOTER_FIRST = ("merge", "copy", "shell", "export", "rerun")
    FOOTER_LAST = ("diff", "back")

    def __init__(self, result: dict, *, race_file: Path | None = None, recorded: bool = False) -> None:
        super().__init__()
        self.result = result
        self.rows = report.leaderboard(result)
        self.race_file = race_file
        self.recorded = recorded
        repository = result.get("repository")
        self.repository = Path(repository) if repository else None
        self.merged: git.MergeOutcome | None = None

    def compose(self) -> ComposeResult:
        yield OutpostHeader()
        yield Static(Text(report.headline(self.result)), id="headline")
        # before the merge: the winner was made by a candidate that could reach the user's repository
        warning = (self.result.get("isolation") or {}).get("warning")
        if warning:
            # one line (its end cut on a narrow terminal); the whole of it on hover
            said = f"⚠ {visible(str(warning))}"
            shown = Static(said, id="isolation", markup=False)
            shown.tooltip = said
            yield shown
        yield DataTable(id="leaderboard", cursor_type="row", zebra_stripes=True)
        yield Static("", id="detail", markup=False)
        yield Static("", id="outcome", markup=False)
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.title = f"outpost-tui · {self.result.get('name', 'race')} · result"
        self.sub_title = f"race {self.result.get('id')}" + (" (recorded)" if self.recorded else "")
        table = self.query_one("#leaderboard", DataTable)
        # Short columns first, the reason last: at 80 columns the numbers stay in view, and the
        # detail below the table gives the selected attempt's reason in full.
        dimensions = [
            (name, label)
            for name, label in report.TOKEN_DIMENSIONS
            if name != "cache_write" or any(row.tokens[name] for row in self.rows)
        ]
        table.add_columns(
            "candidate",
            "try",
            "status",
            "cost",
            "time",
            *(label for _, label in reversed(dimensions)),
            "score",
            "tests",
            "review",
            "reason",
        )
        for index, row in enumerate(self.rows):
            name = ("  " + row.key) if row.superseded else row.key
            table.add_row(
                name,
                str(row.attempt),
                Text(row.status, style=OUTCOME_STYLE.get(row.status, "")),
                row.cost,
                row.time,
                *(report.count(row.tokens[n]) for n, _ in reversed(dimensions)),
                row.score,
                _clip(row.tests, 24),
                Text(f"⚑ {len(row.review)}", style="bold yellow") if row.review else "",
                _clip(row.reason, 60),
                key=str(index),
            )
        table.focus()
        self._show_detail()

    # ------------------------------------------------------------------------------ reading

    def selected(self) -> report.Row | None:
        table = self.query_one("#leaderboard", DataTable)
        if not self.rows:
            return None
        return self.rows[max(0, min(table.cursor_row, len(self.rows) - 1))]

    def winner(self) -> report.Row | None:
        return next((row for row in self.rows if row.status == "winner" and not row.superseded), None)

    @on(DataTable.RowHighlighted, "#leaderboard")
    def _show_detail(self) -> None:
        row = self.selected()
        detail = self.query_one("#detail", Static)
        if row is None:
            detail.update("no attempts")
            return
        lines = [
            f"{row.key} attempt {row.attempt} ({row.agent}): {row.status}"
            + (f" · {row.reason}" if row.reason else "")
        ]
        lines.append(
            f"branch {row.branch or '–'}   commit {str(row.commit or '–')[:12]}   "
            f"worktree {row.directory or '–'}"
        )
        lines.append(
            f"tokens {row.tokens_text}   cost {row.cost}   time {row.time}"
            + (f"   score {row.score}" if row.score else "")
            + (f"   tests {row.tests}" if row.tests else "")
        )
        lines += [f"⚑ review before merging: {flag}" for flag in row.review]
        detail.update("\n".join(lines))

    def say(self, text: str, error: bool = False) -> None:
        outcome = self.query_one("#outcome", Static)
        outcome.update(text)
        outcome.set_class(error, "-error")
        self.notify(text, severity="error" if error else "information", markup=False)

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        if action == "merge":
            return self.winner() is not None and self.repository is not None
        if action == "rerun":
            return self.race_file is not None
        return True

    # ------------------------------------------------------------------------------ actions

    def action_back(self) -> None:
        self.dismiss()

    def action_copy(self, what: str) -> None:
        row = self.selected()
        value = None if row is None else row.branch if what == "branch" else row.commit
        if not value:
            self.say(f"{row.key if row else 'this attempt'} has no {what} to copy", error=True)
            return
        self.app.copy_to_clipboard(value)
        self.say(f"copied {what} {value}")

    def action_shell(self) -> None:
        row = self.selected()
        if row is None or not row.directory or not Path(row.directory).is_dir():
            self.say(
                f"{row.key if row else 'this attempt'}: its worktree is not kept "
                "(only dirty or retained ones are)",
                error=True,
            )
            return
        self.say(open_shell(self.app, row.directory))

    def action_diff(self) -> None:
        from .diff import DiffScreen

        row = self.selected()
        baseline = self.result.get("baseline")
        if row is None or not row.branch or not baseline or self.repository is None:
            self.say("no branch to diff", error=True)
            return
        self.app.push_screen(
            DiffScreen(
                self.repository,
                baseline,
                row.commit or row.branch,
                f"{row.key}#{row.attempt}: {row.branch} against {baseline[:12]}",
            )
        )

    def action_export(self) -> None:
        if self.repository is None:
            self.say("the result names no repository to export into", error=True)
            return
        self._export(self.repository)

    @work(thread=True, exclusive=True, group="export", exit_on_error=False)
    def _export(self, repository: Path) -> None:
        try:
            md, js = report.export(self.result, repository)
        except (OSError, git.GitError) as error:
            self.app.call_from_thread(self.say, f"not exported: {error}", True)
            return
        self.app.call_from_thread(self.say, f"report exported: {md} and {js}")

    def action_rerun(self) -> None:
        if self.race_file is None:
            return
        race_file = self.race_file

        def answer(yes: bool | None) -> None:
            if yes:
                self.dismiss()
                self.host.open_race(race_file, start=True)

        self.app.push_screen(
            ConfirmScreen(f"Run the race in {race_file} again, as the file says now?"), answer
        )

    # ------------------------------------------------------------------------------ merge

    def action_merge(self) -> None:
        row = self.winner()
        if row is None or self.repository is None or not row.commit:
            self.say("no winner to merge", error=True)
            return
        self.say(f"checking how {row.key} merges into your current branch…")
        self._check(self.repository, row, row.commit)

    @work(thread=True, exclusive=True, group="merge", exit_on_error=False)
    def _check(self, root: Path, row: report.Row, commit: str) -> None:
        try:
            check = git.integration_check(root, commit, commit)
            host = git.host_snapshot(root).branch if check.status != "blocked" else ""
        except git.GitError as error:
            self.app.call_from_thread(self.say, f"not merged: {error}", True)
            return
        self.app.call_from_thread(self._confirm, root, row, check, host)

    def _confirm(self, root: Path, row: report.Row, check: git.Integration, host: str) -> None:
        if check.status == "blocked":
            self.say(f"not merged: {check.reason}", error=True)
            return
        if check.status == "conflict":
            self.say(f"not merged: {row.key} would conflict in {', '.join(check.conflicts[:5])}", error=True)
            return
        flags = f" Review first: {'; '.join(row.review)}." if row.review else ""
        question = (
            f"Merge {row.key} ({str(row.commit)[:12]}, the validated commit) into {host or 'HEAD'}? "
            f"Integration check just now: clean. Your git hooks run; nothing is pushed.{flags}"
        )

        def answer(yes: bool | None) -> None:
            if yes:
                self._merge(root, row)
            else:
                self.say("not merged")

        self.app.push_screen(ConfirmScreen(question), answer)

    @work(thread=True, exclusive=True, group="merge", exit_on_error=False)
    def _merge(self, root: Path, row: report.Row) -> None:
        outcome = git.merge_candidate(
            root,
            str(row.commit),
            expected_commit=row.commit,
            message=f"Merge outpost winner {row.key} (race {self.result.get('id')})",
        )
        self.app.call_from_thread(self._merged, outcome)

    def _merged(self, outcome: git.MergeOutcome) -> None:
        self.merged = outcome
        self.say(outcome.message, error=not outcome.done)


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"
