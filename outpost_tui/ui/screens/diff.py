"""A candidate's work as a diff against the race's baseline (read-only)."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, RichLog, Static

from ...engine import git
from ..widgets.header import OutpostHeader


class DiffScreen(Screen):
    BINDINGS = [Binding("escape,q", "dismiss", "Back", id="diff.back")]
    CSS_PATH = "diff.tcss"

    def __init__(self, repository: Path, baseline: str, revision: str, title: str) -> None:
        super().__init__()
        self.repository = repository
        self.baseline = baseline
        self.revision = revision
        self.heading = title

    def compose(self) -> ComposeResult:
        yield OutpostHeader()
        yield Static(self.heading, classes="title")
        yield RichLog(highlight=False, markup=False, wrap=False, id="diff")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.load()

    @work(thread=True, exclusive=True)
    def load(self) -> None:
        try:
            text = git.diff(self.repository, self.baseline, self.revision)
        except git.GitError as error:
            text = f"cannot show the diff: {error}"
        self.app.call_from_thread(self._show, text or "(no changes)")

    def _show(self, text: str) -> None:
        log = self.query_one(RichLog)
        for line in text.splitlines():
            style = (
                "green"
                if line.startswith("+") and not line.startswith("+++")
                else "red"
                if line.startswith("-") and not line.startswith("---")
                else "cyan"
                if line.startswith("@@")
                else "bold"
                if line.startswith("diff ")
                else ""
            )
            log.write(Text(line, style=style))
