"""A yes/no question: `y` or `enter` accepts, `n` or `escape` refuses."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static


class ConfirmScreen(ModalScreen[bool]):
    CSS_PATH = "confirm.tcss"
    BINDINGS = [
        Binding("y,enter", "answer(True)", "Yes", id="confirm.yes"),
        Binding("n,escape", "answer(False)", "No", id="confirm.no"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static(self.question, classes="question", markup=False)
            yield Static("[b]y[/b]/enter yes   [b]n[/b]/escape no", classes="keys")

    def action_answer(self, answer: bool) -> None:
        self.dismiss(answer)
