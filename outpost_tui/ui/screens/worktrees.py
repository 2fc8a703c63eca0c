"""Review what races kept: the worktrees under .outpost/workspaces, their changes and commits, and the
containers that belong to the repository's runs.

Removing a worktree goes through `git.remove_worktree`, which never forces: a worktree with uncommitted,
untracked or ignored files stays, and the branch always stays, so a removal never loses work.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any, Callable

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Header, RichLog, Static
from textual.worker import Worker, WorkerState, get_current_worker

from ...engine import git
from ...engine.sandbox import SandboxError
from ...engine.sandbox.container import list_containers
from .confirm import ConfirmScreen

GIT_TIMEOUT = 30.0
LOG_COMMITS = 20
PATCH_COMMITS = 10
# A patch view is for reading: past this many lines the rest is cut, with a note saying so.
MAX_PATCH_LINES = 20000


def run_git(directory: str | Path, *args: str) -> str:
    """Read-only git in `directory`; the output, or one line saying why there is none."""
    try:
        # the engine's runner: an agent left these worktrees, and git reading them must not start
        # any program they (or the repository's config) name
        status, out, err = git.run(directory, "--no-optional-locks", *args, timeout=GIT_TIMEOUT)
    except git.GitError as error:
        return f"(git {args[0]} failed: {error})"
    if status != 0:
        reason = next((line for line in err.splitlines() if line.strip()), "no message")
        return f"(git {args[0]} failed: {reason.removeprefix('fatal: ')})"
    return out


def state_of(worktree: dict) -> str:
    if worktree.get("link_changed"):
        return "git link changed: not inspected"
    state = "missing" if worktree["missing"] else ("clean" if worktree["clean"] else "has changes")
    return f"{state}, locked" if worktree.get("locked") else state


def who(worktree: dict) -> str:
    if worktree.get("key"):
        return f"{worktree['key']}#{worktree['attempt']}"
    return worktree.get("branch") or "detached"


class WorktreesScreen(Screen):
    """The retained worktrees of one repository, with details of the highlighted one."""

    DEFAULT_CSS = """
    WorktreesScreen > Vertical { padding: 0 1; }
    WorktreesScreen #title { text-style: bold; margin: 1 0; }
    WorktreesScreen #worktrees { height: auto; max-height: 50%; }
    WorktreesScreen #containers { color: $text-muted; margin: 1 0 0 0; }
    WorktreesScreen #details-box { height: 1fr; border-top: solid $primary; margin-top: 1; }
    WorktreesScreen .error { color: $error; text-style: bold; }
    """
    BINDINGS = [
        Binding("r", "refresh", "Refresh", id="worktrees.refresh"),
        Binding("d", "diff", "Commits + patches", id="worktrees.diff"),
        Binding("o", "open", "Open (path)", id="worktrees.open"),
        Binding("delete", "remove", "Remove worktree", id="worktrees.remove"),
        Binding("escape", "app.pop_screen", "Back", id="worktrees.back"),
    ]

    def __init__(self, repository: Path) -> None:
        super().__init__()
        self.repository = Path(repository)
        self.root: Path | None = None
        self.worktrees: list[dict] = []

    def compose(self) -> ComposeResult:
        yield Header()
        with Vertical():
            yield Static(f"Worktrees kept in {self.repository}", id="title", markup=False)
            table = DataTable(id="worktrees", cursor_type="row", zebra_stripes=True)
            table.add_columns("candidate", "race", "state", "HEAD", "path")
            yield table
            yield Static(id="error", classes="error", markup=False)
            yield Static(id="containers", markup=False)
            with VerticalScroll(id="details-box"):
                yield Static(id="details", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.action_refresh()

    # ------------------------------------------------------------------------------ helpers

    def selected(self) -> dict | None:
        table = self.query_one("#worktrees", DataTable)
        if table.row_count == 0:
            return None
        path = table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value
        return next((w for w in self.worktrees if w["path"] == path), None)

    def _deliver(self, callback: Callable[..., None], *args: Any) -> None:
        if not get_current_worker().is_cancelled:
            self.app.call_from_thread(self._landed, callback, *args)

    def _landed(self, callback: Callable[..., None], *args: Any) -> None:
        if self.is_attached:
            callback(*args)

    def _show_error(self, message: str) -> None:
        self.query_one("#error", Static).update(message)
        if message:
            self.notify(message, severity="error")

    @on(Worker.StateChanged)
    def _worker_changed(self, event: Worker.StateChanged) -> None:
        if event.state == WorkerState.ERROR:
            error = event.worker.error
            self._show_error(f"unexpected error: {type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}")

    # ------------------------------------------------------------------------------ listing

    def action_refresh(self) -> None:
        self._show_error("")
        self.query_one("#containers", Static).update("Looking for containers…")
        self._list()
        self._containers()

    @work(thread=True, exclusive=True, group="list", exit_on_error=False)
    def _list(self) -> None:
        try:
            root = git.repository_root(self.repository)
            worktrees = git.list_worktrees(root)
        except git.GitError as error:
            self._deliver(self._listed, None, [], str(error))
            return
        self._deliver(self._listed, root, worktrees, "")

    def _listed(self, root: Path | None, worktrees: list[dict], error: str) -> None:
        self.root = root
        self.worktrees = worktrees
        self._show_error(error)
        table = self.query_one("#worktrees", DataTable)
        keep = self.selected()
        table.clear()
        for w in worktrees:
            table.add_row(who(w), w.get("race_id") or "—", state_of(w), str(w.get("head") or "")[:12], w["path"],
                          key=w["path"])
        if keep is not None and any(w["path"] == keep["path"] for w in worktrees):
            table.move_cursor(row=table.get_row_index(keep["path"]))
        if not worktrees:
            self.query_one("#details", Static).update(
                "" if error else f"No retained worktrees in {root}.")
        else:
            table.focus()
            self._show_details()

    @work(thread=True, exclusive=True, group="containers", exit_on_error=False)
    def _containers(self) -> None:
        try:
            root = git.repository_root(self.repository)
            containers = list_containers(repository=str(root))
        except git.GitError:
            self._deliver(self._containers_listed, "")
            return
        except SandboxError as error:
            first = str(error).strip().splitlines()[0] if str(error).strip() else "unreachable"
            self._deliver(self._containers_listed, f"Containers not listed: {first}")
            return
        if not containers:
            self._deliver(self._containers_listed, "No containers of this repository's races.")
            return
        lines = [f"container {c.get('name')} ({c.get('status')}) for {c.get('key')}#{c.get('attempt')} "
                 f"of race {c.get('race')}" for c in containers]
        self._deliver(self._containers_listed, "\n".join(lines))

    def _containers_listed(self, text: str) -> None:
        self.query_one("#containers", Static).update(text)

    # ------------------------------------------------------------------------------ details

    @on(DataTable.RowHighlighted, "#worktrees")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_details()

    def _show_details(self) -> None:
        worktree = self.selected()
        if worktree is None or self.root is None:
            return
        self.query_one("#details", Static).update(f"{worktree['path']}\n\nreading…")
        self._details(self.root, dict(worktree))

    @work(thread=True, exclusive=True, group="details", exit_on_error=False)
    def _details(self, root: Path, worktree: dict) -> None:
        lines = [f"{worktree['path']}", f"branch {worktree.get('branch') or '(detached)'}, {state_of(worktree)}", ""]
        if worktree["missing"]:
            lines.append("The directory is missing: only git's record of it is left (delete clears it).")
        elif worktree.get("link_changed"):
            # git in it would read a configuration the worktree chose: look at it by hand
            lines.append(worktree.get("problem") or "its .git link no longer leads to this repository")
        else:
            # --ignored too: ignored files also keep a worktree from being removed.
            status = run_git(worktree["path"], "status", "--short", "--untracked-files=normal", "--ignored")
            lines += ["git status --short --ignored:", status.rstrip() or "(nothing to commit, working tree clean)"]
        revision = worktree.get("branch") or worktree.get("head")
        if revision:
            log = run_git(root, "log", "--oneline", "--no-decorate", "-n", str(LOG_COMMITS), revision, "--")
            lines += ["", f"commits on {revision} (latest {LOG_COMMITS}):", log.rstrip() or "(none)"]
        self._deliver(self._details_shown, worktree["path"], "\n".join(lines))

    def _details_shown(self, path: str, text: str) -> None:
        selected = self.selected()
        if selected is not None and selected["path"] == path:
            self.query_one("#details", Static).update(text)

    # ------------------------------------------------------------------------------ actions

    def action_open(self) -> None:
        worktree = self.selected()
        if worktree is None:
            return
        self.notify(f"{worktree['path']}\ncd {shlex.quote(worktree['path'])}", title="Open in a shell",
                    timeout=15)

    def action_diff(self) -> None:
        worktree = self.selected()
        if worktree is None or self.root is None:
            return
        revision = worktree.get("branch") or worktree.get("head")
        self.app.push_screen(BranchLogScreen(self.root, revision, f"{who(worktree)}: {revision}"))

    def action_remove(self) -> None:
        worktree = self.selected()
        if worktree is None or self.root is None:
            return
        path = worktree["path"]
        if not worktree["missing"] and not worktree["clean"]:
            self._show_error(f"not removed: {path} has uncommitted, untracked or ignored files "
                             f"(or a detached HEAD); commit or clean them first")
            return
        if worktree.get("locked"):
            self._show_error(f"not removed: {path} is locked (git worktree unlock it first)")
            return
        branch = worktree.get("branch")
        kept = f" Its branch {branch} is kept." if branch else ""
        question = (f"Forget the missing worktree {path}?{kept}" if worktree["missing"]
                    else f"Remove worktree {path}?{kept}")
        root = self.root

        def answered(yes: bool | None) -> None:
            if yes:
                self._remove(root, path)

        self.app.push_screen(ConfirmScreen(question), answered)

    @work(thread=True, exclusive=True, group="remove", exit_on_error=False)
    def _remove(self, root: Path, path: str) -> None:
        try:
            removed = git.remove_worktree(root, path)
        except git.GitError as error:
            self._deliver(self._removed, path, False, str(error))
            return
        self._deliver(self._removed, path, removed, "")

    def _removed(self, path: str, removed: bool, error: str) -> None:
        if removed:
            self._show_error("")
            self.notify(f"removed {path}; its branch is kept")
        else:
            self._show_error(error or f"not removed: {path} is not clean (uncommitted, untracked or ignored "
                                      f"files, a detached HEAD, or a lock)")
        self.action_refresh()


class BranchLogScreen(Screen):
    """A branch's latest commits with their stats and patches (read-only)."""

    BINDINGS = [Binding("escape,q", "app.pop_screen", "Back", id="worktrees.log.back")]
    DEFAULT_CSS = """
    BranchLogScreen .title { padding: 0 1; background: $panel; }
    BranchLogScreen RichLog { height: 1fr; }
    """

    def __init__(self, repository: Path, revision: str, title: str) -> None:
        super().__init__()
        self.repository = repository
        self.revision = revision
        self.heading = title

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static(f"{self.heading} — latest {PATCH_COMMITS} commits", classes="title", markup=False)
        yield RichLog(highlight=False, markup=False, wrap=False, id="log")
        yield Footer()

    def on_mount(self) -> None:
        self.load()

    @work(thread=True, exclusive=True, exit_on_error=False)
    def load(self) -> None:
        text = run_git(self.repository, "log", "-p", "--stat", "--no-color", "--no-ext-diff", "--no-textconv",
                       "-n", str(PATCH_COMMITS), self.revision, "--")
        if not get_current_worker().is_cancelled:
            self.app.call_from_thread(self._show, text)

    def _show(self, text: str) -> None:
        if not self.is_attached:
            return
        log = self.query_one(RichLog)
        lines = text.splitlines() or ["(no commits)"]
        for line in lines[:MAX_PATCH_LINES]:
            style = ("green" if line.startswith("+") and not line.startswith("+++") else
                     "red" if line.startswith("-") and not line.startswith("---") else
                     "cyan" if line.startswith("@@") else
                     "bold yellow" if line.startswith("commit ") else "")
            log.write(Text(line, style=style))
        if len(lines) > MAX_PATCH_LINES:
            log.write(Text(f"… {len(lines) - MAX_PATCH_LINES} more lines not shown", style="bold"))
        log.scroll_home(animate=False)
